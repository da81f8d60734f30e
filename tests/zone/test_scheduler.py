"""LocalScheduler: the own summary a routing zone reads on every request is
kept while nothing it was computed from changes, and never after; and the
rules of one zone (its own providers) as docs/schedule.md states them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from strato.engine import hosts as host_view
from strato.store import changes
from strato.store.db import Database
from strato.zone.inprocess import InProcessTree, ZoneSpec
from tests.zone.test_split import affinity_to_a_split_group_is_refused, host, req, run, zt

# The root has providers of its own and one cell: its own summary is asked
# for on every request that reaches it (zone/tree.py `_options`).
ZONES = [ZoneSpec("global"), ZoneSpec("dfw", parent="global", location_prefix="dfw")]


def vcpu_used(summary: dict) -> int:  # type: ignore[type-arg]
    return int(summary["classes"]["VCPU"]["used"])


def test_the_own_summary_is_kept_until_the_store_or_the_stale_set_changes(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = zt(tree, "global")
        c = tree.client("global")
        await host(c, "global-h0", "global/room1/rack0/g0")
        await host(c, "global-h1", "global/room1/rack0/g1")
        first = await root.own_summary()
        assert first["providers"] == 2 and vcpu_used(first) == 0
        # Nothing changed: the same summary, without a worker thread.
        assert root.local.summary_now() is first
        assert await root.own_summary() is first

        # Claims on the root's own hosts change the store: never kept past
        # them. Three of eight fill all three hosts, the root's two among them.
        r = await c.post("/strato/v1/schedule", json=req(3, vcpu=8))
        assert r.status_code == 200, r.text
        assert [p["zone"] for p in r.json()["placements"]].count("global") == 2
        assert root.local.summary_now() is None
        full = await root.own_summary()
        assert vcpu_used(full) == 16
        assert root.local.summary_now() is full

        # Releases: room grew, and the summary says so at once.
        for p in r.json()["placements"]:
            d = await c.delete(f"/allocations/{p['consumer_uuid']}")
            assert d.status_code == 204, d.text
        assert root.local.summary_now() is None
        assert vcpu_used(await root.own_summary()) == 0

        # An inventory grows: the change counter moves, the summary follows.
        kept = await root.own_summary()
        rps = (await c.get("/resource_providers")).json()["resource_providers"]
        uuid0 = next(p["uuid"] for p in rps if p["name"] == "global-h0")
        gen = (await c.get(f"/resource_providers/{uuid0}")).json()["generation"]
        r = await c.put(f"/resource_providers/{uuid0}/inventories", json={
            "resource_provider_generation": gen,
            "inventories": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 16384}}})
        assert r.status_code == 200, r.text
        assert root.local.summary_now() is None
        grown = await root.own_summary()
        assert grown is not kept and grown["classes"]["VCPU"]["capacity"] == 24

        # A write by another process (straight to the store): seen too.
        other = Database(root.db.url)
        try:
            with other.write() as conn:
                changes.record(conn, "provider", [uuid0])
        finally:
            other.dispose()
        assert root.local.summary_now() is None
        grown = await root.own_summary()

        # The stale set is looked at again after its TTL: then so is the summary.
        assert root.local.summary_now() is grown
        await asyncio.sleep(host_view.STALE_TTL_S + 0.1)
        assert root.local.summary_now() is None
        assert (await root.own_summary())["classes"]["VCPU"]["capacity"] == 24
    run(tmp_path, scenario, zones=ZONES, hosts=1)


# -- rules in one zone: two rooms of two hosts ---------------------------------------------

ONE_ZONE = [ZoneSpec("global", location_prefix="dfw")]


async def two_rooms(tree: InProcessTree) -> None:
    c = tree.client("global")
    for room in (1, 2):
        for i in range(2):
            await host(c, f"r{room}h{i}", f"dfw/room{room}/rack{i}/r{room}h{i}")


def rooms(answer: dict[str, Any]) -> list[str]:
    return sorted(p["location"].split("/")[1] for p in answer["placements"])


def test_a_soft_rule_costs_no_instance_when_not_atomic(tmp_path: Path) -> None:
    """atomic=false places what fits: a soft rule is relaxed to place more,
    not kept at the cost of instances (a routing zone counts on it when it
    asks its children how many they could take)."""
    async def scenario(tree: InProcessTree) -> None:
        await two_rooms(tree)
        rule = {"type": "anti_affinity", "level": "room", "hard": False}
        for dry in (True, False):
            r = await tree.client("global").post("/strato/v1/schedule", json=req(
                3, vcpu=2, group=f"w{dry}", constraints=[rule], atomic=False, dry_run=dry))
            assert r.status_code == 200, r.text
            answer = r.json()
            assert rooms(answer) in (["room1", "room1", "room2"],
                                     ["room1", "room2", "room2"]), answer["placements"]
            assert answer["unplaced"] == []
            assert [x["rule"] for x in answer["relaxed"]] == [f"anti_affinity w{dry}@room"]
        # What the rule allows is kept: two go one per room, nothing relaxed.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            2, vcpu=2, group="two", constraints=[rule], atomic=False))
        assert r.status_code == 200, r.text
        assert rooms(r.json()) == ["room1", "room2"] and r.json()["relaxed"] == []
    run(tmp_path, scenario, zones=ONE_ZONE, hosts=0)


def test_affinity_to_a_group_already_in_two_rooms(tmp_path: Path) -> None:
    """Hard affinity cannot join a group whose members are in two rooms (every
    member would share one): refused, naming the rule and the rooms; a soft
    rule is relaxed and reported."""
    async def scenario(tree: InProcessTree) -> None:
        await two_rooms(tree)
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(
            2, vcpu=1, group="web4", constraints=[{"type": "anti_affinity", "level": "room"}]))
        assert r.status_code == 200, r.text
        assert rooms(r.json()) == ["room1", "room2"]
        await affinity_to_a_split_group_is_refused(c)
        r = await c.post("/strato/v1/schedule", json=req(
            3, vcpu=1, group="web4",
            constraints=[{"type": "affinity", "level": "room", "hard": False}]))
        assert r.status_code == 200, r.text
        assert len(r.json()["placements"]) == 3
        assert [x["rule"] for x in r.json()["relaxed"]] == ["affinity web4@room"]
        # Affinity to another group follows its members: either room will do.
        r = await c.post("/strato/v1/schedule", json=req(
            1, vcpu=1, group="app",
            constraints=[{"type": "affinity", "group": "web4", "level": "room"}]))
        assert r.status_code == 200, r.text
    run(tmp_path, scenario, zones=ONE_ZONE, hosts=0)
