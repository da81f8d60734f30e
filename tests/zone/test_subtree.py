"""The Placement API at a zone with children answers for consumers below it
(zone/subtree.py): GET and DELETE /allocations/{consumer} and GET /usages at
the root, for consumers placed through it into a cell."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx

from strato.zone.inprocess import InProcessTree, ZoneSpec
from tests.zone.helpers import record_calls
from tests.zone.test_split import make, req, used, zt

V = "openstack-api-version"


def run(tmp: Path, scenario: Any) -> None:
    async def main() -> None:
        tree = await make(tmp)
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


async def place(tree: InProcessTree, n: int = 1, vcpu: int = 2, **kw: Any) -> dict[str, Any]:
    r = await tree.client("global").post("/strato/v1/schedule", json=req(n, vcpu=vcpu, **kw))
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_consumer_placed_through_the_root_is_seen_and_released_there(tmp_path: Path
                                                                       ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree)
        p = answer["placements"][0]
        c = p["consumer_uuid"]
        r = await root.get(f"/allocations/{c}", headers={V: "placement 1.38"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert list(body["allocations"]) == [p["provider"]]
        assert body["allocations"][p["provider"]]["resources"] == {"VCPU": 2,
                                                                  "MEMORY_MB": 1024}
        assert body["project_id"] == "p" and body["consumer_generation"] == 1
        assert body["consumer_type"] == "unknown"  # what the schedule call said
        # An old microversion gets the old shape.
        r = await root.get(f"/allocations/{c}", headers={V: "placement 1.0"})
        assert set(r.json()) == {"allocations"}
        # Usages at the root count what is below it.
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.json() == {"usages": {"VCPU": 2, "MEMORY_MB": 1024}}
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.38"})
        assert r.json()["usages"]["unknown"]["consumer_count"] == 1
        # Released at the root: gone from its cell.
        r = await root.delete(f"/allocations/{c}")
        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 0
        assert (await root.get(f"/allocations/{c}")).json() == {"allocations": {}}
        r = await root.delete(f"/allocations/{c}")
        assert r.status_code == 404, r.text
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.json() == {"usages": {}}
    run(tmp_path, scenario)


def test_a_cell_that_does_not_answer_makes_reads_fail_clearly_not_wrong(tmp_path: Path
                                                                       ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree)
        where = answer["placements"][0]["zone"].split("/")[1]
        other = "ord" if where == "dfw" else "dfw"
        c = answer["placements"][0]["consumer_uuid"]
        tree.kill(other)
        # Found in the cell that answers: fine.
        r = await root.get(f"/allocations/{c}")
        assert r.status_code == 200 and r.json()["allocations"], r.text
        # Not found, and a cell could not say: 503 naming it, not an empty answer.
        r = await root.get(f"/allocations/{uuid.uuid4()}")
        assert r.status_code == 503, r.text
        assert other in r.text and r.headers.get("retry-after")
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.status_code == 503 and other in r.text
        r = await root.delete(f"/allocations/{uuid.uuid4()}")
        assert r.status_code == 503, r.text
        tree.revive(other)
        await asyncio.sleep(0.3)  # a failed child is probed again after backoff
        for _ in range(40):
            r = await root.get(f"/allocations/{uuid.uuid4()}")
            if r.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200 and r.json() == {"allocations": {}}
    run(tmp_path, scenario)


def test_a_divided_gang_is_released_consumer_by_consumer_at_the_root(tmp_path: Path
                                                                    ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree, 6, vcpu=8, atomic=True)
        assert {p["zone"] for p in answer["placements"]} == {"global/dfw", "global/ord"}
        for p in answer["placements"]:
            r = await root.delete(f"/allocations/{p['consumer_uuid']}")
            assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 0
    run(tmp_path, scenario)


def test_the_roots_metrics_show_its_children(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        await place(tree, 6, vcpu=8)
        text = (await root.get("/metrics")).text
        assert 'strato_child_healthy{child="dfw"} 1.0' in text
        assert 'strato_child_healthy{child="ord"} 1.0' in text
        assert 'strato_schedule_attempts_total{result="placed"} 1.0' in text
        assert 'strato_placements_total 6.0' in text
        tree.kill("ord")
        await root.get(f"/allocations/{uuid.uuid4()}")  # asks ord: a failure
        text = (await root.get("/metrics")).text
        assert 'strato_child_healthy{child="ord"} 0.0' in text
    run(tmp_path, scenario)


def test_providers_below_are_listed_and_read_at_the_root(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        r = await root.get("/resource_providers", headers={V: "placement 1.14"})
        assert r.status_code == 200, r.text
        listed = {p["name"]: p for p in r.json()["resource_providers"]}
        assert {"dfw-h0", "dfw-h1", "ord-h0", "ord-h1"} <= set(listed)
        assert "x-strato-incomplete" not in r.headers
        assert "parent_provider_uuid" in listed["dfw-h0"]
        # The client's microversion and filters reach the children.
        r = await root.get("/resource_providers", headers={V: "placement 1.0"})
        assert all("parent_provider_uuid" not in p for p in r.json()["resource_providers"])
        r = await root.get("/resource_providers?name=ord-h1")
        assert [p["name"] for p in r.json()["resource_providers"]] == ["ord-h1"]
        h = listed["dfw-h1"]["uuid"]
        r = await root.get(f"/resource_providers?in_tree={h}")
        assert [p["name"] for p in r.json()["resource_providers"]] == ["dfw-h1"]
        # One provider below, and what it has.
        r = await root.get(f"/resource_providers/{h}", headers={V: "placement 1.14"})
        assert r.status_code == 200 and r.json()["name"] == "dfw-h1", r.text
        r = await root.get(f"/resource_providers/{h}/inventories")
        assert "VCPU" in r.json()["inventories"], r.text
        r = await root.get(f"/resource_providers/{h}/inventories/VCPU")
        assert r.status_code == 200 and r.json()["total"] > 0
        for sub in ("traits", "aggregates", "usages", "allocations"):
            r = await root.get(f"/resource_providers/{h}/{sub}", headers={V: "placement 1.6"})
            assert r.status_code == 200, (sub, r.text)
        assert (await root.get(f"/resource_providers/{uuid.uuid4()}")).status_code == 404
        # Known from the listing: read even while the other cell is down.
        tree.kill("ord")
        r = await root.get(f"/resource_providers/{h}")
        assert r.status_code == 200 and r.json()["name"] == "dfw-h1"
        # The listing says it is partial; an unknown provider is a 503, not a 404.
        r = await root.get("/resource_providers")
        assert r.status_code == 200 and r.headers["x-strato-incomplete"] == "ord"
        assert {p["name"] for p in r.json()["resource_providers"]} >= {"dfw-h0"}
        r = await root.get(f"/resource_providers/{uuid.uuid4()}")
        assert r.status_code == 503 and "ord" in r.text, r.text
    run(tmp_path, scenario)


def test_writes_to_providers_below_go_to_their_zone(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        cell = tree.client("dfw")
        r = await root.get("/resource_providers?name=dfw-h1")
        h = r.json()["resource_providers"][0]
        gen = h["generation"]
        r = await root.put(f"/resource_providers/{h['uuid']}/traits",
                           json={"traits": ["HW_CPU_X86_AVX2"],
                                 "resource_provider_generation": gen})
        assert r.status_code == 200, r.text
        r = await cell.get(f"/resource_providers/{h['uuid']}/traits")
        assert "HW_CPU_X86_AVX2" in r.json()["traits"]
        # A stale generation is the owner's 409, as Placement's.
        r = await root.put(f"/resource_providers/{h['uuid']}/traits",
                           json={"traits": [], "resource_provider_generation": gen})
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        # A provider the root owns keeps its own answers, a child down or not.
        r = await root.post("/resource_providers", json={"name": "root-pool"})
        mine = r.json()["uuid"]
        tree.kill("ord")
        r = await root.delete(f"/resource_providers/{mine}/inventories/VCPU")
        assert r.status_code == 404, r.text
        # Deleted below, through the root (the owner is known: ord being down
        # does not matter).
        r = await root.delete(f"/resource_providers/{h['uuid']}")
        assert r.status_code == 204, r.text
        r = await cell.get(f"/resource_providers/{h['uuid']}")
        assert r.status_code == 404
        # Somewhere below, maybe in the cell that is down: 503, nothing done.
        r = await root.put(f"/resource_providers/{uuid.uuid4()}/traits",
                           json={"traits": [], "resource_provider_generation": 0})
        assert r.status_code == 503 and "ord" in r.text, r.text
        tree.revive("ord")
        for _ in range(60):  # a failed child is probed again after its backoff
            r = await root.get("/resource_providers?name=ord-h0")
            if r.json()["resource_providers"]:
                break
            await asyncio.sleep(0.1)
        o = r.json()["resource_providers"][0]
        tree.kill("ord")
        r = await root.put(f"/resource_providers/{o['uuid']}/traits",
                           json={"traits": [], "resource_provider_generation": o["generation"]})
        assert r.status_code == 503 and "nothing was changed" in r.text, r.text
    run(tmp_path, scenario)


def test_custom_traits_and_classes_made_at_the_root_are_known_below(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        r = await root.put("/traits/CUSTOM_RACKED")
        assert r.status_code == 201 and "x-strato-incomplete" not in r.headers, r.text
        r = await root.post("/resource_classes", json={"name": "CUSTOM_FPGA"},
                            headers={V: "placement 1.2"})
        assert r.status_code == 201, r.text
        for cell in ("dfw", "ord"):
            c = tree.client(cell)
            assert (await c.get("/traits/CUSTOM_RACKED")).status_code == 204
            assert (await c.get("/resource_classes/CUSTOM_FPGA",
                                headers={V: "placement 1.2"})).status_code == 200
        # So a provider below can be given it through the root.
        r = await root.get("/resource_providers?name=ord-h0")
        h = r.json()["resource_providers"][0]
        r = await root.put(f"/resource_providers/{h['uuid']}/traits", json={
            "traits": ["CUSTOM_RACKED"], "resource_provider_generation": h["generation"]})
        assert r.status_code == 200, r.text
        # A cell that could not be told is named; the call may be repeated.
        tree.kill("ord")
        r = await root.put("/traits/CUSTOM_LATE")
        assert r.status_code == 201 and r.headers["x-strato-incomplete"] == "ord"
        assert (await tree.client("dfw").get("/traits/CUSTOM_LATE")).status_code == 204
    run(tmp_path, scenario)


def test_allocation_candidates_at_the_root_cover_the_cells(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        await place(tree, vcpu=6)  # one host in one cell is busier
        for v in ("1.12", "1.29", "1.39", "1.10"):
            r = await root.get("/allocation_candidates?resources=VCPU:2,MEMORY_MB:512",
                               headers={V: f"placement {v}"})
            assert r.status_code == 200, (v, r.text)
            body = r.json()
            assert len(body["allocation_requests"]) == 8, v  # four hosts a cell
            for areq in body["allocation_requests"]:
                shares = areq["allocations"]
                provs = list(shares) if isinstance(shares, dict) else [
                    s["resource_provider"]["uuid"] for s in shares]
                assert all(p in body["provider_summaries"] for p in provs)
        # limit: the best across the cells (spread: the emptiest first).
        r = await root.get("/allocation_candidates?resources=VCPU:2&limit=3",
                           headers={V: "placement 1.39"})
        body = r.json()
        assert len(body["allocation_requests"]) == 3
        for areq in body["allocation_requests"]:
            (p,) = areq["allocations"]
            res = body["provider_summaries"][p]["resources"]["VCPU"]
            assert res["used"] == 0
        tree.kill("ord")
        r = await root.get("/allocation_candidates?resources=VCPU:2")
        assert r.status_code == 200 and r.headers["x-strato-incomplete"] == "ord"
        assert len(r.json()["allocation_requests"]) == 4
    run(tmp_path, scenario)


def test_nova_claims_through_the_root(tmp_path: Path) -> None:
    """Nova's scheduler against the root: candidates, then PUT /allocations for
    the one it picked (consumer generations as Placement's), then the release."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h136 = {V: "placement 1.36"}
        r = await root.get("/allocation_candidates?resources=VCPU:2,MEMORY_MB:512&limit=5",
                           headers=h136)
        pick = r.json()["allocation_requests"][0]
        c = str(uuid.uuid4())
        claim = {**pick, "project_id": "p", "user_id": "u", "consumer_generation": None}
        r = await root.put(f"/allocations/{c}", json=claim, headers=h136)
        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 2
        r = await root.get(f"/allocations/{c}", headers=h136)
        assert r.json()["allocations"] == {
            p: {"resources": s["resources"], "generation": r.json()["allocations"][p][
                "generation"]} for p, s in pick["allocations"].items()}
        gen = r.json()["consumer_generation"]
        # A stale generation is the cell's 409, as Placement's.
        r = await root.put(f"/allocations/{c}", json={**claim, "consumer_generation": None},
                           headers=h136)
        assert r.status_code == 409, r.text
        # Released through the root with an empty PUT.
        r = await root.put(f"/allocations/{c}", headers=h136, json={
            "allocations": {}, "project_id": "p", "user_id": "u",
            "consumer_generation": gen})
        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 0
        # One consumer on providers of two cells: a clear 400, nothing written
        # (a write across this zone and one cell is made: tests/zone/test_writes.py).
        both = {}
        for cell in ("dfw", "ord"):
            r = await root.get(f"/resource_providers?name={cell}-h0")
            both[r.json()["resource_providers"][0]["uuid"]] = {"resources": {"VCPU": 1}}
        r = await root.put(f"/allocations/{uuid.uuid4()}", headers=h136, json={
            "allocations": both, "project_id": "p", "user_id": "u",
            "consumer_generation": None})
        assert r.status_code == 400 and "not two" in r.text, r.text
        # POST /allocations for consumers of one cell.
        r = await root.get("/resource_providers?name=ord-h1")
        o = r.json()["resource_providers"][0]["uuid"]
        c1, c2 = str(uuid.uuid4()), str(uuid.uuid4())
        r = await root.post("/allocations", headers=h136, json={
            c: {"allocations": {o: {"resources": {"VCPU": 1}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": None} for c in (c1, c2)})
        assert r.status_code == 204, r.text
        assert await used(tree, "ord") == 2
    run(tmp_path, scenario)


def test_the_root_asks_only_the_cell_that_holds_a_consumer(tmp_path: Path) -> None:
    """The consumer index: a consumer placed through the root is looked up in
    its cell alone; one the root never saw is looked for everywhere, once."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        c = (await place(tree))["placements"][0]["consumer_uuid"]
        calls = record_calls(tree, lambda _, path: path.startswith("/allocations/"))
        assert (await root.get(f"/allocations/{c}")).json()["allocations"]
        assert len(calls) == 1
        zt(tree, "global").consumer_zones.forget(c)  # as after a restart
        calls.clear()
        assert (await root.get(f"/allocations/{c}")).json()["allocations"]
        assert len(calls) == 2
        calls.clear()
        assert (await root.delete(f"/allocations/{c}")).status_code == 204
        assert len(calls) == 2  # the lookup (learnt: one call), then the delete
    run(tmp_path, scenario)


def test_the_roots_policy_holds_before_a_write_is_sent_below(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        r = await root.get("/resource_providers?name=dfw-h0")
        h = r.json()["resource_providers"][0]["uuid"]
        member = {"x-auth-token": "user", "x-roles": "member", "x-project-id": "p",
                  "x-user-id": "u", V: "placement 1.36"}
        r = await root.put(f"/allocations/{uuid.uuid4()}", headers=member, json={
            "allocations": {h: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None})
        assert r.status_code == 403, r.text
        assert await used(tree, "dfw") == 0
    run(tmp_path, scenario)


def test_candidates_ask_only_the_cells_that_can_rank(tmp_path: Path) -> None:
    """With a limit, cells are asked best bound first (from their summaries)
    until none left could beat the limit-th candidate: here the first cell's
    empty hosts already score what any cell could."""
    async def scenario(tree: InProcessTree) -> None:
        import strato.zone.subtree as st
        root = tree.client("global")
        calls: list[str] = []
        real = tree.transport.call

        async def counted(url: str, method: str, path: str, **kw: Any) -> Any:
            if path.startswith("/allocation_candidates"):
                calls.append(url)
            return await real(url, method, path, **kw)
        tree.transport.call = counted  # type: ignore[method-assign]
        assert st.FIRST_WAVE == 1
        r = await root.get("/allocation_candidates?resources=VCPU:2&limit=3")
        assert len(r.json()["allocation_requests"]) == 3
        assert len(calls) == 1
        calls.clear()
        # More than the first cell holds: the next is asked too.
        r = await root.get("/allocation_candidates?resources=VCPU:2&limit=6")
        assert len(r.json()["allocation_requests"]) == 6 and len(calls) == 2
        calls.clear()
        # Without a limit every cell is asked (all candidates are wanted).
        r = await root.get("/allocation_candidates?resources=VCPU:2")
        assert len(r.json()["allocation_requests"]) == 8 and len(calls) == 2
    run(tmp_path, scenario)


async def _uuid_of(root: Any, name: str) -> str:
    r = await root.get(f"/resource_providers?name={name}")
    return str(r.json()["resource_providers"][0]["uuid"])


def test_a_consumer_is_never_given_allocations_in_two_cells(tmp_path: Path) -> None:
    """Each cell checks consumer generations against its own consumers only:
    the root refuses a write that would give a consumer of one cell
    allocations in another (409 for a new one, 400 for a move), also when two
    such writes come at once."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h136 = {V: "placement 1.36"}
        d, o = await _uuid_of(root, "dfw-h0"), await _uuid_of(root, "ord-h0")

        def put(c: str, rp: str, gen: int | None) -> Any:
            return _put_vcpu(root, c, rp, gen)
        c = str(uuid.uuid4())
        assert (await put(c, d, None)).status_code == 204
        zt(tree, "global").consumer_zones.forget(c)  # as after a restart
        r = await put(c, o, None)
        assert r.status_code == 409 and "zone dfw" in r.text, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        r = await put(c, o, 1)
        assert r.status_code == 400 and "changed where it is" in r.text, r.text
        r = await root.post("/allocations", headers=h136, json={c: {
            "allocations": {o: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None}})
        assert r.status_code == 409, r.text
        assert await used(tree, "ord") == 0 and await used(tree, "dfw") == 1
        # Changed where it is: fine.
        assert (await put(c, d, 1)).status_code == 204
        # Two writes of one new consumer into two cells at once: one is made.
        for _ in range(3):
            c = str(uuid.uuid4())
            got = await asyncio.gather(put(c, d, None), put(c, o, None))
            assert sorted(r.status_code for r in got) == [204, 409], [r.text for r in got]
        assert await used(tree, "dfw") + await used(tree, "ord") == 1 + 3
    run(tmp_path, scenario)


def test_a_post_changing_existing_consumers_of_two_cells_says_why_it_is_refused(
        tmp_path: Path) -> None:
    """POST /allocations at the root that changes a consumer of dfw on dfw and
    one of ord on ord (each where it is) cannot be made all or nothing across
    the cells: the 400 names every such consumer and its cell and says to
    send one POST per zone (it said to remove the allocations to place the
    consumer elsewhere, which the write did not ask). Nothing is changed; a
    stale generation among them is still Placement's 409 first."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h = {V: "placement 1.28"}
        d, o = await _uuid_of(root, "dfw-h0"), await _uuid_of(root, "ord-h0")
        a, b, new = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
        assert (await _put_vcpu(root, a, d, None)).status_code == 204
        assert (await _put_vcpu(root, b, o, None)).status_code == 204

        def change(rp: str, gen: int | None) -> dict[str, Any]:
            return {"allocations": {rp: {"resources": {"VCPU": 2}}}, "project_id": "p",
                    "user_id": "u", "consumer_generation": gen}
        r = await root.post("/allocations", headers=h,
                            json={a: change(d, 1), b: change(o, 1)})
        assert r.status_code == 400, r.text
        detail = r.json()["errors"][0]["detail"]
        assert f"{a} in zone dfw" in detail and f"{b} in zone ord" in detail, detail
        assert "one POST /allocations per zone" in detail, detail
        assert "elsewhere" not in detail and "moved" not in detail, detail
        # An existing consumer beside a new one in the other cell: the same.
        r = await root.post("/allocations", headers=h,
                            json={a: change(d, 1), new: change(o, None)})
        assert r.status_code == 400 and f"{a} in zone dfw" in r.text, r.text
        assert "one POST /allocations per zone" in r.text, r.text
        # A stale generation is a 409 before any 400, as Placement checks it.
        r = await root.post("/allocations", headers=h,
                            json={a: change(d, 1), b: change(o, 7)})
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        assert "consumer generation conflict" in r.text
        # One that would move to the other cell is named as a move.
        r = await root.post("/allocations", headers=h,
                            json={a: change(o, 1), new: change(d, None)})
        assert r.status_code == 400, r.text
        assert "has its allocations in zone dfw; this write gives it allocations in " \
            "zone ord" in r.text, r.text
        assert await used(tree, "dfw") == 1 and await used(tree, "ord") == 1
        # One POST per cell works.
        for c, rp in ((a, d), (b, o)):
            r = await root.post("/allocations", headers=h, json={c: change(rp, 1)})
            assert r.status_code == 204, r.text
        assert await used(tree, "dfw") == 2 and await used(tree, "ord") == 2
    run(tmp_path, scenario)


def test_a_consumer_of_a_cell_is_not_given_allocations_at_the_root_too(tmp_path: Path
                                                                       ) -> None:
    """A write naming only the root's own providers, for a consumer that has
    allocations in a cell: refused as a write into another cell is (409 for a
    new consumer, 400 for a move), also when it comes at once with the write
    into the cell; the consumer is never in two zones."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h136 = {V: "placement 1.36"}
        d = await _uuid_of(root, "dfw-h0")
        r = await root.post("/resource_providers", headers=h136, json={"name": "root-pool"})
        pool = r.json()["uuid"]
        r = await root.put(f"/resource_providers/{pool}/inventories", json={
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100}}})
        assert r.status_code == 200, r.text

        def put(c: str, rp: str, gen: int | None) -> Any:
            return _put_vcpu(root, c, rp, gen)
        c = str(uuid.uuid4())
        assert (await put(c, d, None)).status_code == 204
        r = await put(c, pool, None)
        assert r.status_code == 409 and "zone dfw" in r.text, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        r = await put(c, pool, 1)
        assert r.status_code == 400 and "changed where it is" in r.text, r.text
        assert await used(tree, "dfw") == 1
        r = await root.get(f"/resource_providers/{pool}/usages")
        assert r.json()["usages"]["VCPU"] == 0
        # A consumer of the root is still changed there.
        mine = str(uuid.uuid4())
        assert (await put(mine, pool, None)).status_code == 204
        assert (await put(mine, pool, 1)).status_code == 204
        for _ in range(3):
            c = str(uuid.uuid4())
            got = await asyncio.gather(put(c, d, None), put(c, pool, None))
            assert sorted(r.status_code for r in got) == [204, 409], [r.text for r in got]
    run(tmp_path, scenario)


async def _root_pool(root: Any) -> str:
    r = await root.post("/resource_providers", headers={V: "placement 1.36"},
                        json={"name": "root-pool"})
    pool = str(r.json()["uuid"])
    r = await root.put(f"/resource_providers/{pool}/inventories", json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100}}})
    assert r.status_code == 200, r.text
    return pool


def _vcpus(rps: list[str], gen: Any = "absent") -> dict[str, Any]:
    body: dict[str, Any] = {"allocations": {rp: {"resources": {"VCPU": 1}} for rp in rps},
                            "project_id": "p", "user_id": "u"}
    if gen != "absent":
        body["consumer_generation"] = gen
    return body


def test_a_stale_consumer_generation_at_the_root_is_placements_409_wherever_it_is(
        tmp_path: Path) -> None:
    """From 1.28 Placement checks the consumer generation before anything
    else: a stale one is a 409 concurrent_update, whichever providers the
    write names. At the root, for a consumer held in another zone than the
    write's (or one found nowhere, in a write across zones), that is the
    answer too, not the 400 for a move that the right generation gets.
    Below 1.28 there is no generation to check: a move is the 400."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        d, o = await _uuid_of(root, "dfw-h0"), await _uuid_of(root, "ord-h0")
        pool = await _root_pool(root)
        c = str(uuid.uuid4())
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([d], None))
        assert r.status_code == 204, r.text
        # Worded as Placement words it (and as a cell's own route does).
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([o], None))
        assert r.status_code == 409 and "expected 1 but got None" in r.text, r.text
        for rps in ([o], [pool], [pool, o], [pool, d]):
            for version in ("1.28", "1.36"):
                r = await root.put(f"/allocations/{c}", headers={V: f"placement {version}"},
                                   json=_vcpus(rps, 7))
                assert r.status_code == 409, (rps, r.text)
                err = r.json()["errors"][0]
                assert err["code"] == "placement.concurrent_update"
                assert "expected 1 but got 7" in err["detail"], err
                r = await root.post("/allocations", headers={V: f"placement {version}"},
                                    json={c: _vcpus(rps, 7)})
                assert r.status_code == 409, (rps, r.text)
            # The right generation: a move, which the root does not make.
            r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                               json=_vcpus(rps, 1))
            assert r.status_code == 400 or rps == [pool, d], r.text
            r = await root.put(f"/allocations/{c}", headers={V: "placement 1.27"},
                               json=_vcpus(rps))
            assert r.status_code == 400, r.text
        # A consumer of the root's pool, written into a cell with a stale one.
        mine = str(uuid.uuid4())
        r = await root.put(f"/allocations/{mine}", headers={V: "placement 1.28"},
                           json=_vcpus([pool], None))
        assert r.status_code == 204, r.text
        r = await root.put(f"/allocations/{mine}", headers={V: "placement 1.28"},
                           json=_vcpus([d], 5))
        assert r.status_code == 409 and "expected 1 but got 5" in r.text, r.text
        # A consumer found nowhere, written across zones with a generation.
        new = str(uuid.uuid4())
        r = await root.put(f"/allocations/{new}", headers={V: "placement 1.28"},
                           json=_vcpus([pool, d], 3))
        assert r.status_code == 409 and "expected null but got 3" in r.text, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        assert await used(tree, "dfw") == 1 and await used(tree, "ord") == 0
        r = await root.get(f"/resource_providers/{pool}/usages")
        assert r.json()["usages"]["VCPU"] == 1
    run(tmp_path, scenario)


def test_a_consumer_on_the_roots_pool_and_a_cell_is_not_rewritten_at_the_root_alone(
        tmp_path: Path) -> None:
    """A consumer written across zones (the root's pool and a cell's host),
    written again naming only the root's pool: Placement would replace all of
    its allocations; the root's own route would replace only its part and
    leave the cell's behind (a 204 with the consumer still on the host). A
    400, nothing changed (a stale generation is still the 409)."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        d = await _uuid_of(root, "dfw-h0")
        pool = await _root_pool(root)
        c = str(uuid.uuid4())
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([pool, d], None))
        assert r.status_code == 204, r.text
        for version, gen in (("1.27", "absent"), ("1.28", 1)):
            r = await root.put(f"/allocations/{c}", headers={V: f"placement {version}"},
                               json=_vcpus([pool], gen))
            assert r.status_code == 400 and "zone dfw" in r.text, r.text
            r = await root.post("/allocations", headers={V: f"placement {version}"},
                                json={c: _vcpus([pool], gen)})
            assert r.status_code == 400 and "zone dfw" in r.text, r.text
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([pool], 4))
        assert r.status_code == 409 and "expected 1 but got 4" in r.text, r.text
        r = await root.get(f"/allocations/{c}")
        assert set(r.json()["allocations"]) == {pool, d}
        assert await used(tree, "dfw") == 1
        # Released (both parts), it is a new consumer of the pool alone.
        assert (await root.delete(f"/allocations/{c}")).status_code == 204
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([pool], None))
        assert r.status_code == 204, r.text
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([pool], 1))
        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") == 0
    run(tmp_path, scenario)


