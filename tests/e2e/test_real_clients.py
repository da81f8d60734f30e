"""Real OpenStack clients against a real Strato server: openstacksdk's placement
proxy and osc-placement's `openstack resource ...` commands, unchanged, with
the admin token of development mode (as against Placement with noauth2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import ServerProcess

openstack = pytest.importorskip("openstack")
token_endpoint = pytest.importorskip("keystoneauth1.token_endpoint")
ks_session = pytest.importorskip("keystoneauth1.session")

AGG = "11111111-2222-3333-4444-555555555555"
# The SDK warns about its own internals that it plans to remove.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("clients")
    with ServerProcess(f"sqlite:///{tmp / 'strato.db'}", log_path=tmp / "server.log") as s:
        yield s


@pytest.fixture
def placement(server: ServerProcess) -> Any:
    conn = openstack.connection.Connection(
        session=ks_session.Session(auth=token_endpoint.Token(server.url, "admin")),
        placement_endpoint_override=server.url, placement_api_version="1.39")
    return conn.placement


def test_openstacksdk_placement_proxy(placement: Any) -> None:
    p = placement
    rp = p.create_resource_provider(name=f"sdk-{uuid.uuid4().hex[:8]}")
    rp = p.set_resource_provider_inventories(
        rp, {"VCPU": {"total": 8, "allocation_ratio": 2.0}, "MEMORY_MB": {"total": 4096}},
        resource_provider_generation=0)
    assert rp.generation == 1
    assert sorted((i.resource_class, i.total) for i in p.resource_provider_inventories(rp.id)) \
        == [("MEMORY_MB", 4096), ("VCPU", 8)]
    inv = p.get_resource_provider_inventory("VCPU", rp.id)
    inv = p.update_resource_provider_inventory(inv, resource_provider_generation=1, total=16)
    assert inv.total == 16
    rp = p.get_resource_provider(rp.id)
    assert p.set_resource_provider_aggregates(rp, AGG).aggregates == [AGG]
    assert p.fetch_resource_provider_aggregates(rp.id).aggregates == [AGG]
    p.create_trait("CUSTOM_SDK_TRAIT")
    assert "CUSTOM_SDK_TRAIT" in {t.name for t in p.traits()}
    p.create_resource_class(name="CUSTOM_SDK_CLASS")
    assert p.get_resource_class("CUSTOM_SDK_CLASS").name == "CUSTOM_SDK_CLASS"

    cands = list(p.allocation_candidates(resources="VCPU:2,MEMORY_MB:512", limit=5))
    assert [list(c.allocations) for c in cands] == [[rp.id]]
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    p.update_allocation(first, allocations={rp.id: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}},
                        project_id="p", user_id="u", consumer_generation=None,
                        consumer_type="INSTANCE")
    p.create_allocations({second: {"allocations": {rp.id: {"resources": {"VCPU": 1}}},
                                   "project_id": "p", "user_id": "u",
                                   "consumer_generation": None, "consumer_type": "INSTANCE"}})
    assert p.get_allocation(first).allocations[rp.id]["resources"] == {"VCPU": 2,
                                                                       "MEMORY_MB": 512}
    assert p.fetch_resource_provider_usages(rp.id).usages == {"VCPU": 3, "MEMORY_MB": 512}
    assert [(u.consumer_type, u.consumer_count, u.resources) for u in p.usages("p")] == [
        ("INSTANCE", 2, {"VCPU": 3, "MEMORY_MB": 512})]
    with pytest.raises(openstack.exceptions.ConflictException):
        p.delete_resource_provider(rp)  # in use
    p.delete_allocation(first)
    p.delete_allocation(second)
    assert p.fetch_resource_provider_usages(rp.id).usages == {"VCPU": 0, "MEMORY_MB": 0}
    p.update_resource_provider(rp.id, name=rp.name + "-renamed")
    assert p.find_resource_provider(rp.name + "-renamed").id == rp.id
    p.delete_resource_provider(rp)
    p.delete_trait("CUSTOM_SDK_TRAIT")
    p.delete_resource_class("CUSTOM_SDK_CLASS")
    with pytest.raises(openstack.exceptions.NotFoundException):
        p.get_resource_provider(rp.id)


def _osc(server: ServerProcess, *args: str, quiet: bool = False) -> Any:
    """`openstack ARGS -f json` (osc-placement), as an operator would run it
    (`quiet`: a command that prints nothing, without `-f json`)."""
    env = {**os.environ, "OS_AUTH_TYPE": "admin_token", "OS_TOKEN": "admin",
           "OS_ENDPOINT": server.url, "OS_PLACEMENT_API_VERSION": "1.39"}
    cli = Path(sys.executable).with_name("openstack")
    fmt = [] if quiet else ["-f", "json"]
    done = subprocess.run([str(cli), *args, *fmt], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


@pytest.mark.slow
def test_osc_placement_commands(server: ServerProcess) -> None:
    name = f"osc-{uuid.uuid4().hex[:8]}"
    rp = _osc(server, "resource", "provider", "create", name)["uuid"]
    _osc(server, "resource", "provider", "inventory", "set", rp, "--resource", "VCPU=16",
         "--resource", "VCPU:allocation_ratio=2.0", "--resource", "MEMORY_MB=65536")
    _osc(server, "resource", "provider", "trait", "set", rp, "--trait", "HW_CPU_X86_AVX2")
    cands = _osc(server, "allocation", "candidate", "list", "--resource", "VCPU=2",
                 "--required", "HW_CPU_X86_AVX2")
    assert [c["resource provider"] for c in cands] == [rp]
    consumer = str(uuid.uuid4())
    _osc(server, "resource", "provider", "allocation", "set", consumer, "--project-id", "p",
         "--user-id", "u", "--consumer-type", "INSTANCE", "--allocation",
         f"rp={rp},VCPU=2,MEMORY_MB=1024")
    usage = {u["resource_class"]: u["usage"]
             for u in _osc(server, "resource", "provider", "usage", "show", rp)}
    assert usage == {"VCPU": 2, "MEMORY_MB": 1024}
    _osc(server, "resource", "provider", "allocation", "delete", consumer, quiet=True)
    _osc(server, "resource", "provider", "delete", rp, quiet=True)
    assert name not in {r["name"] for r in _osc(server, "resource", "provider", "list")}
