"""The tree as one Placement, tried as an operator would: osc-placement and
openstacksdk, unchanged, pointed at the root zone of a real three-process
tree (root over cells dfw and ord, four hosts each), see and change the
providers that live in the cells' databases."""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_real_clients import _osc, ks_session, openstack, token_endpoint
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)
from tests.e2e.test_zone_tree import children, stop_all, wait_for, zone
from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]


class NovaLoop:
    """Eight schedulers as Nova's, at `url`: candidates for `query`, claim one
    of them with PUT /allocations/{instance}, ask again on a 409 (a lost race),
    until nothing fits. With `outages_ok`, a 503 (a zone that did not answer)
    is counted and asked again too; `must_have`: a provider every candidate
    uses."""

    def __init__(self, url: str, query: str, *, must_have: str | None = None,
                 outages_ok: bool = False) -> None:
        self.url, self.query = url, query
        self.must_have, self.outages_ok = must_have, outages_ok
        self.claimed: list[str] = []
        self.outages = 0
        self._lock = threading.Lock()

    def _scheduler(self) -> None:
        h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.36"}
        with httpx.Client(base_url=self.url, headers=h, timeout=30) as c:
            while True:
                r = c.get(f"/allocation_candidates?{self.query}")
                assert r.status_code == 200, r.text
                cands = r.json()["allocation_requests"]
                if not cands:
                    return
                pick = random.choice(cands)
                assert self.must_have is None or self.must_have in pick["allocations"], pick
                consumer = str(uuid.uuid4())
                r = c.put(f"/allocations/{consumer}", json={
                    **pick, "project_id": "p", "user_id": "u", "consumer_generation": None})
                if r.status_code == 204:
                    with self._lock:
                        self.claimed.append(consumer)
                elif r.status_code == 503 and self.outages_ok:
                    with self._lock:
                        self.outages += 1
                    time.sleep(0.2)
                else:
                    assert r.status_code == 409, r.text  # lost a race: ask again

    def run(self, clients: int = 8, meanwhile: Callable[[], None] | None = None) -> None:
        threads = [threading.Thread(target=self._scheduler) for _ in range(clients)]
        for t in threads:
            t.start()
        if meanwhile is not None:
            meanwhile()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)


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
    loop = NovaLoop(root.url, "resources=VCPU:2&limit=4")
    loop.run()
    claimed = loop.claimed
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


def _aggregate(c: httpx.Client, rp: str, agg: str, traits: list[str] | None = None) -> None:
    gen = c.get(f"/resource_providers/{rp}").json()["generation"]
    r = c.put(f"/resource_providers/{rp}/aggregates",
              json={"aggregates": [agg], "resource_provider_generation": gen})
    assert r.status_code == 200, r.text
    if traits:
        r = c.put(f"/resource_providers/{rp}/traits", json={
            "traits": traits, "resource_provider_generation": r.json()[
                "resource_provider_generation"]})
        assert r.status_code == 200, r.text


def disk_pool(url: str, agg: str) -> str:
    """A 400 GB disk pool at the zone at `url`, shared by aggregate `agg`."""
    with api.client(url) as c:
        pool = api.make_provider(c, "disk-pool", {"DISK_GB": {"total": 400}})
        _aggregate(c, pool, agg, ["MISC_SHARES_VIA_AGGREGATE"])
    return pool