def test_a_cells_error_passed_on_by_the_root_carries_the_roots_request_id(
        tmp_path: Path) -> None:
    """Placement's error body names the request id its answer's
    x-openstack-request-id header carries: a cell's refusal the root passes
    on names the root's (the one the client sees), not the cell's own."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        d = await _uuid_of(root, "dfw-h0")
        h = {V: "placement 1.28"}
        answers = [
            await root.put(f"/resource_providers/{d}/traits", headers=h,
                           json={"resource_provider_generation": 99, "traits": []}),
            await root.post(f"/resource_providers/{d}/inventories", headers=h,
                            json={"resource_class": "CUSTOM_NOPE", "total": 3}),
            await root.put(f"/allocations/{uuid.uuid4()}", headers=h,
                           json=_vcpus([d], 4)),
        ]
        for r in answers:
            assert r.status_code in (400, 409), r.text
            rid = r.headers["x-openstack-request-id"]
            assert [e["request_id"] for e in r.json()["errors"]] == [rid], r.text
    run(tmp_path, scenario)


def test_an_error_at_the_root_is_the_page_accept_asks_for_as_from_a_cell(
        tmp_path: Path) -> None:
    """Placement (webob) answers an error as an HTML or plain-text page when
    the request's Accept prefers one: so does a cell, and so does the root
    for a cell's refusal it passes on and for its own (it sent JSON)."""
    async def scenario(tree: InProcessTree) -> None:
        root, dfw = tree.client("global"), tree.client("dfw")
        d, o = await _uuid_of(root, "dfw-h0"), await _uuid_of(root, "ord-h0")
        c = str(uuid.uuid4())
        r = await root.put(f"/allocations/{c}", headers={V: "placement 1.28"},
                           json=_vcpus([d], None))
        assert r.status_code == 204, r.text
        for accept, media in (("text/html", "text/html"), ("text/plain", "text/plain")):
            h = {V: "placement 1.28", "accept": accept}
            stale = {"resource_provider_generation": 99, "traits": []}
            mine = await dfw.put(f"/resource_providers/{d}/traits", headers=h, json=stale)
            got = await root.put(f"/resource_providers/{d}/traits", headers=h, json=stale)
            assert got.status_code == mine.status_code == 409
            assert got.headers["content-type"].startswith(media), got.text
            assert got.text == mine.text
            own = await root.put(f"/allocations/{c}", headers=h, json=_vcpus([o], 1))
            assert own.status_code == 400, own.text
            assert own.headers["content-type"].startswith(media), own.text
            assert "changed where it is" in own.text
    run(tmp_path, scenario)


