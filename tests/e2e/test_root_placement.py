"""The tree as one Placement, tried as an operator would: osc-placement and
openstacksdk, unchanged, pointed at the root zone of a real three-process
tree (root over cells dfw and ord, four hosts each), see and change the
providers that live in the cells' databases."""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import httpx
import pytest

from tests.e2e.test_real_clients import _osc, ks_session, openstack, token_endpoint
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)
from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]


def test_osc_and_the_sdk_at_the_root_see_the_cells(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    root = cells["root"]
    listed = {p["name"]: p["uuid"] for p in _osc(root, "resource", "provider", "list")}
    assert {f"{c}-h{i}" for c in ("dfw", "ord") for i in range(4)} <= set(listed)
    h = listed["ord-h2"]
    inv = _osc(root, "resource", "provider", "inventory", "list", h)
    assert [i["resource_class"] for i in inv] == ["VCPU"]
    _osc(root, "resource", "provider", "trait", "set", h, "--trait", "HW_CPU_X86_AVX2")
    with api.client(cells["ord"].url) as c:
        traits = c.get(f"/resource_providers/{h}/traits").json()["traits"]
    assert traits == ["HW_CPU_X86_AVX2"]
    cands = _osc(root, "allocation", "candidate", "list", "--resource", "VCPU=2",
                 "--required", "HW_CPU_X86_AVX2")
    assert {c["resource provider"] for c in cands} == {h}

    conn: Any = openstack.connection.Connection(
        session=ks_session.Session(auth=token_endpoint.Token(root.url, "admin")),
        placement_endpoint_override=root.url, placement_api_version="1.39")
    sdk = {p.name: p for p in conn.placement.resource_providers()}
    assert {f"{c}-h{i}" for c in ("dfw", "ord") for i in range(4)} <= set(sdk)
    got = conn.placement.get_resource_provider(listed["dfw-h0"])
    assert got.name == "dfw-h0"


def test_a_nova_claim_loop_against_the_root_fills_the_tree_exactly(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    """8 schedulers as Nova's: candidates at the root, claim the first with
    PUT /allocations/{instance}, retry on 409, until nothing fits."""
    root = cells["root"]
    claimed: list[str] = []
    lock = threading.Lock()
    h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.36"}

    def scheduler() -> None:
        with httpx.Client(base_url=root.url, headers=h, timeout=30) as c:
            while True:
                r = c.get("/allocation_candidates?resources=VCPU:2&limit=4")
                assert r.status_code == 200, r.text
                cands = r.json()["allocation_requests"]
                if not cands:
                    return
                pick = random.choice(cands)
                consumer = str(uuid.uuid4())
                r = c.put(f"/allocations/{consumer}", json={
                    **pick, "project_id": "p", "user_id": "u", "consumer_generation": None})
                if r.status_code == 204:
                    with lock:
                        claimed.append(consumer)
                else:
                    assert r.status_code == 409, r.text  # lost a race: ask again

    threads = [threading.Thread(target=scheduler) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(claimed) == 32  # 8 hosts of 8 VCPU, 2 each
    total = 0
    for cell in ("dfw", "ord"):
        with api.client(cells[cell].url) as c:
            for p in c.get("/resource_providers").json()["resource_providers"]:
                used = c.get(f"/resource_providers/{p['uuid']}/usages").json()["usages"]
                assert used.get("VCPU", 0) <= 8, (cell, p["name"], used)
                total += used.get("VCPU", 0)
    assert total == 64
    with api.client(root.url) as c:
        old = {"openstack-api-version": "placement 1.9"}
        assert c.get("/usages?project_id=p", headers=old).json()["usages"]["VCPU"] == 64
        # Each consumer is seen and released at the root, whichever cell it is in.
        for consumer in claimed[:6]:
            assert c.get(f"/allocations/{consumer}").json()["allocations"]
            assert c.delete(f"/allocations/{consumer}").status_code == 204
        assert c.get("/usages?project_id=p", headers=old).json()["usages"]["VCPU"] == 52
