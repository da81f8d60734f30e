"""Nova's instance lifecycle against the root of a real tree (root over cells
dfw and ord, four 8-VCPU hosts each), with the requests Nova's report client
sends: boot (candidates at 1.36, claim with the candidate and
`consumer_generation: null`), resize or migrate (`move_allocations`: the
instance's allocations swapped to the migration consumer in one
`POST /allocations` at 1.28, then the claim on the destination), revert
(swapped back), confirm (the migration's allocations emptied with a `PUT`),
evacuation (the instance's allocations doubled onto the new host, then the
old host dropped), shelve offload and unshelve, delete. Each step is checked
in the cell's own database, and usages at the root count each once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from strato.process import ServerProcess
from tests.e2e.test_root_placement import _aggregate, disk_pool
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)
from tests.e2e.test_zone_tree import children, stop_all, wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow

PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())


def nova(url: str, version: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={
        "x-auth-token": "admin", "openstack-api-version": f"placement {version}"})


class Report:
    """The calls of Nova's SchedulerReportClient used by a lifecycle."""

    def __init__(self, url: str) -> None:
        self.url = url

    def allocs(self, consumer: str) -> dict[str, Any]:
        with nova(self.url, "1.28") as c:
            r = c.get(f"/allocations/{consumer}")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def candidates(self, query: str) -> list[dict[str, Any]]:
        with nova(self.url, "1.36") as c:
            r = c.get(f"/allocation_candidates?{query}")
            assert r.status_code == 200, r.text
            assert "x-strato-incomplete" not in r.headers
            return list(r.json()["allocation_requests"])

    def claim(self, consumer: str, candidate: dict[str, Any]) -> httpx.Response:
        """scheduler utils claim_resources: a new consumer, or one whose
        current allocations are doubled up with the candidate's (a move)."""
        current = self.allocs(consumer)
        body = {**candidate, "project_id": PROJECT, "user_id": USER,
                "consumer_generation": current.get("consumer_generation")}
        if current["allocations"]:
            merged = {rp: {"resources": dict(a["resources"])}
                      for rp, a in current["allocations"].items()}
            for rp, a in candidate["allocations"].items():
                mine = merged.setdefault(rp, {"resources": {}})["resources"]
                for rc, n in a["resources"].items():
                    mine[rc] = mine.get(rc, 0) + n
            body["allocations"] = merged
        with nova(self.url, "1.36") as c:
            return c.put(f"/allocations/{consumer}", json=body)

    def move(self, source: str, target: str) -> httpx.Response:
        """move_allocations: source's allocations to target, source emptied."""
        s, t = self.allocs(source), self.allocs(target)
        with nova(self.url, "1.28") as c:
            return c.post("/allocations", json={
                source: {"allocations": {}, "project_id": s["project_id"],
                         "user_id": s["user_id"],
                         "consumer_generation": s["consumer_generation"]},
                target: {"allocations": s["allocations"], "project_id": s["project_id"],
                         "user_id": s["user_id"],
                         "consumer_generation": t.get("consumer_generation")}})

    def drop_provider(self, consumer: str, rp: str) -> httpx.Response:
        """remove_provider_tree_from_instance_allocation (an evacuation's end)."""
        current = self.allocs(consumer)
        with nova(self.url, "1.28") as c:
            return c.put(f"/allocations/{consumer}", json={
                "allocations": {u: {"resources": a["resources"]}
                                for u, a in current["allocations"].items() if u != rp},
                "project_id": current["project_id"], "user_id": current["user_id"],
                "consumer_generation": current["consumer_generation"]})

    def delete(self, consumer: str) -> bool:
        """delete_allocation_for_instance: GET, then PUT empty allocations."""
        current = self.allocs(consumer)
        if not current["allocations"]:
            return False
        current["allocations"] = {}
        with nova(self.url, "1.28") as c:
            r = c.put(f"/allocations/{consumer}", json=current)
            assert r.status_code == 204, r.text
        return True


def on_host(candidates: list[dict[str, Any]], host: str) -> dict[str, Any]:
    found = [c for c in candidates if host in c["allocations"]]
    assert found, (host, candidates)
    return found[0]


