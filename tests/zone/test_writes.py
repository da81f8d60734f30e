"""Allocation writes across zones at a routing zone (zone/writes.py): a
consumer on the root's disk pool and a cell's host, consumers of two cells in
one POST; all or nothing, concurrently and with a zone that does not answer."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from strato.store import ledger
from strato.zone.inprocess import InProcessTree
from tests.zone.helpers import own_allocations
from tests.zone.test_shared_pool import check, expire_all, pending, run

H = {"openstack-api-version": "placement 1.38"}


async def host(tree: InProcessTree, name: str) -> str:
    r = await tree.client("global").get(f"/resource_providers?name={name}", headers=H)
    return str(r.json()["resource_providers"][0]["uuid"])


def claim(allocs: dict[str, dict[str, int]], **kw: Any) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": r} for rp, r in allocs.items()},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE", **kw}


async def write(root: Any, consumer: str | uuid.UUID, allocs: dict[str, dict[str, int]],
                **kw: Any) -> Any:
    """PUT /allocations/{consumer} at the root: a new consumer's claim of `allocs`."""
    return await root.put(f"/allocations/{consumer}", headers=H, json=claim(allocs, **kw))


def emptied(generation: int) -> dict[str, Any]:
    """An empty PUT body (Nova's release) at `generation`."""
    return {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_type": "INSTANCE",
            "consumer_generation": generation}


def used(tree: InProcessTree, zone: str) -> int:
    """Resources allocated in `zone`'s own store, all classes together."""
    with tree.dbs[zone].read() as conn:
        return int(conn.execute(sa.text("SELECT COALESCE(SUM(used), 0) FROM allocations")
                                ).scalar_one())


