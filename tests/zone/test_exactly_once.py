"""The zone protocol's promises, one test per finding of the fault-injection
audit (issue 12): duplicates at every hop, cancels that reach every part,
outages that are not answers, deadlines, probes, zone identities.

Each runs a real tree of zone apps (own SQLite each) wired in-process, with
faults injected on the wire, and checks every zone's own store afterwards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from strato.sim.invariants import check_databases
from strato.store import ledger
from strato.zone.attempt import FIRST_BACKOFF_S, MAX_BACKOFF_S, Health
from strato.zone.inprocess import InProcessTree, build
from tests.zone.helpers import own_allocations
from tests.zone.test_shared_pool import AGG, provider
from tests.zone.test_tree import TREE, host, req

FAST = {"child_timeout": 1.0, "request_timeout": 3.0, "summary_interval": 0.2}
LEAVES = ("dfw-r1", "dfw-r2", "ord-r1")


async def make(tmp: Path, settings: dict[str, Any] | None = None) -> InProcessTree:
    tree = build(tmp, TREE, settings={**FAST, **(settings or {})})
    await tree.link()
    for leaf, prefix in (("dfw-r1", "dfw/room1"), ("dfw-r2", "dfw/room2"),
                         ("ord-r1", "ord/room1")):
        for i in range(3):
            await host(tree.client(leaf), f"{leaf}-h{i}", f"{prefix}/rack{i}/h{i}")
    for name in ("global", "dfw", "ord"):
        await tree.zone_tree(name).refresh(fresh=True)
    return tree


def run(tmp: Path, scenario: Callable[[InProcessTree], Awaitable[None]],
        settings: dict[str, Any] | None = None) -> None:
    async def main() -> None:
        tree = await make(tmp, settings)
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


async def held_at(tree: InProcessTree, consumer: str) -> list[str]:
    """The zones whose own store holds allocations of `consumer`."""
    return [zone for zone in tree.apps if own_allocations(tree, zone, consumer)]


def _parts(tree: InProcessTree, zone: str, request_id: str) -> list[ledger.Part]:
    with tree.dbs[zone].read() as conn:
        return ledger.parts(conn, request_id)


def invariants(tree: InProcessTree, live: set[str]) -> None:
    names = list(tree.dbs)
    found = check_databases([tree.dbs[n] for n in names], names, live)
    assert found == [], found


# -- finding 1: concurrent duplicates ---------------------------------------------------

def test_concurrent_duplicates_at_the_root_place_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        bodies = [req(2, request_id=f"dup-{i}") for i in range(8)]
        # Each body three times at once, all interleaved.
        sends = [b for b in bodies for _ in range(3)]
        answers = await asyncio.gather(*(
            tree.client("global").post("/strato/v1/schedule", json=b) for b in sends))
        by_id: dict[str, list[Any]] = {}
        for b, r in zip(sends, answers, strict=True):
            assert r.status_code == 200, r.text
            by_id.setdefault(b["request_id"], []).append(
                sorted((p["consumer_uuid"], p["zone"]) for p in r.json()["placements"]))
        for rid, seen in by_id.items():
            assert all(s == seen[0] for s in seen), (rid, seen)
        consumers = {c for b in bodies for c in b["consumers"]}
        for c in consumers:
            assert len(await held_at(tree, c)) == 1
        invariants(tree, consumers)
    run(tmp_path, scenario)


def test_a_duplicate_at_a_mid_zone_is_answered_once(tmp_path: Path) -> None:
    """The same part id twice at a routing zone (a retransmission)."""
    async def scenario(tree: InProcessTree) -> None:
        b = req(1, request_id="x@global#abcd", hops=1)
        first, second = await asyncio.gather(
            tree.client("dfw").post("/strato/v1/schedule", json=b),
            tree.client("dfw").post("/strato/v1/schedule", json=b))
        assert first.status_code == second.status_code == 200
        assert first.json()["placements"] == second.json()["placements"]
        assert len(await held_at(tree, b["consumers"][0])) == 1
    run(tmp_path, scenario)


def _pinned(body: dict[str, Any], room: str) -> dict[str, Any]:
    return {**body, "constraints": [{"type": "location", "pattern": f"dfw/{room}/*"}]}


@pytest.mark.parametrize("request_id", ["same-id", None])
def test_a_consumer_placed_at_a_mid_zone_is_not_placed_again_through_its_parent(
        tmp_path: Path, request_id: str | None) -> None:
    """A client places X at dfw directly, then sends it to the root (a retry
    at another entry point): dfw, on both paths, knows X is in one of its
    cells and refuses the parent's request for it, as the root would its own."""
    async def scenario(tree: InProcessTree) -> None:
        body = req(1, request_id=request_id)
        first = await tree.client("dfw").post("/strato/v1/schedule",
                                              json=_pinned(body, "room1"))
        assert first.status_code == 200, first.text
        again = await tree.client("global").post("/strato/v1/schedule",
                                                 json=_pinned(body, "room2"))
        assert again.status_code == 409, again.text
        assert again.json()["errors"][0]["code"] == "placement.concurrent_update", again.text
        assert await held_at(tree, body["consumers"][0]) == ["dfw-r1"]
        invariants(tree, set(body["consumers"]))
    run(tmp_path, scenario)


