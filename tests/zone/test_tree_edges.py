"""Edges of the zone tree that are not a plain tree: a zone registered under
two parents with a common ancestor (a diamond) is counted once in that
ancestor's summary, and a registration that would close a cycle is refused
when the child's summary shows it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from strato.zone import summary as summaries
from strato.zone.inprocess import InProcessTree, ZoneSpec, build
from tests.zone.test_loops import _background_rounds, _host, run

DIAMOND = [ZoneSpec("root"), ZoneSpec("a", parent="root"), ZoneSpec("b", parent="root"),
           ZoneSpec("x", parent="a")]


async def _diamond(tree: InProcessTree) -> None:
    """root -> a -> x and root -> b -> x: a has a 4-VCPU host, x an 8-VCPU one,
    b none of its own."""
    await _host(tree.client("a"), "a-h0", vcpu=4)
    await _host(tree.client("x"), "x-h0", vcpu=8)
    await tree.link()
    r = await tree.client("b").post("/strato/v1/children",
                                    json={"name": "x", "url": tree.url("x")})
    assert r.status_code == 201, r.text
    await _background_rounds(tree, ["x", "a", "b", "root"], 2)


def test_a_zone_under_two_children_is_counted_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _diamond(tree)
        s = (await tree.client("root").get("/strato/v1/summary")).json()
        # Two hosts below root (a-h0 and x-h0), 12 VCPU: x not counted twice.
        assert s["providers"] == 2, s
        assert s["classes"]["VCPU"]["capacity"] == 12, s
        assert s["classes"]["VCPU"]["largest_free"] == 8, s
        assert len(s["zone_ids"]) == len(set(s["zone_ids"])) == 4, s
        # b's summary counts a zone already counted through a: said so.
        assert s["overlaps"] == ["b"], s
        # Each child's own summary is whole (root schedules through each).
        assert [c["healthy"] for c in s["children"]] == [True, True], s
    run(tmp_path, DIAMOND, scenario)


def test_an_overlapping_child_is_a_lower_bound_not_a_sum(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _diamond(tree)
        # b gets more room of its own than a has: what root says grows to b's
        # figures (room it surely has), never to a's and b's sum.
        await _host(tree.client("b"), "b-h0", vcpu=32)
        await _background_rounds(tree, ["x", "a", "b", "root"], 2)
        s = (await tree.client("root").get("/strato/v1/summary?fresh=true")).json()
        assert s["providers"] == 2 and s["classes"]["VCPU"]["capacity"] == 40, s
        assert s["classes"]["VCPU"]["largest_free"] == 32, s
    run(tmp_path, DIAMOND, scenario)


def test_a_placement_in_a_diamond_goes_to_the_shared_zone_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _diamond(tree)
        root = tree.client("root")
        body = {"project_id": "p", "user_id": "u", "groups": [{"resources": {"VCPU": 8}}]}
        r = await root.post("/strato/v1/schedule", json={**body,
                                                         "consumers": [str(uuid.uuid4())]})
        assert r.status_code == 200, r.text
        (p,) = r.json()["placements"]
        assert p["zone"] in ("root/a/x", "root/b/x"), p
        # x is full now, through either path.
        await _background_rounds(tree, ["x", "a", "b", "root"], 1)
        r = await root.post("/strato/v1/schedule", json={**body,
                                                         "consumers": [str(uuid.uuid4())]})
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "strato.no_valid_placement"
    run(tmp_path, DIAMOND, scenario)


def test_usages_count_a_zone_under_two_children_once(tmp_path: Path) -> None:
    """GET /usages at root adds its children's usages up: x, below both a and
    b, is counted through a only (b is told to leave it out), and b's own
    zone, a child of a's further down, or a zone nobody shares still count."""
    async def scenario(tree: InProcessTree) -> None:
        await _diamond(tree)
        await _host(tree.client("b"), "b-h0", vcpu=4)
        for zone, host, vcpu in (("x", "x-h0", 2), ("a", "a-h0", 1), ("b", "b-h0", 3)):
            c = tree.client(zone)
            rp = (await c.get(f"/resource_providers?name={host}")).json()
            (p,) = rp["resource_providers"]
            r = await c.put(f"/allocations/{uuid.uuid4()}", json={
                "allocations": {p["uuid"]: {"resources": {"VCPU": vcpu}}},
                "project_id": "p", "user_id": "u", "consumer_generation": None,
                "consumer_type": "INSTANCE"},
                headers={"OpenStack-API-Version": "placement 1.38"})
            assert r.status_code == 204, r.text
        await _background_rounds(tree, ["x", "a", "b", "root"], 1)
        r = await tree.client("root").get("/usages?project_id=p",
                                          headers={"OpenStack-API-Version": "placement 1.9"})
        assert r.status_code == 200, r.text
        assert r.json()["usages"] == {"VCPU": 6}, r.text
        r = await tree.client("root").get("/usages?project_id=p",
                                          headers={"OpenStack-API-Version": "placement 1.38"})
        assert r.status_code == 200, r.text
        assert r.json()["usages"] == {"INSTANCE": {"VCPU": 6, "consumer_count": 3}}, r.text
        # A client's header is not a parent's: it changes nothing.
        r = await tree.client("root").get("/usages?project_id=p", headers={
            "OpenStack-API-Version": "placement 1.9",
            "x-strato-counted-zones": ",".join(tree.zone_tree(z).zone_id for z in "ab")})
        assert r.json()["usages"] == {"VCPU": 6}, r.text
        # Each child alone still counts its whole subtree.
        for zone, vcpu in (("a", 3), ("b", 5)):
            r = await tree.client(zone).get(
                "/usages?project_id=p", headers={"OpenStack-API-Version": "placement 1.9"})
            assert r.json()["usages"] == {"VCPU": vcpu}, (zone, r.text)
    run(tmp_path, DIAMOND, scenario)


