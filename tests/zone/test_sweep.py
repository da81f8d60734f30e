"""Parts lost with the machine (zone/sweep.py).

A routing zone records a request's parts without waiting for the disk; a
machine that dies may take the last records with it while a child holds the
part. On start-up the zone asks its children for what it sent in the moments
it may have lost, and cancels what its ledger does not know. Here the loss is
made by deleting the records, as the disk would have lost them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from strato.store import zone_meta
from strato.store.schema import request_parts, schedule_requests
from strato.zone import sweep
from strato.zone.inprocess import InProcessTree
from strato.zone.transport import Reply
from tests.zone.helpers import own_allocations
from tests.zone.test_tree import req, run, schedule


def forget(tree: InProcessTree, zone: str, request_id: str) -> None:
    """`zone`'s disk lost the records of `request_id` (and of its parts)."""
    with tree.dbs[zone].write() as conn:
        conn.execute(sa.delete(request_parts).where(request_parts.c.request_id == request_id))
        conn.execute(sa.delete(schedule_requests)
                     .where(schedule_requests.c.request_id == request_id))


def placed_at(tree: InProcessTree, consumer: str) -> list[str]:
    return [z for z in tree.dbs if own_allocations(tree, z, consumer)]


async def restart(tree: InProcessTree, zone: str) -> sweep.Sweep | None:
    """What a start-up does before serving: plan the sweep."""
    zt = tree.zone_tree(zone)
    await zt.open_sweep()
    return zt._sweep


async def sweep_round(tree: InProcessTree, zone: str) -> sweep.Sweep | None:
    zt = tree.zone_tree(zone)
    assert zt._sweep is not None
    zt._sweep = await sweep.run(zt, zt._sweep)
    return zt._sweep


async def after_the_stretch(tree: InProcessTree, zone: str) -> sweep.Sweep | None:
    """A round once the stretch is over (its requests' deadlines passed): the
    last a child is asked."""
    zt = tree.zone_tree(zone)
    assert zt._sweep is not None
    zt._sweep = dataclasses.replace(zt._sweep, end=time.time() - sweep.BEFORE_S - 1.0)
    return await sweep_round(tree, zone)


async def heartbeat(tree: InProcessTree, zone: str, at: float | None = None) -> None:
    await tree.zone_tree(zone).write_meta(
        lambda conn: zone_meta.put(conn, sweep.ALIVE, repr(time.time() if at is None else at)))


