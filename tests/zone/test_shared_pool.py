"""A placement across zones: compute in a cell, disk from a pool at the root.

Atomic through provisional claims; a crash at each step of the protocol
leaves, once holds expire and recovery runs, no orphan and no double claim.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from strato.model.schedule import RequestGroupSpec, ScheduleRequest
from strato.sim.invariants import assert_databases
from strato.store import ledger, provisional
from strato.store.schema import provisional_claims, schedule_requests
from strato.zone import shared
from strato.zone.attempt import Attempt
from strato.zone.inprocess import InProcessTree, ZoneSpec, build
from strato.zone.tree import ZoneTree
from tests.zone.helpers import own_allocations

AGG = str(uuid.uuid4())
ZONES = [ZoneSpec("global"), ZoneSpec("c1", parent="global", location_prefix="dfw"),
         ZoneSpec("c2", parent="global", location_prefix="ord")]


async def provider(c: Any, name: str, inventories: dict[str, Any], *,
                   traits: list[str] | None = None, aggs: list[str] | None = None) -> str:
    rp = (await c.post("/resource_providers", json={"name": name})).json()
    gen = (await c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0, "inventories": inventories})).json()[
        "resource_provider_generation"]
    if traits:
        gen = (await c.put(f"/resource_providers/{rp['uuid']}/traits", json={
            "traits": traits, "resource_provider_generation": gen})).json()[
            "resource_provider_generation"]
    if aggs:
        r = await c.put(f"/resource_providers/{rp['uuid']}/aggregates", json={
            "aggregates": aggs, "resource_provider_generation": gen})
        assert r.status_code == 200, r.text
    return str(rp["uuid"])


async def make(tmp: Path) -> tuple[InProcessTree, str]:
    tree = build(tmp, ZONES)
    await tree.link()
    pool = await provider(tree.client("global"), "disk-pool", {"DISK_GB": {"total": 1000}},
                          traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
    for i in range(2):
        await provider(tree.client("c1"), f"c1-h{i}", {"VCPU": {"total": 8}}, aggs=[AGG])
        await provider(tree.client("c2"), f"c2-h{i}", {"VCPU": {"total": 8}})
    await tree.apps["global"].state.tree.refresh(fresh=True)
    return tree, pool


def body(n: int = 1, disk: int = 100) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(n)], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"VCPU": 1, "DISK_GB": disk}}]}


def run(tmp: Path, scenario: Callable[[InProcessTree, str], Awaitable[None]],
        maker: Callable[[Path], Awaitable[tuple[InProcessTree, str]]] | None = None) -> None:
    async def main() -> None:
        tree, pool = await (maker or make)(tmp)
        try:
            await scenario(tree, pool)
        finally:
            await tree.aclose()
    asyncio.run(main())


def zone_tree(tree: InProcessTree, name: str) -> ZoneTree:
    zt: ZoneTree = tree.apps[name].state.tree
    return zt


async def allocations(tree: InProcessTree, zone: str, consumer: str) -> dict[str, Any]:
    """What `zone`'s own store holds (its API answers for the subtree)."""
    return own_allocations(tree, zone, consumer)


def pending(tree: InProcessTree, zone: str) -> list[provisional.Pending]:
    with tree.dbs[zone].read() as conn:
        return provisional.all_pending(conn)


def expire_all(tree: InProcessTree, zone: str) -> None:
    with tree.dbs[zone].write() as conn:
        conn.execute(sa.update(provisional_claims).values(
            expires_at=sa.func.datetime("now", "-1 hour")))


def check(tree: InProcessTree) -> None:
    names = list(tree.dbs)
    assert_databases([tree.dbs[n] for n in names], names)