def test_bad_allocation_bodies_at_the_root_get_the_routes_answer(tmp_path: Path) -> None:
    """A write for providers below is read as the root's own route reads it
    (415, 400) before anything is sent below: never a 500, nothing written."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        d = await _uuid_of(root, "dfw-h0")
        c = str(uuid.uuid4())
        ok = ('{"allocations": {"%s": {"resources": {"VCPU": %s}}}, "project_id": "p", '
              '"user_id": "u", "consumer_generation": null}')
        json_h = {V: "placement 1.36", "content-type": "application/json"}
        for ctype in ("text/plain", "application/xml"):
            r = await root.put(f"/allocations/{c}", content=ok % (d, "1"),
                               headers={**json_h, "content-type": ctype})
            assert r.status_code == 415, r.text
            one = ok % (d, "1")
            r = await root.post("/allocations", content=f'{{"{c}": {one}}}',
                                headers={**json_h, "content-type": ctype})
            assert r.status_code == 415, r.text
        for amount in ("Infinity", "NaN", str(2**64), "1e400"):
            r = await root.put(f"/allocations/{c}", content=ok % (d, amount), headers=json_h)
            assert r.status_code == 400, (amount, r.text)
        r = await root.put(f"/allocations/{c}", content="[" * 10_000 + "]" * 10_000,
                           headers=json_h)
        assert r.status_code == 400, r.text
        assert await used(tree, "dfw") == 0
        # A provider write below with a body that is not JSON: 415 / 400.
        r = await root.put(f"/resource_providers/{d}/traits", content="x" * 10,
                           headers={**json_h, "content-type": "text/plain"})
        assert r.status_code == 415, r.text
        r = await root.put(f"/resource_providers/{d}/traits", content="[" * 5000,
                           headers=json_h)
        assert r.status_code == 400, r.text
    run(tmp_path, scenario)


def test_a_body_placement_ignores_on_registry_puts_is_not_sent_below(tmp_path: Path
                                                                      ) -> None:
    """PUT /traits/{name} and PUT /resource_classes/{name} (1.7+) ignore their
    body: one that is not JSON neither fails the call nor leaves the name made
    at the root but not in its cells."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        for i, junk in enumerate(('{"x": "\\ud800"}', "[" * 5000, "not json")):
            for path in (f"/traits/CUSTOM_JUNK{i}", f"/resource_classes/CUSTOM_JUNK{i}"):
                r = await root.put(path, content=junk, headers={
                    V: "placement 1.7", "content-type": "application/json"})
                assert r.status_code in (201, 204), (path, r.text)
                for cell in ("dfw", "ord"):
                    r = await tree.client(cell).get(path, headers={V: "placement 1.7"})
                    assert r.status_code in (200, 204), (cell, path, r.text)
    run(tmp_path, scenario)


def test_a_schedule_never_places_a_consumer_that_is_placed_or_being_placed(tmp_path: Path
                                                                            ) -> None:
    """A schedule request places new consumers only, and each cell checks only
    its own: the root refuses a consumer it placed below (409), and one that
    another request is placing at the same time; the same request id is
    replayed, not refused."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")

        def at(cell: str, c: str, rid: str | None = None) -> Any:
            body = req(1, vcpu=1, constraints=[{"type": "location", "pattern": f"{cell}/*"}])
            body["consumers"] = [c]
            if rid is not None:
                body["request_id"] = rid
            return root.post("/strato/v1/schedule", json=body)
        c = str(uuid.uuid4())
        r = await at("dfw", c, "first")
        assert r.status_code == 200, r.text
        for cell, rid in (("ord", None), ("ord", "second"), ("dfw", "third")):
            r = await at(cell, c, rid)
            assert r.status_code == 409, r.text
            assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        r = await at("dfw", c, "first")
        assert r.status_code == 200 and r.json().get("replayed") is True, r.text
        assert await used(tree, "ord") == 0 and await used(tree, "dfw") == 1
        # At once, with two ids: one is placed.
        for _ in range(3):
            c = str(uuid.uuid4())
            got = await asyncio.gather(at("dfw", c, "a-" + c), at("ord", c, "b-" + c))
            assert sorted(r.status_code for r in got) == [200, 409], [r.text for r in got]
        assert await used(tree, "dfw") + await used(tree, "ord") == 1 + 3
        # A consumer released through the root may be placed again.
        assert (await root.delete(f"/allocations/{c}")).status_code == 204
        assert (await at("ord", c)).status_code == 200
    run(tmp_path, scenario)


def _put_vcpu(client: Any, consumer: str, rp: str, gen: int | None) -> Any:
    """PUT /allocations/{consumer}: one VCPU on `rp` (microversion 1.36)."""
    return client.put(f"/allocations/{consumer}", headers={V: "placement 1.36"}, json={
        "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": gen})


DEEP = [ZoneSpec("global"), ZoneSpec("dfw", parent="global", location_prefix="dfw"),
        ZoneSpec("dfw-a", parent="dfw", location_prefix="dfw/a"),
        ZoneSpec("dfw-b", parent="dfw", location_prefix="dfw/b")]


def test_a_zone_two_levels_down_that_cannot_be_asked_is_named_at_the_root(
        tmp_path: Path) -> None:
    """The region's partial answer says which cell it could not ask; the root
    says it too (as `dfw/dfw-b`), on listings, candidates and registry
    writes, instead of a 200 that looks whole."""
    async def main() -> None:
        tree = await make(tmp_path, DEEP, hosts=1)
        try:
            root = tree.client("global")
            assert len((await root.get("/resource_providers")).json()
                       ["resource_providers"]) == 2
            tree.kill("dfw-b")
            r = await root.get("/resource_providers")
            assert r.status_code == 200 and len(r.json()["resource_providers"]) == 1
            assert r.headers["x-strato-incomplete"] == "dfw/dfw-b"
            r = await root.get("/allocation_candidates?resources=VCPU:1",
                               headers={V: "placement 1.17"})
            assert r.status_code == 200, r.text
            assert r.headers["x-strato-incomplete"] == "dfw/dfw-b"
            r = await root.put("/traits/CUSTOM_FAST", headers={V: "placement 1.6"})
            assert r.status_code == 201, r.text
            assert r.headers["x-strato-incomplete"] == "dfw/dfw-b"
        finally:
            await tree.aclose()
    asyncio.run(main())


def test_an_answer_from_below_is_as_this_zone_would_give_it(tmp_path: Path) -> None:
    """Location is this zone's (the path: the client's host), and an error
    has no `code` below microversion 1.23, as this zone's own errors."""
    async def scenario(tree: InProcessTree) -> None:
        # A client as Nova is (tree.client speaks as a zone).
        root = httpx.AsyncClient(transport=httpx.ASGITransport(app=tree.apps["global"]),
                                 base_url="http://global", headers={"x-auth-token": "admin"})
        rp = (await root.get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]
        r = await root.post(f"/resource_providers/{rp['uuid']}/inventories",
                            headers={V: "placement 1.20"},
                            json={"resource_class": "DISK_GB", "total": 100,
                                  "resource_provider_generation": rp["generation"]})
        assert r.status_code == 201, r.text
        assert r.headers["location"] == (
            f"http://global/resource_providers/{rp['uuid']}/inventories/DISK_GB"), r.headers
        r = await root.get(f"/resource_providers/{rp['uuid']}/inventories/DISK_GB",
                           headers={V: "placement 1.20"})
        assert r.status_code == 200, r.text
        for version, coded in (("1.0", False), ("1.12", False), ("1.23", True)):
            r = await root.post(f"/resource_providers/{rp['uuid']}/inventories",
                                headers={V: f"placement {version}"},
                                json={"resource_class": "DISK_GB", "total": 100,
                                      "resource_provider_generation": 0})
            assert r.status_code == 409, r.text
            assert ("code" in r.json()["errors"][0]) is coded, (version, r.text)
    run(tmp_path, scenario)


