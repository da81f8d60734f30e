"""The zone tree in one process: three levels, pruning, modes, failures."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from strato.zone.inprocess import InProcessTree, ZoneSpec, build
from tests.zone.helpers import own_allocations, record_calls

TREE = [
    ZoneSpec("global"),
    ZoneSpec("dfw", parent="global", location_prefix="dfw"),
    ZoneSpec("dfw-r1", parent="dfw", location_prefix="dfw/room1"),
    ZoneSpec("dfw-r2", parent="dfw", location_prefix="dfw/room2"),
    ZoneSpec("ord", parent="global", location_prefix="ord"),
    ZoneSpec("ord-r1", parent="ord", location_prefix="ord/room1", tags=("hipaa",)),
]


async def host(c: httpx.AsyncClient, name: str, location: str, vcpu: int = 8,
               traits: list[str] | None = None) -> str:
    rp = (await c.post("/resource_providers", json={"name": name})).json()
    r = await c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 16384}}})
    assert r.status_code == 200, r.text
    if traits:
        r = await c.put(f"/resource_providers/{rp['uuid']}/traits",
                        json={"traits": traits, "resource_provider_generation": 1})
        assert r.status_code == 200, r.text
    r = await c.put(f"/strato/v1/providers/{rp['uuid']}/meta",
                    json={"location": location, "tags": []})
    assert r.status_code == 200, r.text
    return str(rp["uuid"])


def req(n: int = 1, vcpu: int = 1, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"consumers": [str(uuid.uuid4()) for _ in range(n)],
                            "project_id": "p", "user_id": "u",
                            "groups": [{"resources": {"VCPU": vcpu}}]}
    body.update(kw)
    return body


async def make_tree(tmp: Path) -> InProcessTree:
    tree = build(tmp, TREE)
    await tree.link()
    for leaf, prefix, avx in (("dfw-r1", "dfw/room1", False), ("dfw-r2", "dfw/room2", False),
                              ("ord-r1", "ord/room1", True)):
        for i in range(3):
            await host(tree.client(leaf), f"{leaf}-h{i}", f"{prefix}/rack{i}/h{i}",
                       traits=["HW_CPU_X86_AVX2"] if avx else None)
    return tree


def run(tmp_path: Path, scenario: Any) -> None:
    async def main() -> None:
        tree = await make_tree(tmp_path)
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


async def schedule(tree: InProcessTree, body: dict[str, Any], status: int = 200,
                   zone: str = "global") -> dict[str, Any]:
    r = await tree.client(zone).post("/strato/v1/schedule", json=body)
    assert r.status_code == status, r.text
    return dict(r.json())


def test_delegate_places_in_a_leaf_with_its_zone_path(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        ans = await schedule(tree, req(2))
        zones = {p["zone"] for p in ans["placements"]}
        assert len(zones) == 1
        (path,) = zones
        assert path.startswith("global/") and path.count("/") == 2
        leaf = path.split("/")[-1]
        consumer = ans["placements"][0]["consumer_uuid"]
        got = (await tree.client(leaf).get(f"/allocations/{consumer}")).json()
        assert got["allocations"], "claimed at the leaf that owns the host"
        assert own_allocations(tree, "global", consumer) == {}
        # ... and the root answers for it all the same (zone/subtree.py).
        assert (await tree.client("global").get(f"/allocations/{consumer}")
                ).json()["allocations"] == got["allocations"]
    run(tmp_path, scenario)


def test_summary_covers_the_subtree(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        s = (await tree.client("global").get("/strato/v1/summary?fresh=true")).json()
        assert s["providers"] == 9
        assert s["classes"]["VCPU"] == {"capacity": 72, "used": 0, "largest_free": 8,
                                        "best_share": 1.0, "max_capacity": 8}
        assert "HW_CPU_X86_AVX2" in s["traits"] and "hipaa" in s["tags_present"]
        await schedule(tree, req(1, vcpu=8, constraints=[
            {"type": "location", "pattern": "dfw/room2/*"}]))
        leaf = (await tree.client("dfw-r2").get("/strato/v1/summary")).json()
        assert leaf["classes"]["VCPU"]["used"] == 8
        # The best free share is of one provider: the full host does not lower it.
        assert leaf["classes"]["VCPU"]["best_share"] == 1.0
    run(tmp_path, scenario)


def test_pruning_by_tags_traits_location_and_capacity(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        ans = await schedule(tree, req(1, constraints=[{"type": "tags",
                                                         "required": ["hipaa"]}],
                                       explain=True))
        assert ans["placements"][0]["zone"] == "global/ord/ord-r1"
        outcomes = {o["zone"]: o for o in ans["explain"]["children"]}
        assert outcomes["dfw"]["outcome"] == "pruned"
        ans = await schedule(tree, req(1, groups=[{"resources": {"VCPU": 1},
                                                   "required": ["HW_CPU_X86_AVX2"]}]))
        assert ans["placements"][0]["zone"] == "global/ord/ord-r1"
        ans = await schedule(tree, req(1, constraints=[
            {"type": "location", "pattern": "h1.rack1.room2.dfw"}]))
        assert ans["placements"][0]["zone"] == "global/dfw/dfw-r2"
        r = await tree.client("global").post("/strato/v1/schedule", json=req(1, vcpu=9))
        assert r.status_code == 409
        body = r.json()
        assert body["errors"][0]["code"] == "strato.no_valid_placement"
        reasons = {o["zone"]: o["reason"] for o in body["explain"]["children"]}
        assert "largest free 8 < 9" in reasons["dfw"]
    run(tmp_path, scenario)


def test_best_mode_claims_the_best_plan_at_its_owner(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # Load dfw-r1 so that the emptier zones score better under spread.
        for _ in range(3):
            await schedule(tree, req(1, vcpu=6, constraints=[
                {"type": "location", "pattern": "dfw/room1/*"}]))
        ans = await schedule(tree, req(1, vcpu=2, mode="best"))
        (p,) = ans["placements"]
        assert p["zone"] != "global/dfw/dfw-r1"
        leaf = p["zone"].split("/")[-1]
        got = (await tree.client(leaf).get(f"/allocations/{p['consumer_uuid']}")).json()
        assert got["allocations"][p["provider"]]["resources"] == {"VCPU": 2}
        dry = await schedule(tree, req(1, mode="best", dry_run=True))
        assert dry["dry_run"] and dry["placements"]
    run(tmp_path, scenario)


def test_dead_child_is_skipped_marked_unhealthy_and_rejoins(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        tree.kill("ord")
        # Everything must now land in dfw, and ord shows as unhealthy.
        for _ in range(3):
            ans = await schedule(tree, req(1))
            assert ans["placements"][0]["zone"].startswith("global/dfw/")
        kids = (await tree.client("global").get("/strato/v1/children")).json()["children"]
        health = {k["name"]: k["health"] for k in kids}
        assert health["ord"]["healthy"] is False and health["dfw"]["healthy"] is True
        # Only ord has hipaa hosts: an outage, not "nothing fits", and not kept.
        hipaa = req(1, constraints=[{"type": "tags", "required": ["hipaa"]}],
                    request_id="hipaa-1")
        r = await tree.client("global").post("/strato/v1/schedule", json=hipaa)
        assert r.status_code == 503, r.text
        assert r.json()["errors"][0]["code"] == "strato.zone_unavailable"
        assert "ord" in r.json()["errors"][0]["detail"]
        assert int(r.headers["retry-after"]) >= 1
        tree.revive("ord")
        tree_obj = tree.apps["global"].state.tree
        tree_obj.health["ord"].next_probe = 0.0  # the backoff has elapsed
        ans = await schedule(tree, hipaa)
        assert ans["placements"][0]["zone"] == "global/ord/ord-r1"
        assert not ans.get("replayed")
    run(tmp_path, scenario)


def test_a_dry_run_and_explain_with_a_child_down_are_an_outage_too(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # Only ord has hipaa hosts and ord is down: the real request is a 503;
        # a dry run said 409 "no valid placement" and /explain 200 "nothing
        # fits", which the real request would not have said.
        tree.kill("ord")
        c = tree.client("global")
        hipaa = req(1, constraints=[{"type": "tags", "required": ["hipaa"]}])
        for path, body in (("/strato/v1/schedule", {**hipaa, "dry_run": True}),
                           ("/strato/v1/explain", hipaa),
                           ("/strato/v1/schedule", hipaa)):
            r = await c.post(path, json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.json()["errors"][0]["code"] == "strato.zone_unavailable"
            assert "ord" in r.json()["errors"][0]["detail"]
        # What fits nowhere that was asked, and not in ord by its metadata, is
        # still a refusal.
        r = await c.post("/strato/v1/explain", json=req(
            1, constraints=[{"type": "location", "pattern": "syd"}]))
        assert r.status_code == 200 and r.json()["placements"] == [], r.text
    run(tmp_path, scenario)


def test_children_api_validates_and_deletes(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        for bad in ({"name": "x"}, {"name": "bad name", "url": "http://h:1"},
                    {"name": "x", "url": "ftp://h"}, {"name": "x", "url": "http://h:1",
                                                      "tags": ["BAD TAG"]}):
            r = await c.post("/strato/v1/children", json=bad)
            assert r.status_code == 400, (bad, r.text)
        r = await c.post("/strato/v1/children", json={"name": "extra",
                                                      "url": "http://127.0.0.1:9"})
        assert r.status_code == 201
        assert r.json()["health"]["healthy"] is False
        assert (await c.delete("/strato/v1/children/extra")).status_code == 204
        assert (await c.delete("/strato/v1/children/extra")).status_code == 404
        names = [k["name"] for k in (await c.get("/strato/v1/children")).json()["children"]]
        assert names == ["dfw", "ord"]
    run(tmp_path, scenario)


def test_idempotent_request_id_across_the_tree(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(1, request_id="once")
        first = await schedule(tree, body)
        again = await schedule(tree, body)
        assert again["placements"] == first["placements"]
        total = 0
        for leaf in ("dfw-r1", "dfw-r2", "ord-r1"):
            s = (await tree.client(leaf).get("/strato/v1/summary")).json()
            total += s["classes"]["VCPU"]["used"]
        assert total == 1
    run(tmp_path, scenario)


@pytest.mark.parametrize("mode", ["delegate", "best"])
def test_anti_affinity_within_the_chosen_zone(tmp_path: Path, mode: str) -> None:
    async def scenario(tree: InProcessTree) -> None:
        ans = await schedule(tree, req(3, group="web", mode=mode, constraints=[
            {"type": "anti_affinity", "level": "rack"}]))
        locs = {"/".join(p["location"].split("/")[:3]) for p in ans["placements"]}
        assert len(locs) == 3
    run(tmp_path, scenario)


def test_best_mode_plans_in_the_best_few_and_goes_on_only_if_they_cannot(tmp_path: Path
                                                                          ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        dfw = tree.apps["dfw"].state.tree
        dfw.config.best_width = 1
        urls = {c.url: c.name for c in await dfw.children()}
        asked: list[str] = []
        real = tree.transport.call

        async def counted(url: str, method: str, path: str, **kw: Any) -> Any:
            if path == "/strato/v1/schedule" and (kw.get("json") or {}).get("dry_run"):
                asked.append(urls.get(url, url))
            return await real(url, method, path, **kw)
        tree.transport.call = counted  # type: ignore[method-assign]
        await schedule(tree, req(1, mode="best"), zone="dfw")
        assert len(asked) == 1, asked  # the summaries' best alone
        # The claim's answer brought that cell's new summary: the best-ranked
        # cell may be the other one now (a dry run, which moves nothing, says).
        asked.clear()
        await schedule(tree, req(1, mode="best", dry_run=True), zone="dfw")
        assert len(asked) == 1, asked
        # The best-ranked cell cannot plan now: the next is asked, and places.
        first = asked[0]
        asked.clear()
        tree.kill(first)
        ans = await schedule(tree, req(1, mode="best"), zone="dfw")
        assert asked[0] == first and len(asked) == 2, asked
        assert ans["placements"][0]["zone"].split("/")[-1] != first
    run(tmp_path, scenario)


def test_best_mode_keeps_summaries_fresh_without_fetching_them(tmp_path: Path) -> None:
    """A dry run moves nothing: its answer leaves the cached summary as it was
    (marking it stale cost a summary fetch per child asked, per request). A
    claim of the plan brings the owner's new summary up through every zone on
    its path, so nobody fetches one afterwards either."""
    async def scenario(tree: InProcessTree) -> None:
        fetched = record_calls(tree, lambda _, path: path.startswith("/strato/v1/summary"))
        await schedule(tree, req(1, mode="best"))  # the first: every summary fetched
        fetched.clear()
        for _ in range(3):
            ans = await schedule(tree, req(1, mode="best"))
        zones = ans["placements"][0]["zone"].split("/")  # global/<mid>/<cell>
        assert len(zones) == 3, ans
        await schedule(tree, req(1, mode="best", dry_run=True))
        assert fetched == [], fetched
        # The mid zone's cache of the cell counts the last claim, and the
        # root's cache of the mid zone too.
        mid, cell = zones[1], zones[2]
        for zone, child in (("global", mid), (mid, cell)):
            cached = tree.apps[zone].state.tree.cache[child].body
            r = await tree.client(cell).get("/strato/v1/summary")
            if zone == mid:
                assert cached["classes"]["VCPU"]["used"] == r.json()["classes"]["VCPU"]["used"]
            else:
                assert cached["classes"]["VCPU"]["used"] >= r.json()["classes"]["VCPU"]["used"]
            assert cached["classes"]["VCPU"]["used"] >= 1, cached
    run(tmp_path, scenario)


def test_best_mode_below_the_zone_asked_compares_fewer(tmp_path: Path) -> None:
    """The root compares its children's plans; a child asked for a dry run
    plans in its summary-best cell alone (best_nested_width 1), so dfw asks
    one of its two rooms, not both."""
    async def scenario(tree: InProcessTree) -> None:
        names = {}
        for z in ("dfw", "ord"):
            names.update({c.url: c.name for c in await tree.apps[z].state.tree.children()})
        asked: list[str] = []
        real = tree.transport.call

        async def counted(url: str, method: str, path: str, **kw: Any) -> Any:
            if path == "/strato/v1/schedule" and (kw.get("json") or {}).get("dry_run") \
                    and url in names:
                asked.append(names[url])
            return await real(url, method, path, **kw)
        tree.transport.call = counted  # type: ignore[method-assign]
        await schedule(tree, req(1, mode="best"))
        assert sorted(asked) in (["dfw-r1", "ord-r1"], ["dfw-r2", "ord-r1"]), asked
        asked.clear()
        for z in tree.apps:
            tree.apps[z].state.tree.config.best_nested_width = 3
        await schedule(tree, req(1, mode="best"))
        assert sorted(asked) == ["dfw-r1", "dfw-r2", "ord-r1"], asked
    run(tmp_path, scenario)


def test_a_refusal_explains_the_zones_own_providers_too(tmp_path: Path) -> None:
    """A zone with providers of its own and a child: when nothing fits, the
    explanation says why its own providers did not, beside the child's
    pruning (the second look at the pruned children dropped it)."""
    async def main() -> None:
        tree = build(tmp_path, [ZoneSpec("top"),
                                ZoneSpec("kid", parent="top", location_prefix="x/kid")])
        try:
            await tree.link()
            for i in range(2):
                await host(tree.client("top"), f"top-h{i}", f"x/top/rack{i}/h{i}", vcpu=4)
                await host(tree.client("kid"), f"kid-h{i}", f"x/kid/rack{i}/h{i}")
            body = (await tree.client("top").post("/strato/v1/schedule",
                                                  json=req(1, vcpu=16))).json()
            reasons = {o["zone"]: o["reason"] for o in body["explain"]["children"]}
            assert reasons == {"(own providers)": "pruned: no capacity (VCPU largest free "
                                                  "4 < 16)",
                               "kid": "pruned: no capacity (VCPU largest free 8 < 16)"}
            assert body["errors"][0]["detail"].endswith(
                "own providers: pruned: no capacity (VCPU largest free 4 < 16); kid: pruned: "
                "no capacity (VCPU largest free 8 < 16)")
        finally:
            await tree.aclose()
    asyncio.run(main())