def test_compute_in_a_cell_and_disk_at_the_root(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        b = body(2)
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        for p in r.json()["placements"]:
            assert p["zone"] == "global/c1"  # only c1's hosts are in the pool's aggregate
            assert p["allocations"][pool]["resources"] == {"DISK_GB": 100}
            at_root = await allocations(tree, "global", p["consumer_uuid"])
            assert at_root[pool]["resources"] == {"DISK_GB": 100}
            in_cell = await allocations(tree, "c1", p["consumer_uuid"])
            assert next(iter(in_cell.values()))["resources"] == {"VCPU": 1}
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        check(tree)
    run(tmp_path, scenario)


def test_best_mode_holds_the_cell_part_too(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        r = await tree.client("global").post("/strato/v1/schedule",
                                             json={**body(1), "mode": "best"})
        assert r.status_code == 200, r.text
        p = r.json()["placements"][0]
        assert p["zone"] == "global/c1" and pool in p["allocations"]
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        check(tree)
    run(tmp_path, scenario)


def test_pool_exhaustion_leaves_nothing_held(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        for _ in range(2):
            r = await tree.client("global").post("/strato/v1/schedule", json=body(1, 400))
            assert r.status_code == 200, r.text
        r = await tree.client("global").post("/strato/v1/schedule", json=body(1, 400))
        assert r.status_code == 409
        # No VCPU left in c1 either: the disk hold must be released again.
        for _ in range(14):
            await tree.client("global").post("/strato/v1/schedule", json=body(1, 10))
        r = await tree.client("global").post("/strato/v1/schedule", json=body(1, 10))
        assert r.status_code == 409
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        check(tree)
    run(tmp_path, scenario)


def _sub(req: ScheduleRequest, ttl: float) -> ScheduleRequest:
    return req.model_copy(update={
        "groups": [RequestGroupSpec(resources={"VCPU": 1}, member_of=[[AGG]])],
        "hold_ttl": ttl})


def _reserve(tree: InProcessTree, rid: str, deadline: float) -> Attempt:
    attempt = Attempt(rid, deadline, reserved=True)
    with tree.dbs["global"].write() as conn:
        assert ledger.reserve(conn, rid, deadline, attempt.token)
    return attempt


def _overdue(tree: InProcessTree, rid: str) -> None:
    """As after a crash and restart: the request's caller stopped waiting."""
    with tree.dbs["global"].write() as conn:
        conn.execute(sa.update(schedule_requests)
                     .where(schedule_requests.c.request_id == rid)
                     .values(deadline=time.time() - 60))


async def _hold_both(tree: InProcessTree, pool: str, rid: str = "split-1"
                     ) -> tuple[ZoneTree, ScheduleRequest, dict[str, Any]]:
    """The root's part held, the cell's part held: what schedule_split does
    before its decision, each part recorded under `rid`."""
    root = zone_tree(tree, "global")
    req = ScheduleRequest.model_validate(body(1))
    attempt = _reserve(tree, rid, time.time() + 300)
    with tree.dbs["global"].write() as conn:
        ledger.add_part(conn, rid, shared.POOL, rid, req.consumers, attempt.token)
    await asyncio.to_thread(root.local.hold_shared, list(req.consumers), pool,
                            {"DISK_GB": 100}, req, 30.0, rid, attempt.token)
    answer = await root.decide_children(_sub(req, 30.0), attempt, [])
    assert answer is not None
    return root, req, answer


def test_crash_after_the_root_held_its_part(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = zone_tree(tree, "global")
        req = ScheduleRequest.model_validate(body(1))
        await asyncio.to_thread(root.local.hold_shared, list(req.consumers), pool,
                                {"DISK_GB": 100}, req, 30.0, "r")
        # ... the root dies here; on restart its hold has expired.
        expire_all(tree, "global")
        assert (await root.recover())["released"] == 1
        assert await allocations(tree, "global", req.consumers[0]) == {}
        check(tree)
    run(tmp_path, scenario)


def test_crash_after_both_held_before_the_decision(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root, req, _ = await _hold_both(tree, pool)
        expire_all(tree, "global")
        expire_all(tree, "c1")
        await root.recover()
        await zone_tree(tree, "c1").recover()
        for z in ("global", "c1"):
            assert await allocations(tree, z, req.consumers[0]) == {}
        check(tree)
    run(tmp_path, scenario)


def _decide(tree: InProcessTree, req: ScheduleRequest, answer: dict[str, Any]
            ) -> list[dict[str, Any]]:
    parts = shared.remote_parts(answer)
    with tree.dbs["global"].write() as conn:
        assert provisional.mark_committing(conn, list(req.consumers), parts)
    return parts


def test_a_decision_whose_request_is_at_work_is_left_to_it(tmp_path: Path) -> None:
    """The split decided and its worker is still in time: recovery waits."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root, req, answer = await _hold_both(tree, pool)
        _decide(tree, req, answer)
        assert (await root.recover())["finished"] == 0
        assert len(pending(tree, "global")) == 1
    run(tmp_path, scenario)


def test_a_decision_left_by_a_crash_is_undone_at_its_deadline(tmp_path: Path) -> None:
    """The root died after deciding, before confirming: its caller was never
    answered (and will cancel it). Past the deadline recovery undoes every part."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root, req, answer = await _hold_both(tree, pool)
        _decide(tree, req, answer)
        _overdue(tree, "split-1")
        done = await root.recover()
        assert done["undone"] == 1 and done["finished"] == 0
        for z in ("global", "c1"):
            assert await allocations(tree, z, req.consumers[0]) == {}
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        # The request's id is free again: a retry works afresh.
        await root.recover()
        with tree.dbs["global"].read() as conn:
            assert ledger.lookup(conn, "split-1") is None
        check(tree)
    run(tmp_path, scenario)


def test_decided_but_the_cell_part_expired_first(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root, req, answer = await _hold_both(tree, pool)
        _decide(tree, req, answer)
        expire_all(tree, "c1")
        await zone_tree(tree, "c1").recover()  # the cell releases its part
        _overdue(tree, "split-1")
        await root.recover()
        for z in ("global", "c1"):
            assert await allocations(tree, z, req.consumers[0]) == {}
        assert pending(tree, "global") == []
        check(tree)
    run(tmp_path, scenario)


def test_crash_after_the_cell_confirmed_undoes_the_confirmed_part_too(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root, req, answer = await _hold_both(tree, pool)
        parts = _decide(tree, req, answer)
        r = await tree.client("global").post("/strato/v1/claims/confirm", json={
            "path": [parts[0]["child"], *parts[0]["path"]], "consumers": list(req.consumers)})
        assert r.status_code == 200, r.text
        # ... the root dies before marking its own part done; its caller was
        # never answered. The confirmed part is cancelled by its part id.
        _overdue(tree, "split-1")
        assert (await root.recover())["undone"] == 1
        for z in ("global", "c1"):
            assert await allocations(tree, z, req.consumers[0]) == {}
        check(tree)
    run(tmp_path, scenario)


def test_a_cell_that_does_not_confirm_is_not_an_answer(tmp_path: Path) -> None:
    """Decided, then the cell's confirm answers are lost: 503 (nothing stays
    placed, retry), and every part is undone once the cell answers again."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        b = body(1)
        b["request_id"] = "confirm-lost"
        root = zone_tree(tree, "global")
        tree.lose_answers("c1", "/strato/v1/claims/confirm")
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 503, r.text
        assert r.json()["errors"][0]["code"] == "strato.zone_unavailable"
        tree.revive("c1")
        await root.reconcile("c1")
        await zone_tree(tree, "c1").recover()
        for z in ("global", "c1"):
            assert await allocations(tree, z, b["consumers"][0]) == {}
        # Retried with the same id: placed, once.
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        check(tree)
    run(tmp_path, scenario)



# -- a pool here and compute divided among several cells ---------------------------------

async def make_wide(tmp: Path) -> tuple[InProcessTree, str]:
    """Both cells' hosts (two of 8 VCPU each) in the root pool's aggregate."""
    tree = build(tmp, ZONES)
    await tree.link()
    pool = await provider(tree.client("global"), "disk-pool", {"DISK_GB": {"total": 1000}},
                          traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
    for i in range(2):
        for cell in ("c1", "c2"):
            await provider(tree.client(cell), f"{cell}-h{i}", {"VCPU": {"total": 8}},
                           aggs=[AGG])
    await zone_tree(tree, "global").refresh(fresh=True)
    return tree, pool


def run_wide(tmp: Path, scenario: Callable[[InProcessTree, str], Awaitable[None]]) -> None:
    run(tmp, scenario, make_wide)


def hosts(n: int, *, atomic: bool = True) -> dict[str, Any]:
    return {**body(n), "atomic": atomic,
            "groups": [{"resources": {"VCPU": 8, "DISK_GB": 100}}]}


async def pool_used(tree: InProcessTree, pool: str) -> int:
    r = await tree.client("global").get(f"/resource_providers/{pool}/usages")
    return int(r.json()["usages"]["DISK_GB"])


def test_a_gang_with_a_pool_here_is_divided_among_cells(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = zone_tree(tree, "global")
        # What was not confirmed is gone after this (long enough for a slow
        # machine to hold and confirm: 0.5 s was not, once).
        root.config.hold_ttl = 2.0
        b = hosts(3)
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        cells = sorted(p["zone"] for p in r.json()["placements"])
        assert len(set(cells)) == 2, cells
        await asyncio.sleep(2.3)
        for name in ("global", "c1", "c2"):
            await zone_tree(tree, name).recover()
        assert await pool_used(tree, pool) == 300
        for p in r.json()["placements"]:
            cell = p["zone"].split("/")[1]
            assert own_allocations(tree, cell, p["consumer_uuid"]), p
            assert pool in own_allocations(tree, "global", p["consumer_uuid"])
    run_wide(tmp_path, scenario)


def test_atomic_false_with_a_pool_holds_nothing_for_the_unplaced(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        b = hosts(6, atomic=False)
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert len(answer["placements"]) == 4 and len(answer["unplaced"]) == 2
        for name in ("global", "c1", "c2"):
            await zone_tree(tree, name).recover()
        assert await pool_used(tree, pool) == 400
        for c in answer["unplaced"]:
            assert not own_allocations(tree, "global", c)
    run_wide(tmp_path, scenario)


def test_a_divided_gang_with_a_pool_whose_cell_dies_holds_nothing(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = zone_tree(tree, "global")
        real_ask = root.ask

        async def ask(child: Any, r: ScheduleRequest, attempt: Any, share: float = 1.0
                      ) -> Any:
            if child.name == "c2" and not r.dry_run:
                tree.kill("c2")
            return await real_ask(child, r, attempt, share)
        root.ask = ask  # type: ignore[method-assign,assignment]
        b = hosts(3)
        r = await tree.client("global").post("/strato/v1/schedule", json=b)
        assert r.status_code in (409, 503), r.text
        assert await pool_used(tree, pool) == 0
        for c in b["consumers"]:
            assert not own_allocations(tree, "c1", c)
        tree.revive("c2")
        await root.reconcile()
        for c in b["consumers"]:
            assert not own_allocations(tree, "c2", c)
    run_wide(tmp_path, scenario)


def test_a_post_that_empties_a_consumer_on_a_pool_and_a_cell_is_refused_whole(
        tmp_path: Path) -> None:
    """Emptying it in one POST /allocations would remove the root's part
    only (the cell's VCPU leaked): a 400, nothing changed; DELETE does both."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        b = body(1)
        root = tree.client("global")
        r = await root.post("/strato/v1/schedule", json=b)
        assert r.status_code == 200, r.text
        c = b["consumers"][0]
        r = await root.post("/allocations", headers={"openstack-api-version": "placement 1.36"},
                            json={c: {"allocations": {}, "consumer_generation": 1,
                                      "project_id": "p", "user_id": "u"}})
        assert r.status_code == 400 and "span" in r.text, r.text
        assert await allocations(tree, "c1", c) and await allocations(tree, "global", c)
        assert (await root.delete(f"/allocations/{c}")).status_code == 204
        assert not await allocations(tree, "c1", c)
        assert not await allocations(tree, "global", c)
    run(tmp_path, scenario)


def test_nova_s_swap_to_a_migration_consumer_across_a_pool_and_a_cell_says_why(
        tmp_path: Path) -> None:
    """Nova's move_allocations (resize, migrate) of an instance on the root's
    pool and a cell's host, as Nova sends it at 1.28: a 400 that says a swap
    of allocations spanning zones is refused and why (it said only that
    removing allocations cannot be combined with such a write); nothing
    changed: the instance keeps both parts, the migration has none."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = {"openstack-api-version": "placement 1.28"}
        host = (await root.get("/resource_providers?name=c1-h0")).json()[
            "resource_providers"][0]["uuid"]
        inst, mig = str(uuid.uuid4()), str(uuid.uuid4())
        r = await root.put(f"/allocations/{inst}", headers=h, json={
            "allocations": {pool: {"resources": {"DISK_GB": 10}},
                            host: {"resources": {"VCPU": 2}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None})
        assert r.status_code == 204, r.text
        src = (await root.get(f"/allocations/{inst}", headers=h)).json()
        r = await root.post("/allocations", headers=h, json={
            inst: {"allocations": {}, "project_id": "p", "user_id": "u",
                   "consumer_generation": src["consumer_generation"]},
            mig: {"allocations": src["allocations"], "project_id": "p", "user_id": "u",
                  "consumer_generation": None}})
        assert r.status_code == 400, r.text
        detail = r.json()["errors"][0]["detail"]
        assert f"consumer {inst}: emptying a consumer" in detail, detail
        assert "this zone and zone c1" in detail and "migration consumer" in detail, detail
        assert await allocations(tree, "c1", inst) and await allocations(tree, "global", inst)
        assert not await allocations(tree, "c1", mig)
        assert not await allocations(tree, "global", mig)
    run(tmp_path, scenario)


def test_changing_a_consumer_on_a_pool_and_a_cell_says_it_spans_zones(
        tmp_path: Path) -> None:
    """Nova's evacuation claim (the instance's allocations on the pool and
    its host, plus the new host, with its generation) for a consumer on the
    root's pool and a cell's host: a 400 naming both zones that hold it and
    saying such a consumer is removed and written anew, not changed (it
    said the consumer was in this zone only and to place it elsewhere)."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = {"openstack-api-version": "placement 1.28"}
        hosts = [(await root.get(f"/resource_providers?name=c1-h{i}")).json()[
            "resource_providers"][0]["uuid"] for i in range(2)]
        inst = str(uuid.uuid4())
        allocs = {pool: {"resources": {"DISK_GB": 10}}, hosts[0]: {"resources": {"VCPU": 2}}}
        r = await root.put(f"/allocations/{inst}", headers=h, json={
            "allocations": allocs, "project_id": "p", "user_id": "u",
            "consumer_generation": None})
        assert r.status_code == 204, r.text
        r = await root.put(f"/allocations/{inst}", headers=h, json={
            "allocations": {**allocs, hosts[1]: {"resources": {"VCPU": 2}}},
            "project_id": "p", "user_id": "u", "consumer_generation": 1})
        assert r.status_code == 400, r.text
        detail = r.json()["errors"][0]["detail"]
        assert f"{inst} in this zone and zone c1" in detail, detail
        assert "cannot be changed, only removed" in detail, detail
        assert "elsewhere" not in detail, detail
        assert list(await allocations(tree, "c1", inst)) == [hosts[0]]
        # A stale generation is still Placement's 409.
        r = await root.put(f"/allocations/{inst}", headers=h, json={
            "allocations": allocs, "project_id": "p", "user_id": "u",
            "consumer_generation": 5})
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
    run(tmp_path, scenario)


def test_a_post_emptying_a_consumer_on_a_pool_and_a_cell_beside_a_cell_write_is_refused(
        tmp_path: Path) -> None:
    """A POST /allocations emptying consumer S (on the root's pool and c1-h0)
    beside a new consumer on c1's hosts only: a 400, nothing changed (it was
    sent to c1, which emptied S's part there and left its pool part at the
    root: half a release, the pool's disk leaked)."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = {"openstack-api-version": "placement 1.28"}
        hosts = [(await root.get(f"/resource_providers?name=c1-h{i}")).json()[
            "resource_providers"][0]["uuid"] for i in range(2)]
        s, t = str(uuid.uuid4()), str(uuid.uuid4())
        r = await root.put(f"/allocations/{s}", headers=h, json={
            "allocations": {pool: {"resources": {"DISK_GB": 10}},
                            hosts[0]: {"resources": {"VCPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None})
        assert r.status_code == 204, r.text
        gen = (await root.get(f"/allocations/{s}", headers=h)).json()["consumer_generation"]
        r = await root.post("/allocations", headers=h, json={
            s: {"allocations": {}, "project_id": "p", "user_id": "u",
                "consumer_generation": gen},
            t: {"allocations": {hosts[1]: {"resources": {"VCPU": 1}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": None}})
        assert r.status_code == 400, r.text
        assert f"consumer {s} is emptied by this write" in r.text, r.text
        assert await allocations(tree, "c1", s) and await allocations(tree, "global", s)
        assert not await allocations(tree, "c1", t)
    run(tmp_path, scenario)