def test_registering_a_zone_above_this_one_as_its_child_is_409(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await tree.link()
        # What each zone's background refresh does: top's summary of mid counts leaf.
        await _background_rounds(tree, ["leaf", "mid", "top"], 1)
        mid = tree.client("mid")
        for child in ("top", "mid"):
            # top's subtree holds mid (and top holds itself): mid under itself.
            r = await tree.client("leaf").post("/strato/v1/children",
                                               json={"name": child, "url": tree.url(child)})
            assert r.status_code == 409, r.text
            err = r.json()["errors"][0]
            assert err["code"] == "strato.zone_loop", err
            assert child in err["detail"] and "cycle" in err["detail"], err
            assert "DELETE /strato/v1/children" in err["detail"], err
        r = await mid.post("/strato/v1/children", json={"name": "top", "url": tree.url("top")})
        assert r.status_code == 409, r.text
        # Nothing was stored.
        for z in ("leaf", "mid"):
            kids = (await tree.client(z).get("/strato/v1/children")).json()["children"]
            assert "top" not in [c["name"] for c in kids], kids
    run(tmp_path, [ZoneSpec("top"), ZoneSpec("mid", parent="top"),
                   ZoneSpec("leaf", parent="mid")], scenario)


def test_a_cycle_unseen_at_registration_is_still_registered(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await tree.link()
        # a cannot be asked while b registers it: today's behaviour (201), the
        # cycle is found by the calls that come back round (test_loops.py).
        tree.kill("a")
        r = await tree.client("b").post("/strato/v1/children",
                                        json={"name": "a", "url": tree.url("a")})
        assert r.status_code == 201, r.text
        tree.revive("a")
        await _background_rounds(tree, ["a", "b"], 2)
        kids = [c for n in ("a", "b")
                for c in (await tree.client(n).get("/strato/v1/children")).json()["children"]]
        assert any("loop" in (c["health"]["last_error"] or "") for c in kids), kids
    run(tmp_path, [ZoneSpec("a"), ZoneSpec("b", parent="a")], scenario)


def test_a_child_restarted_registers_again(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _host(tree.client("leaf"), "leaf-h0")
        await tree.link()
        await _background_rounds(tree, ["leaf", "mid", "top"], 2)
        # leaf restarts (a new process, a new zone id) and registers again;
        # so does mid (its summary counts leaf's new id).
        tree.add(ZoneSpec("leaf", parent="mid"))
        for parent, child in (("mid", "leaf"), ("top", "mid")):
            r = await tree.client(parent).post("/strato/v1/children",
                                               json={"name": child, "url": tree.url(child)})
            assert r.status_code == 200, r.text
        await _background_rounds(tree, ["leaf", "mid", "top"], 2)
        s = (await tree.client("top").get("/strato/v1/summary")).json()
        assert s["providers"] == 1 and not s["overlaps"] and not s["loops"], s
    run(tmp_path, [ZoneSpec("top"), ZoneSpec("mid", parent="top"),
                   ZoneSpec("leaf", parent="mid")], scenario)


def test_a_schedule_refused_by_a_cycle_is_counted_as_a_loop(tmp_path: Path) -> None:
    """In the metrics, a 508 strato.zone_loop is a loop, not an error: the
    schedule result, and the call to the child that answered it."""
    from tests.api.test_health import value
    from tests.zone.test_loops import register_unseen

    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("a").post("/strato/v1/children",
                                        json={"name": "b", "url": tree.url("b")})
        assert r.status_code == 201, r.text
        await register_unseen(tree, "b", "a")
        r = await tree.client("a").post("/strato/v1/schedule", json={
            "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 1}}]})
        assert r.status_code == 508, r.text
        text = {z: (await tree.client(z).get("/metrics")).text for z in ("a", "b")}
        assert value(text["a"], "strato_schedule_attempts_total", result="loop") == 1
        assert value(text["a"], "strato_schedule_attempts_total", result="error") == 0
        assert value(text["b"], "strato_child_call_duration_seconds_count", child="a",
                     outcome="loop") >= 1
        assert value(text["b"], "strato_child_call_duration_seconds_count", child="a",
                     outcome="error") == 0
    run(tmp_path, ["a", "b"], scenario)


def _pool(providers: int, capacity: int, used: int) -> dict[str, Any]:
    return {"providers": providers, "freed": 0, "traits": [], "tags_present": [],
            "classes": {"VCPU": {"capacity": capacity, "used": used,
                                 "largest_free": capacity - used, "best_share": 0.0,
                                 "max_capacity": capacity}}}


def test_own_providers_are_added_to_a_diamond_not_bounded_by_it() -> None:
    """own 10 hosts, a = x (10), b = x + 200: the children hold at least b's
    210, and the zone 220 with its own; taking the maximum over own + a and b
    lost own's 10."""
    own, a, b = _pool(10, 100, 0), _pool(10, 10, 0), _pool(210, 210, 0)
    children = summaries.merge([a], [b])
    merged = summaries.merge([own, children])
    assert merged["providers"] == 220, merged
    assert merged["classes"]["VCPU"]["capacity"] == 310, merged


def test_an_overlapping_childs_free_room_is_never_lost() -> None:
    """a = 110 capacity, 90 used (20 free); b = 50, none used: the children
    have at least b's 50 free, though a's capacity is the larger."""
    merged = summaries.merge([_pool(2, 110, 90)], [_pool(2, 50, 0)])
    vcpu = merged["classes"]["VCPU"]
    assert vcpu["capacity"] == 110 and vcpu["capacity"] - vcpu["used"] == 50, vcpu
    assert vcpu["largest_free"] == 50, vcpu


def test_a_diamond_under_a_zone_with_its_own_hosts(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _host(tree.client("root"), "root-h0", vcpu=2)
        await _diamond(tree)
        await _host(tree.client("b"), "b-h0", vcpu=32)
        await _background_rounds(tree, ["x", "a", "b", "root"], 2)
        s = (await tree.client("root").get("/strato/v1/summary?fresh=true")).json()
        # root's own 2 VCPU, plus the children's at least b's 40 (x 8 + b-h0 32).
        assert s["providers"] == 3 and s["classes"]["VCPU"]["capacity"] == 42, s
    run(tmp_path, DIAMOND, scenario)


def test_a_child_outside_this_zones_location_prefix_is_refused(tmp_path: Path) -> None:
    """As a provider here must be within the zone's prefix: a child zone at
    ord/room9 under dfw would never be sent a request pinned there."""
    async def main() -> None:
        tree = build(tmp_path, [ZoneSpec("global"),
                                ZoneSpec("dfw", parent="global", location_prefix="dfw")])
        await tree.link()
        try:
            c = tree.client("dfw")
            r = await c.post("/strato/v1/children", json={
                "name": "misfit", "url": "http://127.0.0.1:9", "location_prefix": "ord/room9"})
            assert r.status_code == 400, r.text
            assert "outside this zone's location prefix" in r.json()["errors"][0]["detail"]
            r = await c.get("/strato/v1/children")
            assert [k["name"] for k in r.json()["children"]] == []
        finally:
            await tree.aclose()
    asyncio.run(main())