def test_an_instance_s_whole_lifecycle_through_the_root(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    root = cells["root"]
    report = Report(root.url)
    with api.client(root.url) as c:
        names = {p["name"]: p["uuid"] for p in c.get("/resource_providers").json()[
            "resource_providers"]}
    d0, d1, d2, o0 = names["dfw-h0"], names["dfw-h1"], names["dfw-h2"], names["ord-h0"]
    flavor = "limit=1000&resources=VCPU:2&root_required=!COMPUTE_STATUS_DISABLED"

    def cell_allocs(cell: str, consumer: str) -> set[str]:
        with api.client(cells[cell].url) as c:
            return set(c.get(f"/allocations/{consumer}").json()["allocations"])

    inst = str(uuid.uuid4())
    r = report.claim(inst, on_host(report.candidates(flavor), d0))
    assert r.status_code == 204, r.text
    assert cell_allocs("dfw", inst) == {d0}
    # Resize to dfw-h1: swap to the migration, claim the destination.
    mig = str(uuid.uuid4())
    assert report.move(inst, mig).status_code == 204
    assert cell_allocs("dfw", inst) == set() and cell_allocs("dfw", mig) == {d0}
    r = report.claim(inst, on_host(report.candidates(flavor), d1))
    assert r.status_code == 204, r.text
    # Revert: the migration's source allocations back to the instance.
    r = report.move(mig, inst)
    assert r.status_code == 204, r.text
    assert cell_allocs("dfw", inst) == {d0} and cell_allocs("dfw", mig) == set()
    # Resize again, confirmed: the migration's allocations removed.
    mig = str(uuid.uuid4())
    assert report.move(inst, mig).status_code == 204
    assert report.claim(inst, on_host(report.candidates(flavor), d1)).status_code == 204
    assert report.delete(mig)
    assert cell_allocs("dfw", inst) == {d1} and cell_allocs("dfw", mig) == set()
    # A second swap with the generation it read before is Nova's
    # AllocationMoveFailed: 409 'consumer generation conflict'.
    stale = report.allocs(inst)
    assert report.claim(inst, on_host(report.candidates(flavor), d2)).status_code == 204
    with nova(root.url, "1.28") as c:
        r = c.post("/allocations", json={inst: {
            "allocations": {}, "project_id": PROJECT, "user_id": USER,
            "consumer_generation": stale["consumer_generation"]}})
    assert r.status_code == 409, r.text
    assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
    assert "consumer generation conflict" in r.json()["errors"][0]["detail"]
    # Evacuation from dfw-h1: the instance's allocations on dfw-h1 and h2
    # (claimed just above, as an evacuation's scheduler does), then h1 dropped.
    assert report.drop_provider(inst, d1).status_code == 204
    assert cell_allocs("dfw", inst) == {d2}
    # Shelve offload, unshelve into ord.
    assert report.delete(inst) and cell_allocs("dfw", inst) == set()
    r = report.claim(inst, on_host(report.candidates(flavor), o0))
    assert r.status_code == 204, r.text
    assert cell_allocs("ord", inst) == {o0}
    with nova(root.url, "1.38") as c:
        r = c.get(f"/usages?project_id={PROJECT}")
        assert r.json()["usages"] == {"unknown": {"VCPU": 2, "consumer_count": 1}}
    # Delete.
    assert report.delete(inst) and not report.delete(inst)
    with nova(root.url, "1.9") as c:
        assert c.get(f"/usages?project_id={PROJECT}").json()["usages"] == {}


def test_a_nova_boot_takes_disk_from_the_roots_pool(tmp_path: Path) -> None:
    """Nova's boot query carries root_required=!COMPUTE_STATUS_DISABLED: the
    root pairs its disk pool with the cells' hosts in the pool's aggregate
    (it offered no candidate), the claim spans the root and a cell; a
    disabled compute is left out. The instance's resize then is a clear 400
    (a swap of allocations spanning zones is not made), with nothing moved,
    and its delete removes both parts."""
    root = zone(tmp_path, "root", extra=["--hold-ttl", "3"]).start()
    procs = {"root": root}
    agg = str(uuid.uuid4())
    try:
        pool = disk_pool(root.url, agg)
        procs["dfw"] = zone(tmp_path, "dfw", root, ["--location-prefix", "dfw"]).start()
        with api.client(procs["dfw"].url) as c:
            hosts = [api.make_provider(c, f"dfw-h{i}", {"VCPU": {"total": 8}})
                     for i in range(2)]
            for h in hosts:
                _aggregate(c, h, agg)
            gen = c.get(f"/resource_providers/{hosts[1]}").json()["generation"]
            r = c.put(f"/resource_providers/{hosts[1]}/traits", json={
                "traits": ["COMPUTE_STATUS_DISABLED"], "resource_provider_generation": gen})
            assert r.status_code == 200, r.text
        with api.client(root.url) as c:
            wait_for(lambda: (children(c).get("dfw", {}).get("summary") or {}).get(
                "providers") == 2)
        report = Report(root.url)
        cands = report.candidates("limit=1000&resources=DISK_GB:10,VCPU:1"
                                  "&root_required=!COMPUTE_STATUS_DISABLED")
        assert [set(a["allocations"]) for a in cands] == [{hosts[0], pool}]
        inst = str(uuid.uuid4())
        r = report.claim(inst, cands[0])
        assert r.status_code == 204, r.text
        assert set(report.allocs(inst)["allocations"]) == {hosts[0], pool}
        r = report.move(inst, str(uuid.uuid4()))
        assert r.status_code == 400, r.text
        assert "migration consumer" in r.json()["errors"][0]["detail"]
        assert set(report.allocs(inst)["allocations"]) == {hosts[0], pool}
        assert report.delete(inst)
        with api.client(root.url) as c:
            assert api.usages(c, pool).get("DISK_GB", 0) == 0
        with api.client(procs["dfw"].url) as c:
            assert api.usages(c, hosts[0]).get("VCPU", 0) == 0
    finally:
        stop_all(procs)