def test_a_nova_claim_loop_takes_disk_from_the_roots_pool_while_a_cell_pauses(
        tmp_path: Path) -> None:
    """Root (a 400 GB disk pool shared by aggregate) over dfw and ord (four
    8-VCPU hosts each, in the pool's aggregate). Eight Nova-style schedulers
    at the root ask for VCPU:2,DISK_GB:25: each candidate combines a cell's
    host with the root's pool, and each claim is one PUT at the root that
    spans two zones. ord is frozen (SIGSTOP) for a while: writes to it fail
    (503), nothing of them stays once it is back. The pool is what runs out:
    exactly 16 claims, every one whole in both zones."""
    root = zone(tmp_path, "root", extra=["--hold-ttl", "3"]).start()
    procs = {"root": root}
    agg = str(uuid.uuid4())
    try:
        pool = disk_pool(root.url, agg)
        for name in ("dfw", "ord"):
            procs[name] = zone(tmp_path, name, root, ["--location-prefix", name,
                                                      "--hold-ttl", "3"]).start()
            with api.client(procs[name].url) as c:
                for i in range(4):
                    _aggregate(c, api.make_provider(c, f"{name}-h{i}", {"VCPU": {"total": 8}}),
                               agg)
        with api.client(root.url) as c:
            wait_for(lambda: {k for k, v in children(c).items()
                              if (v.get("summary") or {}).get("providers") == 4}
                     == {"dfw", "ord"})
        loop = NovaLoop(root.url, "resources=VCPU:2,DISK_GB:25&limit=4", must_have=pool,
                        outages_ok=True)

        def freeze_ord() -> None:
            time.sleep(0.5)
            procs["ord"].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            time.sleep(3)
            procs["ord"].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        loop.run(meanwhile=freeze_ord)
        claimed, outages = loop.claimed, loop.outages
        assert len(claimed) == 16, (len(claimed), outages)

        def totals() -> tuple[int, int]:
            vcpu = 0
            for cell in ("dfw", "ord"):
                with api.client(procs[cell].url) as c:
                    for p in c.get("/resource_providers").json()["resource_providers"]:
                        u = api.usages(c, p["uuid"])
                        assert u.get("VCPU", 0) <= 8, (cell, p["name"], u)
                        vcpu += u.get("VCPU", 0)
            with api.client(root.url) as c:
                disk = api.usages(c, pool).get("DISK_GB", 0)
            return vcpu, disk
        # Parts in doubt at ord when it froze are cancelled once it answers.
        wait_for(lambda: totals() == (32, 400), timeout=30)
        with api.client(root.url) as c:
            old = {"openstack-api-version": "placement 1.9"}
            # Once the root's probes see ord again (a frozen zone's backoff).
            wait_for(lambda: c.get("/usages?project_id=p", headers=old).status_code == 200)
            r = c.get("/usages?project_id=p", headers=old)
            assert r.json()["usages"] == {
                "VCPU": 32, "DISK_GB": 400}
            for consumer in claimed[:4]:
                got = c.get(f"/allocations/{consumer}").json()["allocations"]
                assert got[pool]["resources"] == {"DISK_GB": 25} and len(got) == 2
                assert c.delete(f"/allocations/{consumer}").status_code == 204
        assert totals() == (24, 300)
    finally:
        stop_all(procs)


