"""Mutual TLS for the links between zones (`--tls-cert`, `--tls-key`, `--tls-ca`).

With a certificate and its key a zone serves https; with a CA as well it
asks every client for a certificate signed by that CA (mutual TLS) and
verifies the zones it calls against it, presenting its own certificate to
them. So a zone link is authenticated on both sides, whichever side calls.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Tls:
    cert: str
    key: str
    ca: str | None = None

    @staticmethod
    def of(cert: str | None, key: str | None, ca: str | None) -> Tls | None:
        """The TLS settings, or None for plain http; ValueError naming the
        option that is wrong."""
        if cert is None and key is None:
            if ca is not None:
                raise ValueError("--tls-ca needs --tls-cert and --tls-key (this zone's own "
                                 "certificate, shown to the zones it calls)")
            return None
        if cert is None or key is None:
            raise ValueError("--tls-cert and --tls-key go together")
        for flag, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca)):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{flag}: {path} is not a readable file")
        tls = Tls(cert, key, ca)
        try:
            tls.client_context()  # the files are a certificate, its key and a CA
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"--tls-cert/--tls-key/--tls-ca: {exc}") from None
        return tls

    def client_context(self) -> ssl.SSLContext:
        """For calls to other zones: verify them (against the CA, else the
        system's), present this zone's certificate."""
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def server_options(self) -> dict[str, Any]:
        """uvicorn's options: https, and a client certificate required when a
        CA is given."""
        out: dict[str, Any] = {"ssl_certfile": self.cert, "ssl_keyfile": self.key}
        if self.ca is not None:
            out |= {"ssl_ca_certs": self.ca, "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return out