def test_a_part_the_root_lost_the_record_of_is_cancelled_down_the_tree(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await heartbeat(tree, "global")
        await heartbeat(tree, "dfw")
        kept = req(request_id="kept-1")
        lost = req(request_id="lost-1")
        await schedule(tree, kept)
        ans = await schedule(tree, lost)
        consumer = ans["placements"][0]["consumer_uuid"]
        leaf = ans["placements"][0]["zone"].split("/")[-1]
        assert placed_at(tree, consumer) == [leaf]
        # The machine died: the answer never left, and the disk lost the records.
        forget(tree, "global", "lost-1")

        pending = await restart(tree, "global")
        assert pending is not None and set(pending.children) == {"dfw", "ord"}
        # Cancelled at once; the children are asked again until the stretch
        # is over (a part asked for just before may reach them later).
        assert await sweep_round(tree, "global") == pending
        assert placed_at(tree, consumer) == []
        # Just after the stretch: once more (a record may be stamped before
        # its commit shows it), then done.
        zt = tree.zone_tree("global")
        assert zt._sweep is not None
        zt._sweep = dataclasses.replace(zt._sweep, end=time.time() - 1.0)
        assert await sweep_round(tree, "global") is not None
        assert await after_the_stretch(tree, "global") is None
        assert placed_at(tree, kept["consumers"][0]) != []
        # The client's retry places it once, afresh.
        again = await schedule(tree, lost)
        assert "replayed" not in again
        assert len(placed_at(tree, consumer)) == 1
        # Nothing is owed any more, across a restart too.
        with tree.dbs["global"].read() as conn:
            assert zone_meta.get(conn, sweep.PENDING) is None
    run(tmp_path, scenario)


def test_a_child_down_at_start_up_is_asked_when_it_answers_even_after_another_restart(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await heartbeat(tree, "global")
        ans = await schedule(tree, req(request_id="lost-2",
                                       constraints=[{"type": "location",
                                                     "pattern": "dfw/*"}]))
        consumer = ans["placements"][0]["consumer_uuid"]
        forget(tree, "global", "lost-2")
        tree.kill("dfw")
        await restart(tree, "global")
        left = await after_the_stretch(tree, "global")
        assert left is not None and left.children == ("dfw",)
        assert placed_at(tree, consumer) != []
        # Restarted again while dfw is still away: the owed sweep is kept.
        await heartbeat(tree, "global")
        again = await restart(tree, "global")
        assert again is not None and "dfw" in again.children
        assert again.start <= left.start
        tree.revive("dfw")
        tree.zone_tree("global").health_of("dfw").ok()
        assert await sweep_round(tree, "global") is not None
        assert placed_at(tree, consumer) == []
        assert await after_the_stretch(tree, "global") is None
    run(tmp_path, scenario)


def test_a_database_restored_from_an_old_backup_cancels_nothing_placed_since(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # The last heartbeat the database has is long before these requests
        # (as in a backup): what they placed is not the sweep's to cancel.
        await heartbeat(tree, "global", at=time.time() - 3600)
        with tree.dbs["global"].write() as conn:
            conn.execute(sa.insert(schedule_requests).values(
                request_id="old", status=200, response="{}",
                created_at=sa.func.datetime("now", "-3601 seconds")))
        ans = await schedule(tree, req(request_id="after-backup"))
        consumer = ans["placements"][0]["consumer_uuid"]
        forget(tree, "global", "after-backup")
        await restart(tree, "global")
        assert await sweep_round(tree, "global") is None
        assert placed_at(tree, consumer) != []
    run(tmp_path, scenario)


def test_a_zone_that_never_ran_with_children_owes_no_sweep(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await schedule(tree, req())
        assert await restart(tree, "global") is None  # no heartbeat yet
        assert await restart(tree, "dfw-r1") is None  # no children
    run(tmp_path, scenario)


async def listing(tree: InProcessTree, zone: str, status: int = 200,
                  token: str = "admin", **params: Any) -> dict[str, Any]:
    r = await tree.client(zone).get("/strato/v1/requests", params=params,
                                    headers={"x-auth-token": token})
    assert r.status_code == status, r.text
    return dict(r.json())


def test_a_child_lists_only_what_that_zone_sent_in_the_window_page_by_page(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        for i in range(3):
            await schedule(tree, req(request_id=f"r{i}",
                                     constraints=[{"type": "location", "pattern": "dfw/*"}]))
        # A refusal holds nothing: not listed.
        await schedule(tree, req(vcpu=1000, request_id="too-big"), status=409)
        got = await listing(tree, "dfw", made_by="global", newer_than=60)
        ids = [r["request_id"] for r in got["requests"]]
        assert len(ids) == 3 and all(i.split("@")[0] in ("r0", "r1", "r2") for i in ids)
        assert got["next"] is None
        # dfw's own parts at its cells are dfw's, not global's.
        assert (await listing(tree, "dfw-r1", made_by="global", newer_than=60))["requests"] == []
        paged: list[str] = []
        after = None
        while True:
            params: dict[str, Any] = {"made_by": "global", "newer_than": 60, "limit": 2}
            if after:
                params["after"] = after
            page = await listing(tree, "dfw", **params)
            paged += [r["request_id"] for r in page["requests"]]
            after = page["next"]
            if after is None:
                break
        assert paged == ids
        assert (await listing(tree, "dfw", made_by="global", newer_than=60,
                              older_than=30))["requests"] == []
        # A zone name's LIKE wildcards match only themselves.
        assert (await listing(tree, "dfw", made_by="g_obal", newer_than=60))["requests"] == []
        # ... and case counts (SQLite's LIKE ignores it).
        assert (await listing(tree, "dfw", made_by="GLOBAL", newer_than=60))["requests"] == []
    run(tmp_path, scenario)


def test_the_listing_refuses_bad_input_and_strangers(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        for params in ({"made_by": "global"}, {"made_by": "glo bal", "newer_than": 1},
                       {"made_by": "global", "newer_than": -1},
                       {"made_by": "global", "newer_than": "soon"},
                       {"made_by": "global", "newer_than": 1, "limit": 0},
                       {"made_by": "global", "newer_than": 1, "after": "nonsense"},
                       {"made_by": "global", "newer_than": 1e300}):
            body = await listing(tree, "dfw", 400, **params)
            assert body["errors"][0]["status"] == 400
        await listing(tree, "dfw", 403, token="someone:p", made_by="global", newer_than=1)
    run(tmp_path, scenario)


def test_a_child_that_cannot_list_is_not_asked_forever_and_a_liar_is_faulty(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await heartbeat(tree, "global")
        await schedule(tree, req(request_id="any"))
        zt = tree.zone_tree("global")
        real = zt.transport.call

        async def older_dfw_lying_ord(url: str, method: str, path: str, **kw: Any) -> Any:
            if path.startswith("/strato/v1/requests?") and url.endswith("dfw"):
                return Reply(404, {"errors": [{"status": 404, "title": "Not Found",
                                               "detail": "no such route"}]})
            if path.startswith("/strato/v1/requests?") and url.endswith("ord"):
                return Reply(200, {"requests": [{"request_id": "x@elsewhere#0123abcd"}],
                                   "next": None})
            return await real(url, method, path, **kw)
        zt.transport.call = older_dfw_lying_ord  # type: ignore[method-assign]
        await restart(tree, "global")
        left = await sweep_round(tree, "global")
        # dfw is an older zone: given up on. ord answered with ids global never
        # made: faulty, asked again once it is healthy.
        assert left is not None and left.children == ("ord",)
        assert "faulty" in (zt.health_of("ord").last_error or "")
    run(tmp_path, scenario)


def test_a_child_whose_pages_never_end_is_faulty(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await heartbeat(tree, "global")
        await schedule(tree, req(request_id="any"))
        zt = tree.zone_tree("global")
        real = zt.transport.call
        asked: list[str] = []

        async def endless_ord(url: str, method: str, path: str, **kw: Any) -> Any:
            if path.startswith("/strato/v1/requests?") and url.endswith("ord"):
                asked.append(path)
                return Reply(200, {"requests": [{"request_id": "x@global#0123abcd"}],
                                   "next": "2026-01-01T00:00:00|x"})
            return await real(url, method, path, **kw)
        zt.transport.call = endless_ord  # type: ignore[method-assign]
        await restart(tree, "global")
        left = await sweep_round(tree, "global")
        assert left is not None and "ord" in left.children
        assert len(asked) == 2
        assert "pages that do not end" in (zt.health_of("ord").last_error or "")
    run(tmp_path, scenario)


def test_a_zone_that_stops_between_a_childs_answer_and_its_own_keeps_nothing_held(
        tmp_path: Path) -> None:
    """A routing zone holds a request's parts in memory until its answer's
    commit writes them: one that stops in between takes them along. Its
    start-up sweep cancels what the child holds, and until then its parent's
    cancel of the request is not confirmed (the parent keeps it in doubt)."""
    async def scenario(tree: InProcessTree) -> None:
        await heartbeat(tree, "dfw")
        dfw = tree.zone_tree("dfw")
        stuck = asyncio.Event()
        real_final = dfw._final

        async def dies_before_its_answer(attempt: Any, state: Any, body: Any) -> None:
            if attempt.request_id.startswith("lost-3@"):
                stuck.set()
                await asyncio.Event().wait()  # the process is gone: never resumes
            await real_final(attempt, state, body)
        dfw._final = dies_before_its_answer  # type: ignore[method-assign]
        body = req(request_id="lost-3", constraints=[{"type": "location", "pattern": "dfw/*"}])
        asked = asyncio.ensure_future(tree.client("global").post("/strato/v1/schedule",
                                                                 json=body))
        await asyncio.wait_for(stuck.wait(), 10)
        consumer = body["consumers"][0]
        held = placed_at(tree, consumer)
        assert len(held) == 1 and held[0].startswith("dfw-r")
        # The process is gone, with what it held in memory.
        dfw._open.clear()
        dfw._final = real_final  # type: ignore[method-assign]
        r = await asked
        assert r.status_code == 503, r.text  # the root's call timed out: in doubt
        pending = await restart(tree, "dfw")
        assert pending is not None
        # The root's cancel reaches the new process, which has no record of
        # the part: not confirmed while the sweep is owed.
        glob = tree.zone_tree("global")
        assert await glob.reconcile("dfw") == 0
        assert (await glob.in_doubt_counts()).get("dfw") == 1
        assert await sweep_round(tree, "dfw") is not None
        assert placed_at(tree, consumer) == []
        assert await after_the_stretch(tree, "dfw") is None
        await glob.reconcile("dfw")
        assert not (await glob.in_doubt_counts()).get("dfw")
        # The client's retry places it once.
        again = await schedule(tree, body)
        assert len(placed_at(tree, consumer)) == 1 and "replayed" not in again
    run(tmp_path, scenario)