def test_a_consumer_on_the_roots_pool_and_a_cells_host(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = await host(tree, "c1-h0")
        c = str(uuid.uuid4())
        r = await write(root, c, {h: {"VCPU": 2}, pool: {"DISK_GB": 100}})
        assert r.status_code == 204, r.text
        assert own_allocations(tree, "global", c)[pool]["resources"] == {"DISK_GB": 100}
        assert own_allocations(tree, "c1", c)[h]["resources"] == {"VCPU": 2}
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        # Seen whole at the root, counted in its usages, released there.
        got = (await root.get(f"/allocations/{c}", headers=H)).json()
        assert {rp: a["resources"] for rp, a in got["allocations"].items()} == {
            h: {"VCPU": 2}, pool: {"DISK_GB": 100}}
        assert got["consumer_type"] == "INSTANCE" and got["project_id"] == "p"
        r = await root.get("/usages?project_id=p", headers=H)
        assert r.json()["usages"]["INSTANCE"]["DISK_GB"] == 100
        # The same new consumer again: Placement's 409, nothing changes.
        r = await write(root, c, {h: {"VCPU": 1}, pool: {"DISK_GB": 1}})
        assert r.status_code == 409, r.text
        assert used(tree, "global") == 100 and used(tree, "c1") == 2
        r = await root.delete(f"/allocations/{c}", headers=H)
        assert r.status_code == 204, r.text
        assert used(tree, "global") == 0 and used(tree, "c1") == 0
        check(tree)
    run(tmp_path, scenario)


def test_a_post_across_two_cells_is_all_or_nothing(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h1, h2 = await host(tree, "c1-h0"), await host(tree, "c2-h0")
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        r = await root.post("/allocations", headers=H, json={
            a: claim({h1: {"VCPU": 4}}), b: claim({h2: {"VCPU": 4}, pool: {"DISK_GB": 10}})})
        assert r.status_code == 204, r.text
        assert used(tree, "c1") == 4 and used(tree, "c2") == 4 and used(tree, "global") == 10
        for consumer in (a, b):
            assert (await root.get(f"/allocations/{consumer}", headers=H)).json()[
                "allocations"]
        # c2's host has 4 VCPU left: asking 5 there refuses the whole write,
        # with c2's reason, and c1's part is undone.
        x, y = str(uuid.uuid4()), str(uuid.uuid4())
        r = await root.post("/allocations", headers=H, json={
            x: claim({h1: {"VCPU": 1}, pool: {"DISK_GB": 5}}), y: claim({h2: {"VCPU": 5}})})
        assert r.status_code == 409, r.text
        assert "c2" in r.json()["errors"][0]["detail"]
        assert used(tree, "c1") == 4 and used(tree, "c2") == 4 and used(tree, "global") == 10
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        # One consumer on two cells: a clear 400 (its reads would be split).
        r = await write(root, uuid.uuid4(), {h1: {"VCPU": 1}, h2: {"VCPU": 1}})
        assert r.status_code == 400 and "not two" in r.text, r.text
        # An existing consumer is changed where it is, not across zones.
        gen = (await root.get(f"/allocations/{a}", headers=H)).json()["consumer_generation"]
        r = await write(root, a, {h1: {"VCPU": 1}, pool: {"DISK_GB": 1}}, consumer_generation=gen)
        assert r.status_code == 400 and "existing consumer" in r.text, r.text
        # Bad input is the route's 400, naming the field; nothing written.
        r = await write(root, uuid.uuid4(), {h1: {"VCPU": -1}, pool: {"DISK_GB": 1}})
        assert r.status_code == 400, r.text
        assert used(tree, "c1") == 4 and used(tree, "global") == 10
        check(tree)
    run(tmp_path, scenario)


def test_a_cell_that_does_not_answer_leaves_nothing_written(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = await host(tree, "c1-h0")
        tree.kill("c1")
        r = await write(root, uuid.uuid4(), {h: {"VCPU": 1}, pool: {"DISK_GB": 50}})
        assert r.status_code == 503, r.text
        assert used(tree, "global") == 0 and pending(tree, "global") == []
        tree.revive("c1")
        # Its answer lost after the cell claimed: in doubt, undone at the cell
        # once it answers again; the root's part is released at once.
        tree.lose_answers("c1", "/strato/v1/claims")
        c = str(uuid.uuid4())
        r = await write(root, c, {h: {"VCPU": 1}, pool: {"DISK_GB": 50}})
        assert r.status_code == 503, r.text
        assert used(tree, "global") == 0
        tree.revive("c1")
        zt = tree.zone_tree("global")
        await zt.reconcile()
        expire_all(tree, "c1")
        await tree.zone_tree("c1").recover()
        assert used(tree, "c1") == 0 and own_allocations(tree, "c1", c) == {}
        # And the tree still takes the same write afterwards.
        r = await write(root, c, {h: {"VCPU": 1}, pool: {"DISK_GB": 50}})
        assert r.status_code == 204, r.text
        assert used(tree, "c1") == 1 and used(tree, "global") == 50
        check(tree)
    run(tmp_path, scenario)


def test_concurrent_writes_never_double_a_consumer_nor_overfill_the_pool(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        hosts = [await host(tree, f"c1-h{i}") for i in range(2)]
        # Eight writes of one new consumer at once: exactly one is made.
        c = str(uuid.uuid4())
        got = await asyncio.gather(*(write(root, c,
            {hosts[i % 2]: {"VCPU": 1}, pool: {"DISK_GB": 10}}) for i in range(8)))
        codes = sorted(r.status_code for r in got)
        assert codes.count(204) == 1 and set(codes) == {204, 409}, codes
        assert used(tree, "global") == 10 * codes.count(204)
        assert used(tree, "c1") == codes.count(204)
        # Twenty consumers of 100 GB on a 1,000 GB pool (10 used): 9 fit.
        many = [str(uuid.uuid4()) for _ in range(20)]
        got = await asyncio.gather(*(write(root, m,
            {hosts[i % 2]: {"VCPU": 1}, pool: {"DISK_GB": 100}})
            for i, m in enumerate(many)))
        made = [m for m, r in zip(many, got, strict=True) if r.status_code == 204]
        assert all(r.status_code in (204, 409) for r in got), [r.text for r in got]
        assert len(made) == 9, [r.text for r in got if r.status_code != 204]
        assert used(tree, "global") == 10 * codes.count(204) + 100 * len(made)
        assert used(tree, "c1") == codes.count(204) + len(made)
        assert pending(tree, "global") == [] and pending(tree, "c1") == []
        check(tree)
    run(tmp_path, scenario)


def test_a_write_past_its_deadline_is_undone_by_recovery(tmp_path: Path) -> None:
    """The root dies after holding both parts (nothing confirmed): its ledger
    entry passes its deadline, recovery undoes every part, nothing stays."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        zt = tree.zone_tree("global")
        h = await host(tree, "c1-h0")
        c = str(uuid.uuid4())

        async def dies(*_: Any, **__: Any) -> None:
            raise RuntimeError("the worker dies before confirming")

        async def nothing(*_: Any, **__: Any) -> None:
            return None  # ... and undoes nothing: a crash
        from strato.zone import writes
        real = writes._confirm
        writes._confirm = dies  # type: ignore[assignment]
        zt.give_up = nothing  # type: ignore[method-assign]
        try:
            await tree.client("global").put(
                f"/allocations/{c}", headers=H,
                json=claim({h: {"VCPU": 1}, pool: {"DISK_GB": 50}}))
        except RuntimeError:
            pass  # the in-process client re-raises what the app did not answer
        finally:
            writes._confirm = real  # type: ignore[assignment]
            del zt.give_up
        assert used(tree, "global") == 50 and used(tree, "c1") == 1  # held, unconfirmed
        # Whatever the dead worker left: past the deadline, recovery undoes it.
        with tree.dbs["global"].write() as conn:
            conn.exec_driver_sql("UPDATE strato_schedule_requests SET deadline = ?",
                                 (time.time() - 10,))
        await zt.recover()
        expire_all(tree, "global")
        expire_all(tree, "c1")
        await zt.recover()
        await tree.zone_tree("c1").recover()
        assert used(tree, "global") == 0 and used(tree, "c1") == 0
        with tree.dbs["global"].read() as conn:
            assert ledger.overdue(conn, time.time()) == []
        check(tree)
    run(tmp_path, scenario)


def test_nova_claims_a_candidate_of_the_roots_pool_and_a_cells_host(tmp_path: Path) -> None:
    """Placement's sharing providers through the root: candidates combine the
    root's disk pool with the hosts in its aggregate (c1's, not c2's), and
    the one Nova picks is claimed with one PUT at the root."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        for version in ("1.38", "1.12", "1.10"):
            r = await root.get("/allocation_candidates?resources=VCPU:2,DISK_GB:100",
                               headers={"openstack-api-version": f"placement {version}"})
            assert r.status_code == 200, r.text
            got = r.json()
            assert len(got["allocation_requests"]) == 2, (version, got)
            assert pool in got["provider_summaries"]
        c1 = {await host(tree, f"c1-h{i}") for i in range(2)}
        for areq in got["allocation_requests"]:  # 1.10: a list per candidate
            assert {a["resource_provider"]["uuid"] for a in areq["allocations"]} - {pool} <= c1
        r = await root.get("/allocation_candidates?resources=VCPU:2,DISK_GB:100&limit=1",
                           headers=H)
        pick = r.json()["allocation_requests"][0]
        assert set(pick["allocations"]) - {pool} <= c1
        assert pool in pick["mappings"][""]
        assert set(r.json()["provider_summaries"]) >= set(pick["allocations"])
        c = str(uuid.uuid4())
        r = await root.put(f"/allocations/{c}", headers=H, json={
            "allocations": pick["allocations"], "project_id": "p", "user_id": "u",
            "consumer_generation": None, "consumer_type": "INSTANCE"})
        assert r.status_code == 204, r.text
        assert used(tree, "global") == 100 and used(tree, "c1") == 2
        # More than the pool holds: no candidate at all.
        r = await root.get("/allocation_candidates?resources=VCPU:1,DISK_GB:950", headers=H)
        assert r.json()["allocation_requests"] == []
        check(tree)
    run(tmp_path, scenario)


def test_a_write_reaches_a_grandchilds_host_next_to_the_roots_pool(tmp_path: Path) -> None:
    """Three levels: the root's pool and a host two zones down. The root knows
    only which child has the host; that child claims it where it is, and
    says the path, which the confirm follows. A cancel finds it there too."""
    from strato.zone.inprocess import ZoneSpec, build
    from tests.zone.test_shared_pool import AGG, provider

    async def make3(tmp: Path) -> tuple[InProcessTree, str]:
        tree = build(tmp, [ZoneSpec("global"), ZoneSpec("mid", parent="global"),
                           ZoneSpec("leaf", parent="mid")])
        await tree.link()
        pool = await provider(tree.client("global"), "disk-pool",
                              {"DISK_GB": {"total": 1000}},
                              traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
        await provider(tree.client("leaf"), "leaf-h0", {"VCPU": {"total": 8}}, aggs=[AGG])
        await tree.apps["mid"].state.tree.refresh(fresh=True)
        await tree.apps["global"].state.tree.refresh(fresh=True)
        return tree, pool

    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        r = await root.get("/allocation_candidates?resources=VCPU:2,DISK_GB:100", headers=H)
        assert len(r.json()["allocation_requests"]) == 1, r.text
        pick = r.json()["allocation_requests"][0]
        h = await host(tree, "leaf-h0")
        assert set(pick["allocations"]) == {h, pool}
        c = str(uuid.uuid4())
        r = await root.put(f"/allocations/{c}", headers=H, json={
            "allocations": pick["allocations"], "project_id": "p", "user_id": "u",
            "consumer_generation": None, "consumer_type": "INSTANCE"})
        assert r.status_code == 204, r.text
        assert used(tree, "global") == 100 and used(tree, "leaf") == 2
        assert used(tree, "mid") == 0
        assert pending(tree, "leaf") == [] and pending(tree, "global") == []
        # A refusal two levels down undoes the root's part.
        r = await write(root, uuid.uuid4(), {h: {"VCPU": 7}, pool: {"DISK_GB": 10}})
        assert r.status_code == 409, r.text
        assert used(tree, "global") == 100 and used(tree, "leaf") == 2
        # Its answer lost at the leaf: nothing stays once the leaf answers again.
        tree.lose_answers("leaf", "/strato/v1/claims")
        lost = str(uuid.uuid4())
        r = await write(root, lost, {h: {"VCPU": 1}, pool: {"DISK_GB": 10}})
        assert r.status_code == 503, r.text
        tree.revive("leaf")
        await tree.zone_tree("global").reconcile()
        await tree.zone_tree("mid").reconcile()
        assert used(tree, "global") == 100 and used(tree, "leaf") == 2
        assert own_allocations(tree, "leaf", lost) == {}
        r = await root.delete(f"/allocations/{c}", headers=H)
        assert r.status_code == 204, r.text
        assert used(tree, "global") == 0 and used(tree, "leaf") == 0
        check(tree)
    run(tmp_path, scenario, make3)


def test_a_consumer_across_zones_is_released_whole_and_never_written_twice(
        tmp_path: Path) -> None:
    """Nova deletes an instance with an empty PUT (its generation as the root
    shows it): both parts go. An existing consumer is not written across
    zones again (409), and a POST that empties one is a clear 400."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = await host(tree, "c1-h0")
        c = str(uuid.uuid4())
        r = await write(root, c, {h: {"VCPU": 2}, pool: {"DISK_GB": 100}})
        assert r.status_code == 204, r.text
        # Written again as new: refused, here and through the index alike.
        r = await write(root, c, {await host(tree, "c1-h1"): {"VCPU": 1},
                                       pool: {"DISK_GB": 1}})
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        r = await root.post("/allocations", headers=H, json={
            c: {"allocations": {}, "project_id": "p", "user_id": "u",
                "consumer_generation": 1, "consumer_type": "INSTANCE"},
            str(uuid.uuid4()): claim({pool: {"DISK_GB": 1}})})
        assert r.status_code == 400 and "span" in r.text, r.text
        got = (await root.get(f"/allocations/{c}", headers=H)).json()
        # A stale generation: 409, nothing released anywhere.
        r = await root.put(f"/allocations/{c}", headers=H,
                           json=emptied(got["consumer_generation"] + 5))
        assert r.status_code == 409, r.text
        assert used(tree, "global") == 100 and used(tree, "c1") == 2
        r = await root.put(f"/allocations/{c}", headers=H, json=emptied(got["consumer_generation"]))
        assert r.status_code == 204, r.text
        assert used(tree, "global") == 0 and used(tree, "c1") == 0
        check(tree)
    run(tmp_path, scenario)


def test_pool_candidates_honour_forbidden_traits_and_survive_a_lying_cell(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        base = "/allocation_candidates?resources=VCPU:1,DISK_GB:10"
        r = await root.get(base + "&required=!MISC_SHARES_VIA_AGGREGATE", headers=H)
        assert r.status_code == 200 and r.json()["allocation_requests"] == [], r.text
        r = await root.get(base + "&required=!HW_CPU_X86_AVX2", headers=H)
        assert len(r.json()["allocation_requests"]) == 2, r.text
        # c1 answers candidates that are not candidates: left out, never a 500.
        real = tree.apps["c1"]

        async def liar(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == "/allocation_candidates":
                body = b'{"allocation_requests": [{"allocations": {"x": 5}}], ' \
                       b'"provider_summaries": {}}'
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
            await real(scope, receive, send)
        tree.transport.register(tree.url("c1"), liar)
        r = await root.get(base, headers=H)
        assert r.status_code == 200, r.text
        assert r.json()["allocation_requests"] == []
        assert "c1" in r.headers["x-strato-incomplete"]
    run(tmp_path, scenario)


def test_a_consumer_across_zones_counts_once_in_the_roots_usages(tmp_path: Path) -> None:
    """A disk on the root's pool and a host in c1, made by a write across zones
    or by a schedule call the root splits: one consumer in /usages at the root
    (Nova's unified limits count instances with it), the amounts of both."""
    from tests.zone.test_shared_pool import body
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        h = await host(tree, "c1-h0")
        r = await write(root, uuid.uuid4(), {h: {"VCPU": 1}, pool: {"DISK_GB": 10}})
        assert r.status_code == 204, r.text
        r = await root.post("/strato/v1/schedule", json=body(2, disk=20))
        assert r.status_code == 200, r.text
        assert {p["zone"] for p in r.json()["placements"]} == {"global/c1"}, r.json()
        # (one local-only consumer at the root: its own pool only)
        r = await root.put(f"/allocations/{uuid.uuid4()}", headers=H, json=claim(
            {pool: {"DISK_GB": 1}}))
        assert r.status_code == 204, r.text
        usages = (await root.get("/usages?project_id=p", headers=H)).json()["usages"]
        assert usages["INSTANCE"] == {"VCPU": 1, "DISK_GB": 11, "consumer_count": 2}
        assert usages["unknown"]["consumer_count"] == 2
        assert usages["unknown"]["DISK_GB"] == 40
        # Each zone by itself counts its own part.
        c1 = (await tree.client("c1").get("/usages?project_id=p", headers=H)).json()
        assert c1["usages"]["INSTANCE"]["consumer_count"] == 1
        assert c1["usages"]["unknown"]["consumer_count"] == 2
    run(tmp_path, scenario)