def test_a_class_path_not_in_upper_case_is_answered_by_the_owner(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root, cell = tree.client("global"), tree.client("dfw")
        rp = (await cell.get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]["uuid"]
        for c in (root, cell):
            r = await c.get(f"/resource_providers/{rp}/inventories/vcpu")
            assert r.status_code == 404, r.text
            assert "No resource provider" not in r.text, r.text
    run(tmp_path, scenario)


def test_a_provider_made_at_the_root_is_unique_in_the_whole_tree(tmp_path: Path) -> None:
    """Placement: 409 when another provider has the name or uuid. Each zone
    checks its own; the root checks the zones below too (a cell down: 503)."""
    async def scenario(tree: InProcessTree) -> None:
        root, dfw = tree.client("global"), tree.client("dfw")
        h = (await dfw.get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]
        h1 = (await tree.client("ord").get("/resource_providers?name=ord-h1")).json()[
            "resource_providers"][0]
        for body in ({"name": "new", "uuid": h["uuid"]}, {"name": "dfw-h0"}):
            r = await root.post("/resource_providers", json=body,
                                headers={V: "placement 1.20"})
            assert r.status_code == 409, r.text
            assert r.json()["errors"][0]["code"] == "placement.duplicate_name"
        # A rename of a cell's provider to a name another cell has: 409.
        r = await root.put(f"/resource_providers/{h['uuid']}", json={"name": "ord-h1"},
                           headers={V: "placement 1.20"})
        assert r.status_code == 409, r.text
        r = await root.put(f"/resource_providers/{h['uuid']}", json={"name": "dfw-h0"},
                           headers={V: "placement 1.20"})
        assert r.status_code == 200, r.text  # its own name: no change, no conflict
        # A nested provider whose parent is in a cell is made in that cell.
        r = await root.post("/resource_providers", headers={V: "placement 1.20"}, json={
            "name": "dfw-h0-vgpu", "parent_provider_uuid": h["uuid"]})
        assert r.status_code == 200, r.text
        child = r.json()
        assert child["root_provider_uuid"] == h["uuid"]
        assert r.headers["location"].endswith(f"/resource_providers/{child['uuid']}")
        r = await dfw.get(f"/resource_providers?in_tree={h['uuid']}")
        assert {p["uuid"] for p in r.json()["resource_providers"]} == {h["uuid"],
                                                                       child["uuid"]}
        r = await root.get(f"/resource_providers?in_tree={h['uuid']}")
        assert len(r.json()["resource_providers"]) == 2
        # A provider of its own: made at the root.
        r = await root.post("/resource_providers", json={"name": "shared-disk"},
                            headers={V: "placement 1.20"})
        assert r.status_code == 200, r.text
        assert (await dfw.get("/resource_providers?name=shared-disk")).json()[
            "resource_providers"] == []
        # A cell that cannot say: no provider made, 503 to retry.
        tree.kill("ord")
        r = await root.post("/resource_providers", json={"name": "another"})
        assert r.status_code == 503, r.text
        assert "retry-after" in r.headers
        assert (await root.get("/resource_providers?name=another")).json()[
            "resource_providers"] == []
        assert h1["name"] == "ord-h1"
    run(tmp_path, scenario)


def test_a_post_that_only_empties_consumers_below_is_made_where_they_are(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        v = {V: "placement 1.36"}
        placed: dict[str, list[str]] = {}
        for _ in range(6):
            p = (await place(tree))["placements"][0]
            placed.setdefault(p["zone"].split("/")[1], []).append(p["consumer_uuid"])
        assert set(placed) == {"dfw", "ord"}, placed

        def empty(*consumers: str, generation: int | None = 1) -> dict[str, Any]:
            return {c: {"allocations": {}, "consumer_generation": generation,
                        "project_id": "p", "user_id": "u"} for c in consumers}
        a, b = placed["dfw"][:2]
        # A stale generation: the cell's 409, nothing changed.
        r = await root.post("/allocations", json=empty(a, generation=7), headers=v)
        assert r.status_code == 409, r.text
        assert (await root.get(f"/allocations/{a}")).json()["allocations"]
        r = await root.post("/allocations", json=empty(a, b), headers=v)
        assert r.status_code == 204, r.text
        for c in (a, b):
            assert (await root.get(f"/allocations/{c}")).json()["allocations"] == {}
        # In two cells: one POST cannot be all or nothing there.
        c, d = placed["dfw"][2], placed["ord"][0]
        r = await root.post("/allocations", json=empty(c, d), headers=v)
        assert r.status_code == 400, r.text
        assert "different zones" in r.text
        assert (await root.get(f"/allocations/{c}")).json()["allocations"]
    run(tmp_path, scenario)


def test_a_reshape_of_a_cells_providers_at_the_root_is_made_in_the_cell(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root, dfw = tree.client("global"), tree.client("dfw")
        v = {V: "placement 1.30"}
        h = (await dfw.get("/resource_providers?name=dfw-h0")).json()["resource_providers"][0]
        o = (await tree.client("ord").get("/resource_providers?name=ord-h0")).json()[
            "resource_providers"][0]
        r = await root.post("/resource_providers", headers=v, json={
            "name": "dfw-h0-numa0", "parent_provider_uuid": h["uuid"]})
        assert r.status_code == 200, r.text
        numa = r.json()

        def inv(total: int, generation: int) -> dict[str, Any]:
            return {"resource_provider_generation": generation,
                    "inventories": {"VCPU": {"total": total}}}
        # Two cells' providers: one zone's transaction cannot hold both.
        r = await root.post("/reshaper", headers=v, json={
            "inventories": {h["uuid"]: inv(4, h["generation"]),
                            o["uuid"]: inv(4, o["generation"])}, "allocations": {}})
        assert r.status_code == 400, r.text
        assert "one zone" in r.text
        r = await root.post("/reshaper", headers=v, json={
            "inventories": {h["uuid"]: inv(4, h["generation"]),
                            numa["uuid"]: inv(4, numa["generation"])}, "allocations": {}})
        assert r.status_code == 204, r.text
        r = await dfw.get(f"/resource_providers/{numa['uuid']}/inventories")
        assert r.json()["inventories"]["VCPU"]["total"] == 4
        # A stale generation: the cell's 409, as it answers.
        r = await root.post("/reshaper", headers=v, json={
            "inventories": {h["uuid"]: inv(2, h["generation"])}, "allocations": {}})
        assert r.status_code == 409, r.text
    run(tmp_path, scenario)


def test_a_child_listing_another_childs_provider_does_not_take_its_writes(
        tmp_path: Path) -> None:
    """A child (another organisation's) that lists a provider of its sibling
    in its listings: the provider is listed once, and writes to it still go
    to the zone that owns it."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h = (await tree.client("dfw").get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]
        assert (await root.get(f"/resource_providers/{h['uuid']}")).status_code == 200
        real = tree.transport.call

        async def lying(url: str, method: str, path: str, **kw: Any) -> Any:
            reply = await real(url, method, path, **kw)
            if url == "inproc://ord" and path.split("?")[0] == "/resource_providers":
                reply = type(reply)(reply.status, {"resource_providers": [
                    *reply.body["resource_providers"], {**h, "name": "stolen"}]})
            return reply
        tree.transport.call = lying  # type: ignore[method-assign]
        r = await root.get("/resource_providers")
        listed = [p["uuid"] for p in r.json()["resource_providers"]]
        assert listed.count(h["uuid"]) == 1
        r = await root.put(f"/resource_providers/{h['uuid']}", json={"name": "renamed"})
        assert r.status_code == 200, r.text
        got = (await tree.client("dfw").get(f"/resource_providers/{h['uuid']}")).json()
        assert got["name"] == "renamed"
    run(tmp_path, scenario)


def test_a_provider_that_moved_between_cells_gets_its_writes_where_it_is_now(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root, dfw, ord_ = tree.client("global"), tree.client("dfw"), tree.client("ord")
        r = await dfw.post("/resource_providers", json={"name": "mover"},
                           headers={V: "placement 1.20"})
        mover = r.json()["uuid"]
        assert (await root.get(f"/resource_providers/{mover}")).status_code == 200
        # Deleted in dfw and made in ord by their own clients: the root
        # learned dfw, which now says 404.
        assert (await dfw.delete(f"/resource_providers/{mover}")).status_code == 204
        r = await ord_.post("/resource_providers", json={"name": "mover", "uuid": mover})
        assert r.status_code in (200, 201), r.text
        r = await root.put(f"/resource_providers/{mover}", json={"name": "moved"})
        assert r.status_code == 200, r.text
        assert (await ord_.get(f"/resource_providers/{mover}")).json()["name"] == "moved"
    run(tmp_path, scenario)


def test_strato_providers_at_the_root_lists_the_subtree_with_zones(tmp_path: Path) -> None:
    """`strato providers list` at the root: every provider below, each with
    the path of its zone; a cell that cannot say is named."""
    async def main() -> None:
        tree = await make(tmp_path, DEEP, hosts=1)
        try:
            root = tree.client("global")
            r = await root.get("/strato/v1/providers")
            assert r.status_code == 200, r.text
            zones = {p["name"]: p["zone"] for p in r.json()["providers"]}
            assert zones == {"dfw-a-h0": "global/dfw/dfw-a", "dfw-b-h0": "global/dfw/dfw-b"}
            r = await root.get("/strato/v1/providers?stale=true")
            assert r.json()["providers"] == []
            tree.kill("dfw-a")
            r = await root.get("/strato/v1/providers")
            assert [p["zone"] for p in r.json()["providers"]] == ["global/dfw/dfw-b"]
            assert r.headers["x-strato-incomplete"] == "dfw/dfw-a"
        finally:
            await tree.aclose()
    asyncio.run(main())


def test_renames_and_creates_at_the_root_are_unique_and_need_no_one_who_cannot_answer(
        tmp_path: Path) -> None:
    """A cell's provider renamed to the name of the root's own: 409. The
    root's own provider updated without a new name: no look below (200 with
    a cell down). Two creates of one name at once through the root: one."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        v = {V: "placement 1.20"}
        own = (await root.post("/resource_providers", json={"name": "root-pool"},
                               headers=v)).json()
        h = (await tree.client("dfw").get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]
        r = await root.put(f"/resource_providers/{h['uuid']}", json={"name": "root-pool"},
                           headers=v)
        assert r.status_code == 409, r.text
        got = await asyncio.gather(*(root.post(
            "/resource_providers", headers=v,
            json={"name": "twin"} if i % 2 else
            {"name": "twin", "parent_provider_uuid": h["uuid"]}) for i in range(6)))
        assert sorted(r.status_code for r in got) == [200] + [409] * 5, [r.text for r in got]
        tree.kill("ord")
        r = await root.put(f"/resource_providers/{own['uuid']}", json={"name": "root-pool"},
                           headers=v)
        assert r.status_code == 200, r.text
        r = await root.put(f"/resource_providers/{'0' * 8}-0000-4000-8000-{'0' * 12}",
                           json={"name": "root-pool"}, headers=v)
        assert r.status_code in (404, 503), r.text
    run(tmp_path, scenario)


def test_a_write_sent_below_is_counted_under_its_route(tmp_path: Path) -> None:
    """The root answers it without its router (api/below.py): its metrics and
    audit log still name the route, not "unmatched"."""
    async def scenario(tree: InProcessTree) -> None:
        from tests.api.test_health import value
        root = tree.client("global")
        h = {V: "placement 1.39"}
        rps = (await root.get("/resource_providers", headers=h)).json()["resource_providers"]
        below = next(p for p in rps if p["name"].startswith("dfw"))
        r = await root.put(f"/resource_providers/{below['uuid']}/traits", headers=h, json={
            "traits": ["CUSTOM_AUDITED"], "resource_provider_generation": below["generation"]})
        assert r.status_code in (200, 400), r.text
        text = (await root.get("/metrics")).text
        assert value(text, "strato_http_requests_total", method="PUT",
                     route="/resource_providers/{uuid}/traits", status=str(r.status_code)) == 1
    run(tmp_path, scenario)


def test_a_provider_body_the_root_refuses_is_a_400_before_any_look_below(tmp_path: Path
                                                                         ) -> None:
    """A create or rename at the root whose body Placement's schema refuses was
    looked for below first: a name taken in a cell made it a 409, and a cell
    down a 503 "retry", for a request no retry could make right."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        v = {V: "placement 1.20"}
        h = (await tree.client("dfw").get("/resource_providers?name=dfw-h0")).json()[
            "resource_providers"][0]
        bad = ({"name": "dfw-h0", "uuid": "not-a-uuid"},
               {"name": "dfw-h0", "parent_provider_uuid": "nope"},
               {"name": "dfw-h0", "colour": "blue"},
               {"name": "dfw-h0", "uuid": None})
        for body in bad:
            r = await root.post("/resource_providers", json=body, headers=v)
            assert r.status_code == 400, (body, r.text)
            assert "JSON does not validate" in r.text, r.text
        r = await root.put(f"/resource_providers/{h['uuid']}", headers=v,
                           json={"name": "ord-h1", "parent_provider_uuid": "nope"})
        assert r.status_code == 400, r.text
        tree.kill("ord")
        for body in bad:
            r = await root.post("/resource_providers", json={**body, "name": "brand-new"},
                                headers=v)
            assert r.status_code == 400, (body, r.text)
        r = await root.put(f"/resource_providers/{h['uuid']}", headers=v,
                           json={"name": "renamed", "parent_provider_uuid": "nope"})
        assert r.status_code == 400, r.text
        # Nothing was made or renamed.
        r = await tree.client("dfw").get(f"/resource_providers/{h['uuid']}")
        assert r.json()["name"] == "dfw-h0"
        r = await tree.client("dfw").get("/resource_providers?name=brand-new")
        assert r.json()["resource_providers"] == []
        tree.revive("ord")
        r = await root.get("/resource_providers?name=brand-new", headers=v)
        assert r.status_code == 200 and r.json()["resource_providers"] == [], r.text
    run(tmp_path, scenario)


def test_a_custom_name_one_cell_made_is_taught_to_another_a_query_names_it(
        tmp_path: Path) -> None:
    """A trait made in dfw only (its agents point there): `required=!CUSTOM_X`
    at the root lists ord's providers too, as Placement lists every provider
    without the trait (ord refused the query, 400 No such trait, and its
    providers were left out, ord named incomplete); the name is made in ord
    and ord asked again. A class made in dfw only: ord has none of it, and
    is not named incomplete."""
    async def scenario(tree: InProcessTree) -> None:
        root, dfw = tree.client("global"), tree.client("dfw")
        h = {V: "placement 1.39"}
        assert (await dfw.put("/traits/CUSTOM_ONLY_DFW", headers=h)).status_code == 201
        assert (await dfw.put("/resource_classes/CUSTOM_ONLY_DFW",
                              headers=h)).status_code == 201
        everyone = (await root.get("/allocation_candidates?resources=VCPU:1",
                                   headers=h)).json()["allocation_requests"]
        r = await root.get("/allocation_candidates?resources=VCPU:1"
                           "&required=!CUSTOM_ONLY_DFW", headers=h)
        assert r.status_code == 200, r.text
        assert "x-strato-incomplete" not in r.headers, r.headers["x-strato-incomplete"]
        assert len(r.json()["allocation_requests"]) == len(everyone) == 8
        r = await root.get("/resource_providers?required=!CUSTOM_ONLY_DFW", headers=h)
        assert "x-strato-incomplete" not in r.headers
        names = {p["name"] for p in r.json()["resource_providers"]}
        assert {f"ord-h{i}" for i in range(4)} <= names, names
        r = await root.get("/allocation_candidates?resources=CUSTOM_ONLY_DFW:1", headers=h)
        assert r.status_code == 200, r.text
        assert "x-strato-incomplete" not in r.headers
        assert r.json()["allocation_requests"] == []
        r = await tree.client("ord").get("/traits?name=in:CUSTOM_ONLY_DFW", headers=h)
        assert r.json()["traits"] == ["CUSTOM_ONLY_DFW"]
    run(tmp_path, scenario)


def test_a_post_emptying_a_consumer_of_one_cell_and_writing_in_another_says_why(
        tmp_path: Path) -> None:
    """POST /allocations at the root emptying consumer A of dfw (with its right
    generation) and giving new consumer B allocations in ord: a 400 naming A,
    dfw and ord, nothing changed (it was sent to ord, which answered a 409
    'consumer generation conflict - expected null but got 1': a generation
    the client had right, which Nova takes for a concurrent change). A stale
    generation is still the 409; Nova's swap within one cell still works."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        h = {V: "placement 1.28"}
        d, o = await _uuid_of(root, "dfw-h0"), await _uuid_of(root, "ord-h0")
        a, b = str(uuid.uuid4()), str(uuid.uuid4())
        assert (await _put_vcpu(root, a, d, None)).status_code == 204

        def body(gen: int) -> dict[str, Any]:
            return {a: {"allocations": {}, "project_id": "p", "user_id": "u",
                        "consumer_generation": gen},
                    b: {"allocations": {o: {"resources": {"VCPU": 1}}}, "project_id": "p",
                        "user_id": "u", "consumer_generation": None}}
        r = await root.post("/allocations", headers=h, json=body(1))
        assert r.status_code == 400, r.text
        detail = r.json()["errors"][0]["detail"]
        assert f"consumer {a} is emptied by this write" in detail, detail
        assert "zone dfw" in detail and "zone ord" in detail, detail
        assert await used(tree, "dfw") == 1 and await used(tree, "ord") == 0
        r = await root.post("/allocations", headers=h, json=body(5))
        assert r.status_code == 409, r.text
        assert "consumer generation conflict - expected 1 but got 5" in r.text, r.text
        # Nova's move_allocations within dfw: A's allocations to B.
        r = await root.post("/allocations", headers=h, json={
            a: {"allocations": {}, "project_id": "p", "user_id": "u",
                "consumer_generation": 1},
            b: {"allocations": {d: {"resources": {"VCPU": 1}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": None}})
        assert r.status_code == 204, r.text
        got = (await root.get(f"/allocations/{b}", headers=h)).json()
        assert list(got["allocations"]) == [d]
        assert (await root.get(f"/allocations/{a}", headers=h)).json() == {"allocations": {}}
    run(tmp_path, scenario)