def test_one_consumer_sent_at_once_to_a_mid_zone_and_its_parent_is_placed_once(
        tmp_path: Path) -> None:
    """The same body at dfw and at the root at once, pinned to its two cells:
    dfw sees both, and only one places (the other is a 409)."""
    async def scenario(tree: InProcessTree) -> None:
        live: set[str] = set()
        for i in range(6):
            body = req(1, request_id=f"twice-{i}")
            here, above = await asyncio.gather(
                tree.client("dfw").post("/strato/v1/schedule", json=_pinned(body, "room1")),
                tree.client("global").post("/strato/v1/schedule",
                                           json=_pinned(body, "room2")))
            codes = sorted([here.status_code, above.status_code])
            assert codes in ([200, 409], [200, 503]), (here.text, above.text)
            assert len(await held_at(tree, body["consumers"][0])) == 1
            live.update(body["consumers"])
        invariants(tree, live)
    run(tmp_path, scenario)


def test_a_client_request_id_shaped_as_a_zones_part_id_is_refused(tmp_path: Path) -> None:
    """Zones tell their own parts at a child by the id's tail (`@zone#` and 8
    hex digits); a client's id of that shape would be taken for the named
    zone's, and cancelled by its start-up sweep. 400, and nothing placed."""
    async def scenario(tree: InProcessTree) -> None:
        for zone, rid in (("dfw", "nightly@global#0a1b2c3d"), ("dfw-r1", "job@dfw#deadbeef"),
                          ("global", "x@anything#01234567")):
            body = req(1, request_id=rid)
            r = await tree.client(zone).post("/strato/v1/schedule", json=body)
            assert r.status_code == 400, r.text
            assert "request_id" in r.json()["errors"][0]["detail"], r.text
            assert await held_at(tree, body["consumers"][0]) == []
        # Ids with '@' or '#' otherwise are a client's to use.
        r = await tree.client("dfw").post("/strato/v1/schedule",
                                          json=req(1, request_id="ops@team#batch-7"))
        assert r.status_code == 200, r.text
    run(tmp_path, scenario)


async def held_in_memory_at_dfw(tree: InProcessTree, request_id: str
                                ) -> tuple[dict[str, Any], asyncio.Future[Any]]:
    """A request from dfw's parent, held in dfw's memory while its cells are slow:
    (its body, its call)."""
    tree.delay("dfw-r1", 0.4, "/strato/v1/schedule")
    tree.delay("dfw-r2", 0.4, "/strato/v1/schedule")
    b = req(1, request_id=request_id, hops=1)
    first = asyncio.ensure_future(tree.client("dfw").post("/strato/v1/schedule", json=b))
    await asyncio.sleep(0.1)
    assert request_id in tree.zone_tree("dfw")._open
    return b, first


def test_a_cancel_while_a_routing_zone_holds_the_request_in_memory_undoes_it(
        tmp_path: Path) -> None:
    """A routing zone writes a request's id and parts with its answer: a cancel
    that comes while the child is at work finds them in memory, and the
    request, when its child answers, is undone, not placed."""
    async def scenario(tree: InProcessTree) -> None:
        b, first = await held_in_memory_at_dfw(tree, "held@global#0000beef")
        r = await tree.client("dfw").post("/strato/v1/requests/cancel",
                                          json={"request_id": "held@global#0000beef"})
        assert r.status_code == 200, r.text
        got = await first
        assert got.status_code == 409 and "cancelled" in got.text, got.text
        await tree.transport.settle()
        assert await held_at(tree, b["consumers"][0]) == []
        assert tree.zone_tree("dfw")._open == {}
        with tree.dbs["dfw"].read() as conn:
            entry = ledger.lookup(conn, "held@global#0000beef")
        assert entry is not None and entry.state == ledger.State.CANCELLED
        # Sent again (late), it is refused and places nothing.
        again = await tree.client("dfw").post("/strato/v1/schedule", json=b)
        assert again.status_code == 409, again.text
        await tree.transport.settle()
        assert await held_at(tree, b["consumers"][0]) == []
        invariants(tree, set())
    run(tmp_path, scenario)