def test_a_cells_provider_read_and_written_at_the_root_keeps_placements_cache_headers(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    """From microversion 1.15 Placement answers a provider's GETs (and its
    inventory, trait and aggregate writes) with `Cache-Control: no-cache` and
    a `Last-Modified`; a provider that lives in a cell, asked through the
    root, got neither (the root passed on only the child's body)."""
    root = cells["root"]
    with api.client(cells["dfw"].url) as c:
        rp = next(p["uuid"] for p in c.get("/resource_providers?name=dfw-h0").json()[
            "resource_providers"])
    h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.15"}
    with httpx.Client(base_url=root.url, headers=h, timeout=30) as c:
        for path in ("", "/inventories", "/inventories/VCPU", "/traits", "/aggregates",
                     "/usages", "/allocations"):
            r = c.get(f"/resource_providers/{rp}{path}")
            assert r.status_code == 200, r.text
            assert r.headers.get("cache-control") == "no-cache", (path, r.headers)
            assert "GMT" in r.headers.get("last-modified", ""), (path, r.headers)
        gen = c.get(f"/resource_providers/{rp}").json()["generation"]
        r = c.put(f"/resource_providers/{rp}/traits",
                  json={"resource_provider_generation": gen, "traits": ["HW_CPU_X86_SSE"]})
        assert r.status_code == 200, r.text
        assert r.headers.get("cache-control") == "no-cache", r.headers
        assert "GMT" in r.headers.get("last-modified", ""), r.headers
        # Before 1.15, none (as Placement).
        r = c.get(f"/resource_providers/{rp}",
                  headers={"openstack-api-version": "placement 1.14"})
        assert r.status_code == 200, r.text
        assert "last-modified" not in r.headers and "cache-control" not in r.headers


def test_an_allocation_on_a_provider_in_no_zone_names_that_provider_at_the_root(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    """A write naming a cell's provider and one that is nowhere is Placement's
    400 naming the one that does not exist; the root named the cell's (the
    first provider its own store lacks), which does exist."""
    root = cells["root"]
    with api.client(cells["dfw"].url) as c:
        rp = next(p["uuid"] for p in c.get("/resource_providers?name=dfw-h0").json()[
            "resource_providers"])
    ghost = "ffffffff-ffff-4fff-bfff-ffffffffffff"  # sorts after the cell's provider
    want = f"Allocation for resource provider '{ghost}' that does not exist."
    h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
    one = {"allocations": {rp: {"resources": {"VCPU": 1}}, ghost: {"resources": {"VCPU": 1}}},
           "project_id": "p", "user_id": "u", "consumer_generation": None,
           "consumer_type": "INSTANCE"}
    consumer = str(uuid.uuid4())
    with httpx.Client(base_url=root.url, headers=h, timeout=30) as c:
        for r in (c.put(f"/allocations/{consumer}", json=one),
                  c.post("/allocations", json={consumer: one})):
            assert r.status_code == 400, r.text
            assert r.json()["errors"][0]["detail"] == want, r.text
        assert c.get(f"/allocations/{consumer}").json()["allocations"] == {}


def test_a_class_and_a_trait_a_cell_made_that_no_provider_has_are_known_at_the_root(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    """A custom trait or class made in a cell, that no provider has yet, is in
    the tree's registry (`GET /traits` at the root lists it): a query naming
    it is Placement's 200 with nothing found, not a 400 "No such trait". The
    root learned only the names its children's summaries list, those some
    provider has."""
    root = cells["root"]
    with api.client(cells["dfw"].url) as c:
        assert c.put("/traits/CUSTOM_CELL_ONLY").status_code == 201
        assert c.put("/resource_classes/CUSTOM_CELL_ONLY").status_code == 201
    time.sleep(1.2)  # past the root's last round of learning names (once a second)
    h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
    with httpx.Client(base_url=root.url, headers=h, timeout=30) as c:
        assert "CUSTOM_CELL_ONLY" in c.get("/traits").json()["traits"]
        r = c.get("/resource_providers?required=CUSTOM_CELL_ONLY")
        assert r.status_code == 200, r.text
        assert r.json()["resource_providers"] == []
        r = c.get("/allocation_candidates?resources=CUSTOM_CELL_ONLY:1")
        assert r.status_code == 200, r.text
        assert r.json()["allocation_requests"] == []


def test_a_trait_a_cell_made_just_after_the_root_asked_for_it_is_found_at_once(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    """A query at the root naming a trait nobody has is a 400; the trait is
    then made in a cell, and the same query at once is Placement's 200. The
    root's rounds of learning names were at most one a second, so the second
    query was answered from the first round: a 400 for a name that exists."""
    h = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
    with httpx.Client(base_url=cells["root"].url, headers=h, timeout=30) as root, \
            api.client(cells["ord"].url) as cell:
        for i in range(3):
            name = f"CUSTOM_JUST_MADE_{i}"
            r = root.get(f"/resource_providers?required={name}")
            assert r.status_code == 400, r.text
            assert cell.put(f"/traits/{name}").status_code == 201
            r = root.get(f"/resource_providers?required={name}")
            assert r.status_code == 200, r.text
            assert r.json()["resource_providers"] == []
            r = root.get(f"/allocation_candidates?resources=VCPU:1&required={name}")
            assert r.status_code == 200, r.text
