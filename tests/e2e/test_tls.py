"""Mutual TLS between zones (issue 15): a root and a cell on https, each
asking the other for a certificate signed by their CA. The cell registers and
places over https; a client with no certificate, with one from another CA,
or speaking plain http is refused; a frozen cell costs the child timeout
over https too, not a hang."""

from __future__ import annotations

import datetime
import ipaddress
import signal
import ssl
import time
import uuid
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from strato.process import ServerProcess
from tests.e2e.test_zone_tree import TIMING, wait_for
from tests.helpers import api

pytestmark = pytest.mark.slow


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(d: Path, tag: str) -> tuple[str, str, str]:
    """A CA and one certificate for 127.0.0.1 (server and client use): files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(f"{tag} CA")).issuer_name(_name(
        f"{tag} CA")).public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(f"{tag} zone")).issuer_name(
        ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256()))
    paths = (d / f"{tag}.crt", d / f"{tag}.key", d / f"{tag}-ca.crt")
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return str(paths[0]), str(paths[1]), str(paths[2])


def test_zones_over_mutual_tls(tmp_path: Path) -> None:
    good = make_pki(tmp_path, "good")
    rogue = make_pki(tmp_path, "rogue")
    root = ServerProcess(f"sqlite:///{tmp_path / 'root.db'}", tls=good,
                         extra=["--zone", "root", *TIMING], log_path=tmp_path / "root.log")
    cell = ServerProcess(f"sqlite:///{tmp_path / 'cell.db'}", tls=good,
                         extra=["--zone", "cell", "--parent", "", *TIMING],
                         log_path=tmp_path / "cell.log")
    with root:
        assert root.url.startswith("https://")
        cell.extra[cell.extra.index("--parent") + 1] = root.url
        with cell:
            opts = root.client_options()
            h = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}
            with httpx.Client(base_url=cell.url, headers=h, **opts) as c:
                api.make_provider(c, "cell-h0", {"VCPU": {"total": 8}})
            with httpx.Client(base_url=root.url, headers=h, timeout=30, **opts) as c:
                def ready() -> bool:
                    kids = c.get("/strato/v1/children").json()["children"]
                    return any(k["name"] == "cell" and k["url"].startswith("https://")
                               and (k.get("summary") or {}).get("providers") == 1
                               for k in kids)
                wait_for(ready)
                r = c.post("/strato/v1/schedule", json={
                    "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 2}}]})
                assert r.status_code == 200, r.text
                assert r.json()["placements"][0]["zone"] == "root/cell"

                # Refused: no certificate, another CA's, plain http.
                no_cert = ssl.create_default_context(cafile=good[2])
                rogue_cert = ssl.create_default_context(cafile=good[2])
                rogue_cert.load_cert_chain(rogue[0], rogue[1])
                for bad in (no_cert, rogue_cert):
                    with pytest.raises(httpx.HTTPError), httpx.Client(verify=bad) as other:
                        other.get(f"{root.url}/healthz").raise_for_status()
                with pytest.raises(httpx.HTTPError):
                    httpx.get(root.url.replace("https", "http") + "/healthz", timeout=5)
                # The server's certificate is checked too: not by the system's CAs.
                system_cas = ssl.create_default_context()
                system_cas.load_cert_chain(good[0], good[1])
                with pytest.raises(httpx.HTTPError):
                    httpx.get(f"{root.url}/healthz", verify=system_cas, timeout=5)

                # A frozen cell: the root answers within about its child timeout.
                assert cell.proc is not None
                cell.proc.send_signal(signal.SIGSTOP)
                try:
                    start = time.monotonic()
                    r = c.post("/strato/v1/schedule", json={
                        "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                        "groups": [{"resources": {"VCPU": 2}}]})
                    took = time.monotonic() - start
                    assert r.status_code == 503, r.text
                    assert took < 6, took
                finally:
                    cell.proc.send_signal(signal.SIGCONT)