def test_concurrent_duplicates_at_a_mid_zone_while_its_child_is_slow_place_once(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw-r1", 0.3, "/strato/v1/schedule")
        tree.delay("dfw-r2", 0.3, "/strato/v1/schedule")
        bodies = [req(1, request_id=f"m{i}@global#0000000{i}", hops=1) for i in range(4)]
        sends = [b for b in bodies for _ in range(3)]
        answers = await asyncio.gather(*(
            tree.client("dfw").post("/strato/v1/schedule", json=b) for b in sends))
        for r in answers:
            assert r.status_code == 200, r.text
        for b in bodies:
            mine = [r.json()["placements"] for s, r in zip(sends, answers, strict=True)
                    if s is b]
            assert all(m == mine[0] for m in mine)
            assert len(await held_at(tree, b["consumers"][0])) == 1
        assert tree.zone_tree("dfw")._open == {}
        invariants(tree, {b["consumers"][0] for b in bodies})
    run(tmp_path, scenario)


def test_a_duplicate_that_can_ask_nobody_waits_for_the_first_held_in_memory(
        tmp_path: Path) -> None:
    """While the first holds the id in memory, a duplicate that finds every
    child down asks nobody: it waits for the first's answer, not a 503."""
    async def scenario(tree: InProcessTree) -> None:
        b, first = await held_in_memory_at_dfw(tree, "twice@global#0000cafe")
        dfw = tree.zone_tree("dfw")
        for leaf in ("dfw-r1", "dfw-r2"):
            dfw.health_of(leaf).failed("down, as far as the duplicate can tell")
        again = await tree.client("dfw").post("/strato/v1/schedule", json=b)
        got = await first
        assert got.status_code == 200, got.text
        assert again.status_code == 200, again.text
        assert again.json()["placements"] == got.json()["placements"]
        assert len(await held_at(tree, b["consumers"][0])) == 1
    run(tmp_path, scenario)


# -- finding 3: a retry while the first attempt runs ------------------------------------

def test_a_retry_during_the_first_attempt_gets_its_answer(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw", 0.5, "/strato/v1/schedule")
        tree.delay("ord", 0.5, "/strato/v1/schedule")
        b = req(1, request_id="slow")
        first = asyncio.ensure_future(tree.client("global").post("/strato/v1/schedule",
                                                                 json=b))
        await asyncio.sleep(0.1)  # the first is at work below
        retry = await tree.client("global").post("/strato/v1/schedule", json=b)
        got = await first
        assert got.status_code == 200, got.text
        assert retry.status_code == 200, retry.text
        assert retry.json()["placements"] == got.json()["placements"]
        assert retry.json()["replayed"] is True
        assert len(await held_at(tree, b["consumers"][0])) == 1
    run(tmp_path, scenario)


def test_a_duplicate_that_waits_too_long_is_told_in_progress(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw", 0.8, "/strato/v1/schedule")
        tree.delay("ord", 0.8, "/strato/v1/schedule")
        b = req(1, request_id="slower")
        first = asyncio.ensure_future(tree.client("global").post("/strato/v1/schedule",
                                                                 json=b))
        await asyncio.sleep(0.1)
        hurried = {**b, "deadline": time.time() + 0.3}
        r = await tree.client("global").post("/strato/v1/schedule", json=hurried)
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "strato.request_in_progress"
        assert (await first).status_code == 200
    run(tmp_path, scenario, {"child_timeout": 2.0})


# -- finding 2: a cancel reaches every part of a split ----------------------------------

async def split_pool(tree: InProcessTree) -> None:
    """A disk pool at dfw shared with dfw-r1's hosts: a request for VCPU and
    DISK_GB splits at dfw (the pool there, compute in dfw-r1)."""
    await provider(tree.client("dfw"), "dfw-disk", {"DISK_GB": {"total": 1000}},
                   traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
    await provider(tree.client("dfw-r1"), "dfw-r1-agg",
                   {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}, aggs=[AGG])
    for name in ("dfw", "global"):
        await tree.zone_tree(name).refresh(fresh=True)



def test_cancel_after_a_split_undoes_the_pool_and_the_cell_part(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await split_pool(tree)
        b = req(1, request_id="split-me")
        b["groups"] = [{"resources": {"VCPU": 1, "DISK_GB": 10}}]
        # The root loses dfw's answer: dfw placed the split (pool + cell); the
        # root cannot know, answers 503, and cancels it at once (dfw answers).
        tree.lose_answers("dfw", "/strato/v1/schedule")
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        consumer = b["consumers"][0]
        assert await held_at(tree, consumer) == []
        invariants(tree, set())
        # The retry places it, once, split again.
        tree.revive("dfw")
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        assert sorted(await held_at(tree, consumer)) == ["dfw", "dfw-r1"]
        invariants(tree, {consumer})
        # Its parent lost that answer too: the cancel reaches both parts, the
        # cell's once the cell answers again.
        (part,) = [p for p in _parts(tree, "global", "split-me") if p.child == "dfw"][-1:]
        tree.kill("dfw-r1")
        r = await tree.client("dfw").post("/strato/v1/requests/cancel",
                                          json={"request_id": part.part_id})
        assert r.status_code == 200, r.text
        assert r.json()["deferred"] == ["dfw-r1"]
        assert await held_at(tree, consumer) == ["dfw-r1"]
        tree.revive("dfw-r1")
        assert await tree.zone_tree("dfw").reconcile("dfw-r1") == 1
        assert await held_at(tree, consumer) == []
        invariants(tree, set())
    run(tmp_path, scenario)


def test_a_second_cancel_of_a_split_leaves_a_later_placement_of_its_consumer_alone(
        tmp_path: Path) -> None:
    """Seen in a chaos run (seed 82): a mid zone undid a split part (its worker
    gave up), the root placed the same consumer again there under a new part,
    then the root's cancel of the first part reached the mid zone and removed
    the new part's pool allocation: an acknowledged placement lost. An undo
    releases a pool part once; a second undo of the same part finds nothing."""
    async def scenario(tree: InProcessTree) -> None:
        await split_pool(tree)
        b = req(1, request_id="first")
        b["groups"] = [{"resources": {"VCPU": 1, "DISK_GB": 10}}]
        consumer = b["consumers"][0]
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        (first,) = [p for p in _parts(tree, "global", "first") if p.child == "dfw"]
        cancel = {"request_id": first.part_id}
        r = await tree.client("dfw").post("/strato/v1/requests/cancel", json=cancel)
        assert r.status_code == 200, r.text
        assert await held_at(tree, consumer) == []
        # The same consumer placed again, through the same zones.
        r = await tree.client("global").post("/strato/v1/schedule",
                                             json={**b, "request_id": "again"})
        assert r.status_code == 200, r.text
        assert sorted(await held_at(tree, consumer)) == ["dfw", "dfw-r1"]
        # The first part's cancel again (a parent's reconcile repeats it).
        for _ in range(2):
            r = await tree.client("dfw").post("/strato/v1/requests/cancel", json=cancel)
            assert r.status_code == 200, r.text
            assert r.json()["released"] == [], r.json()
        assert sorted(await held_at(tree, consumer)) == ["dfw", "dfw-r1"]
        invariants(tree, {consumer})
    run(tmp_path, scenario)


def test_a_late_cancel_of_a_held_part_that_was_released_leaves_a_later_claim_alone(
        tmp_path: Path) -> None:
    """A cell held a share of a divided request; the hold expired (its parent
    never confirmed it: cut off, or its answer lost), or the parent released
    it. The retry placed the same consumer there again, under a new part;
    then the parent's cancel of the first part (in doubt, sent when the cell
    answers again) came: it removed the new part's allocations, an
    acknowledged placement lost. A released hold is no longer the part's to
    undo."""
    async def scenario(tree: InProcessTree) -> None:
        cell = tree.client("dfw-r1")
        live: set[str] = set()
        for how in ("expired", "released"):
            plan = await cell.post("/strato/v1/explain", json=req(1))
            p = plan.json()["placements"][0]
            consumer = p["consumer_uuid"]
            claim = {"project_id": "p", "user_id": "u", "hold_ttl": 0.2,
                     "request_id": f"{how}@dfw#00000001",
                     "placements": [{"consumer_uuid": consumer,
                                     "allocations": p["allocations"]}]}
            r = await cell.post("/strato/v1/claims", json=claim)
            assert r.status_code == 200, r.text
            if how == "expired":
                deadline = time.monotonic() + 5
                while await held_at(tree, consumer):
                    assert time.monotonic() < deadline, "the hold never expired"
                    await asyncio.sleep(0.1)
                    await tree.zone_tree("dfw-r1").recover()
            else:
                r = await cell.post("/strato/v1/claims/release",
                                    json={"consumers": [consumer]})
                assert r.json()["released"] == [consumer], r.text
            assert await held_at(tree, consumer) == []
            # The retry: the same consumer, a new part, confirmed.
            again = {**claim, "request_id": f"{how}@dfw#00000002"}
            r = await cell.post("/strato/v1/claims", json=again)
            assert r.status_code == 200, r.text
            r = await cell.post("/strato/v1/claims/confirm", json={"consumers": [consumer]})
            assert r.status_code == 200, r.text
            # The first part's cancel, late (twice: a reconcile repeats it).
            for _ in range(2):
                r = await cell.post("/strato/v1/requests/cancel",
                                    json={"request_id": claim["request_id"]})
                assert r.status_code == 200, r.text
                assert r.json()["released"] == [], r.json()
            assert await held_at(tree, consumer) == ["dfw-r1"]
            # A repeat of the first part is not told it holds anything.
            r = await cell.post("/strato/v1/claims", json=claim)
            assert r.status_code == 409, r.text
            live.add(consumer)
            invariants(tree, live)
    run(tmp_path, scenario)


# -- finding 4: an outage is not an answer ----------------------------------------------

def test_outage_answers_503_and_a_retry_after_healing_places(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        tree.kill("dfw")
        tree.kill("ord")
        b = req(1, request_id="during-outage")
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        err = r.json()["errors"][0]
        assert err["code"] == "strato.zone_unavailable"
        assert "dfw" in err["detail"] and "ord" in err["detail"]
        assert int(r.headers["retry-after"]) >= 1
        tree.revive("dfw")
        tree.revive("ord")
        for h in tree.zone_tree("global").health.values():
            h.next_probe = 0.0
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        assert r.json().get("replayed") is not True
    run(tmp_path, scenario)


def test_no_refusal_is_kept_while_an_earlier_try_still_holds_the_room(tmp_path: Path
                                                                        ) -> None:
    """A try placed the request in dfw's room, its answer was lost and the
    cancel of it did not get through (in doubt): what it placed still takes
    the room until the cancel lands. A retry of the same id then found the
    room full and was refused, and the refusal was kept: the request was
    refused for good by its own leftovers (an outage kept as an answer). It is
    a 503 until the leftovers are undone; then the retry places it."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        tree.lose_answers("dfw", "/strato/v1/schedule")
        tree.delay("dfw", 3.0, "/strato/v1/requests/cancel")
        b = req(3, vcpu=8, request_id="own-leftovers",
                constraints=[{"type": "location", "pattern": "dfw/room1/*"}])
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        assert [await held_at(tree, c) for c in b["consumers"]] == [["dfw-r1"]] * 3
        tree.revive("dfw")
        tree.delay("dfw", 3.0, "/strato/v1/requests/cancel")
        await asyncio.sleep(MAX_BACKOFF_S / 4)  # dfw's probe is due: it answers
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        # The cancels land; the in-doubt part is settled.
        await tree.transport.settle()
        tree.revive("dfw")
        await tree.zone_tree("global").reconcile()
        assert [await held_at(tree, c) for c in b["consumers"]] == [[]] * 3
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        assert [await held_at(tree, c) for c in b["consumers"]] == [["dfw-r1"]] * 3
        invariants(tree, set(b["consumers"]))
    run(tmp_path, scenario)


@pytest.mark.parametrize("lost_at", ["dfw", "dfw-r1"])
def test_a_retry_is_not_refused_for_the_consumers_its_own_earlier_try_holds(
        tmp_path: Path, lost_at: str) -> None:
    """A try placed the request in dfw's room and its answer was lost (dfw
    killed under load, in CI): the part is in doubt at the root. The retry,
    once dfw answers again, reached the leaf before the cancel of that part
    and got 409 placement.concurrent_update ("consumer exists"): a definite
    refusal for the consumers of its own earlier try. It is a 503 while that
    part cannot be cancelled, and the retry cancels it first once it can.

    One level down (dfw lost dfw-r1's answer), the part in doubt is dfw's,
    under a part id of the root's first try, and the root's retry comes to
    dfw under a new one: dfw knows the earlier part by the consumers it
    holds, answers 503 (not 409) and cancels it at once."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        tree.lose_answers(lost_at, "/strato/v1/schedule")
        tree.delay(lost_at, 3.0, "/strato/v1/requests/cancel")
        b = req(2, request_id=f"own-consumers-{lost_at}",
                constraints=[{"type": "location", "pattern": "dfw/room1/*"}])
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        assert [await held_at(tree, c) for c in b["consumers"]] == [["dfw-r1"]] * 2
        tree.revive(lost_at)
        tree.delay(lost_at, 3.0, "/strato/v1/requests/cancel")
        await asyncio.sleep(MAX_BACKOFF_S / 4)  # its probe is due: it answers
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        assert r.json()["errors"][0]["code"] == "strato.zone_unavailable"
        await tree.transport.settle()
        tree.revive(lost_at)
        r = await root.post("/strato/v1/schedule", json=b)
        if lost_at == "dfw-r1":
            # dfw's cancel of its part went when dfw-r1 answered 409.
            for _ in range(20):
                if r.status_code != 503:
                    break
                await asyncio.sleep(0.2)
                r = await root.post("/strato/v1/schedule", json=b)
        # At the root, no reconcile round in between: the retry cancelled
        # its earlier part first.
        assert r.status_code == 200, r.text
        assert [await held_at(tree, c) for c in b["consumers"]] == [["dfw-r1"]] * 2
        invariants(tree, set(b["consumers"]))
    run(tmp_path, scenario)


def test_a_full_tree_is_a_definite_refusal_and_kept(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        b = req(1, vcpu=64, request_id="too-big")
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "strato.no_valid_placement"
        assert "replayed" not in r.json()
        again = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert again.status_code == 409
        assert again.json()["errors"][0]["detail"] == r.json()["errors"][0]["detail"]
        # Said to be the kept answer, as a replayed placement is.
        assert again.json()["replayed"] is True
        # At a zone without children too.
        b = req(1, vcpu=64, request_id="too-big-here")
        r = await tree.client("dfw-r1").post("/strato/v1/schedule", json=b)
        assert r.status_code == 409 and "replayed" not in r.json(), r.text
        again = await tree.client("dfw-r1").post("/strato/v1/schedule", json=b)
        assert again.status_code == 409 and again.json()["replayed"] is True, again.text
    run(tmp_path, scenario)


# -- finding 5: deadlines keep the healthy parts in use ---------------------------------

def test_a_hung_leaf_does_not_make_its_mid_zone_look_dead(tmp_path: Path) -> None:
    """dfw-r1 hangs: dfw gives it less time than the root gives dfw, so dfw
    answers (placing in dfw-r2) and the root keeps dfw healthy."""
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw-r1", 30.0)
        for _ in range(3):
            b = req(1, constraints=[{"type": "location", "pattern": "dfw/*"}])
            r = await tree.client("global").post("/strato/v1/schedule", json=b)
            assert r.status_code == 200, r.text
            assert r.json()["placements"][0]["zone"].startswith("global/dfw/")
        assert tree.zone_tree("global").health_of("dfw").healthy
        assert not tree.zone_tree("dfw").health_of("dfw-r1").healthy
    run(tmp_path, scenario)


def test_backoff_is_bounded_so_a_healed_child_is_probed_within_seconds() -> None:
    h = Health()
    for _ in range(50):
        h.failed("down")
    assert h.retry_after() <= MAX_BACKOFF_S * 1.2
    h.ok()
    assert h.healthy and h.due()


def test_a_healed_child_is_used_again_by_the_background_probe(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.zone_tree("global")
        tree.kill("ord")
        for _ in range(5):  # failures pile up
            await root.fetch_summary(next(c for c in await root.children()
                                          if c.name == "ord"))
        assert not root.health_of("ord").healthy
        tree.revive("ord")
        started = time.monotonic()
        refresher = asyncio.ensure_future(root.run_refresher())
        try:
            while not root.health_of("ord").healthy:
                assert time.monotonic() - started < MAX_BACKOFF_S * 1.5
                await asyncio.sleep(0.05)
        finally:
            refresher.cancel()
        hipaa = req(1, constraints=[{"type": "location", "pattern": "ord/*"}])
        r = await tree.client("global").post("/strato/v1/schedule", json=hipaa)
        assert r.status_code == 200, r.text
    run(tmp_path, scenario)


# -- finding 6: a resumed zone never acts on an expired request -------------------------

def test_a_resumed_zone_does_not_place_what_its_caller_gave_up_on(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # dfw is "paused": requests reach it after the root's deadline passed.
        tree.delay("dfw", 2.0, "/strato/v1/schedule")
        tree.kill("ord")
        b = req(1, constraints=[{"type": "location", "pattern": "dfw/*"}],
                deadline=time.time() + 1.0)
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        await tree.transport.settle()  # dfw resumes and sees the request
        assert await held_at(tree, b["consumers"][0]) == []
    run(tmp_path, scenario)


def test_a_leaf_refuses_a_request_past_its_deadline(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        b = req(1, deadline=time.time() - 1)
        r = await tree.client("dfw-r1").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        assert "deadline" in r.json()["errors"][0]["detail"]
        assert await held_at(tree, b["consumers"][0]) == []
    run(tmp_path, scenario)


# -- finding 7: a duplicate zone name never takes over a live child ---------------------

def test_a_second_zone_cannot_take_a_live_childs_name(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        ident = "a" * 32
        r = await c.post("/strato/v1/children", json={
            "name": "dfw", "url": tree.url("dfw"), "location_prefix": "dfw",
            "identity": ident})
        assert r.status_code == 200, r.text  # the same zone, now with its identity
        # Another zone claiming the name, at another address: refused.
        r = await c.post("/strato/v1/children", json={
            "name": "dfw", "url": tree.url("ord"), "identity": "b" * 32})
        assert r.status_code == 409, r.text
        assert "live zone" in r.json()["errors"][0]["detail"]
        kids = {k["name"]: k["url"] for k in (await c.get("/strato/v1/children")).json()[
            "children"]}
        assert kids["dfw"] == tree.url("dfw")
        # The real one, moved to a new address, re-registers with its identity.
        r = await c.post("/strato/v1/children", json={
            "name": "dfw", "url": tree.url("dfw") + "/", "identity": ident})
        assert r.status_code == 200, r.text
        # Once the name's zone is dead, a new zone may take it.
        tree.kill("dfw")
        r = await c.post("/strato/v1/children", json={
            "name": "dfw", "url": tree.url("dfw-r1"), "identity": "c" * 32})
        assert r.status_code == 200, r.text
    run(tmp_path, scenario)


@pytest.mark.parametrize("ident", ["short", "x" * 300])
def test_identity_is_bounded(tmp_path: Path, ident: str) -> None:
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("global").post("/strato/v1/children", json={
            "name": "new", "url": "http://127.0.0.1:9", "identity": ident})
        assert r.status_code == 400, r.text
        assert "identity" in r.text
    run(tmp_path, scenario)



def test_a_claim_routed_through_a_zone_is_refused_after_its_cancel(tmp_path: Path) -> None:
    """`best` mode claims a plan down the zone path; a cancel that reaches the
    routing zone first makes the late claim a refusal there, not a placement."""
    async def scenario(tree: InProcessTree) -> None:
        plan = await tree.client("dfw-r1").post("/strato/v1/explain", json=req(1))
        p = plan.json()["placements"][0]
        claim = {"path": ["dfw-r1"], "project_id": "p", "user_id": "u",
                 "request_id": "late@global#1",
                 "placements": [{"consumer_uuid": p["consumer_uuid"],
                                 "allocations": p["allocations"]}]}
        r = await tree.client("dfw").post("/strato/v1/requests/cancel",
                                          json={"request_id": "late@global#1"})
        assert r.status_code == 200
        r = await tree.client("dfw").post("/strato/v1/claims", json=claim)
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "strato.request_cancelled"
        assert await held_at(tree, p["consumer_uuid"]) == []
        # A claim that did arrive is undone by the cancel, through the zone.
        claim["request_id"] = "early@global#2"
        r = await tree.client("dfw").post("/strato/v1/claims", json=claim)
        assert r.status_code == 200, r.text
        again = await tree.client("dfw").post("/strato/v1/claims", json=claim)
        assert again.status_code == 200 and again.json()["replayed"] is True
        assert await held_at(tree, p["consumer_uuid"]) == ["dfw-r1"]
        r = await tree.client("dfw").post("/strato/v1/requests/cancel",
                                          json={"request_id": "early@global#2"})
        assert r.json()["forwarded"] == ["dfw-r1"]
        assert await held_at(tree, p["consumer_uuid"]) == []
    run(tmp_path, scenario)


def test_a_split_confirmed_after_its_deadline_leaves_nothing_held(tmp_path: Path) -> None:
    """The pool part is permanent once the split is confirmed; if the request's
    time ran out meanwhile, undoing it removes the pool allocation too (the
    chaos suite found it left behind)."""
    async def scenario(tree: InProcessTree) -> None:
        await provider(tree.client("dfw"), "dfw-disk", {"DISK_GB": {"total": 1000}},
                       traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
        await provider(tree.client("dfw-r1"), "dfw-r1-agg",
                       {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}, aggs=[AGG])
        await tree.zone_tree("dfw").refresh(fresh=True)
        tree.delay("dfw-r1", 1.6, "/strato/v1/claims/confirm")
        b = req(1, request_id="late-split", deadline=time.time() + 1.5)
        b["groups"] = [{"resources": {"VCPU": 1, "DISK_GB": 10}}]
        r = await tree.client("dfw").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        await tree.transport.settle()
        await tree.zone_tree("dfw").reconcile("dfw-r1")
        assert await held_at(tree, b["consumers"][0]) == []
        invariants(tree, set())
    run(tmp_path, scenario, {"child_timeout": 3.0})


def test_a_hung_cell_costs_one_timeout_and_leaves_its_region_in_use(tmp_path: Path) -> None:
    """A cell that hangs (paused): its region answers the request that needed
    it within the root's wait (no second wait on a cancel sent to the cell
    that just timed out: that cancel is in doubt at once), so the root keeps
    the region, and the next request goes to the region's other cell at once
    (a failed cell is asked again only once its probe finds it answering)."""
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw-r2", 30.0)
        root = tree.client("global")
        room2 = [{"type": "location", "pattern": "dfw/room2/*"}]
        start = time.perf_counter()
        r = await root.post("/strato/v1/schedule", json=req(1, constraints=room2))
        took = time.perf_counter() - start
        assert r.status_code == 503, r.text
        assert took < 3.0, took  # child_timeout 2.0: one wait, not two or three
        assert tree.zone_tree("global").health_of("dfw").healthy
        for _ in range(3):
            start = time.perf_counter()
            r = await root.post("/strato/v1/schedule", json=req(1, constraints=[
                {"type": "location", "pattern": "dfw/*"}]))
            assert r.status_code == 200, r.text
            assert r.json()["placements"][0]["zone"] == "global/dfw/dfw-r1"
            assert time.perf_counter() - start < 0.5
        # The cell resumes: its probe brings it back, and the part it may have
        # made for the first request is cancelled there.
        tree.revive("dfw-r2")
        deadline = time.monotonic() + MAX_BACKOFF_S + 3
        while not tree.zone_tree("dfw").health_of("dfw-r2").healthy:
            assert time.monotonic() < deadline, "dfw-r2 never came back"
            await tree.zone_tree("dfw").refresh()
            await asyncio.sleep(0.1)
        r = await root.post("/strato/v1/schedule", json=req(1, constraints=room2))
        assert r.status_code == 200, r.text
    run(tmp_path, scenario, {"child_timeout": 2.0, "request_timeout": 6.0})


def test_a_parent_cancel_does_not_wait_on_a_hung_cell_once_its_backoff_is_over(
        tmp_path: Path) -> None:
    """On a slow day the parent's cancel comes after the hung cell's first
    backoff: being due for a probe does not make the cell worth waiting on
    (the CI failure of stop 35: the root's 503 took 3.7 s, not 2)."""
    async def scenario(tree: InProcessTree) -> None:
        tree.delay("dfw-r2", 30.0)
        dfw = tree.client("dfw")
        b = req(1, request_id="slow-day",
                constraints=[{"type": "location", "pattern": "dfw/room2/*"}])
        r = await dfw.post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        h = tree.zone_tree("dfw").health_of("dfw-r2")
        assert h.hung
        await asyncio.sleep(FIRST_BACKOFF_S * 1.5)
        assert h.due()  # its probe is due: still, nobody has heard from it
        start = time.perf_counter()
        r = await dfw.post("/strato/v1/requests/cancel", json={"request_id": "slow-day"})
        took = time.perf_counter() - start
        assert r.status_code == 200, r.text
        assert r.json()["deferred"] == ["dfw-r2"], r.text
        assert took < 0.5, took
    run(tmp_path, scenario, {"child_timeout": 1.0})
