"""A zone tree with a cycle: a zone registered as its own child is refused,
and a cycle through other zones not visible at registration (the child could
not be asked then) is refused at the first call that comes back round, never
stormed."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from strato.zone.inprocess import InProcessTree, ZoneSpec, build
from strato.zone.protocol import MAX_PATH
from tests.zone.helpers import record_calls

# The zones a call passed through (docs/api.md, "Zone protocol headers").
PATH_HEADER = "x-strato-zone-path"


def run(tmp_path: Path, names: list[str] | list[ZoneSpec], scenario: Any) -> None:
    """`scenario` on an in-process tree of `names` (each a zone of its own, not
    linked) or of `ZoneSpec`s."""
    async def main() -> None:
        tree = build(tmp_path, [n if isinstance(n, ZoneSpec) else ZoneSpec(n) for n in names])
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


def test_a_zone_is_not_its_own_child_by_name_or_by_address(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("a")
        r = await c.post("/strato/v1/children", json={"name": "a", "url": tree.url("b")})
        assert r.status_code == 400, r.text
        assert "name" in r.json()["errors"][0]["detail"]
        # Its own address under another name: the probe comes back to it.
        r = await c.post("/strato/v1/children", json={"name": "selfloop", "url": tree.url("a")})
        assert r.status_code == 400, r.text
        assert "url" in r.json()["errors"][0]["detail"]
        assert (await c.get("/strato/v1/children")).json()["children"] == []
        r = await c.post("/strato/v1/children", json={"name": "b", "url": tree.url("b")})
        assert r.status_code == 201, r.text
    run(tmp_path, ["a", "b"], scenario)


def test_a_cycle_of_two_zones_is_refused_at_once_not_stormed(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        a = tree.client("a")
        assert (await a.post("/strato/v1/children",
                             json={"name": "b", "url": tree.url("b")})).status_code == 201
        # a cannot be asked as b registers it: nothing tells b that a is above it.
        await register_unseen(tree, "b", "a")
        calls = record_calls(tree, lambda method, path: True)
        rp = str(uuid.uuid4())
        for method, path, body in [
                ("GET", "/usages?project_id=p", None),
                ("GET", "/resource_providers", None),
                ("GET", f"/resource_providers/{rp}", None),
                ("GET", "/allocation_candidates?resources=VCPU:1", None),
                ("GET", f"/allocations/{rp}", None),
                ("GET", "/strato/v1/groups/g", None),
                ("GET", "/strato/v1/summary?fresh=true", None),
                ("POST", "/strato/v1/schedule", {
                    "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 1}}]})]:
            del calls[:]
            start = time.monotonic()
            r = await a.request(method, path, json=body)
            assert time.monotonic() - start < 5, path
            # a asks b, b asks a, a refuses: no more than that per child asked.
            assert len(calls) <= 4, (path, calls)
            assert r.status_code in (200, 404, 503, 508), (path, r.text)
        # What could not be asked is the cycle, and the answer says so.
        r = await a.get("/usages?project_id=p")
        assert r.status_code == 508, r.text
        err = r.json()["errors"][0]
        assert err["code"] == "strato.zone_loop" and "b" in err["detail"], err
    run(tmp_path, ["a", "b"], scenario)


def test_a_call_that_comes_back_or_went_too_far_is_508(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("a")
        own = tree.apps["a"].state.zone_id
        for path in (f"x,{own}", ",".join(f"z{i}" for i in range(MAX_PATH + 1))):
            r = await c.get("/usages?project_id=p", headers={PATH_HEADER: path})
            assert r.status_code == 508, r.text
            err = r.json()["errors"][0]
            assert err["status"] == 508 and err["code"] == "strato.zone_loop"
            assert err["title"] == "Loop Detected"
        ok = ",".join(f"z{i}" for i in range(MAX_PATH))
        assert (await c.get("/usages?project_id=p", headers={PATH_HEADER: ok})).status_code == 200
    run(tmp_path, ["a"], scenario)


def test_calls_to_children_carry_the_path_so_far(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        seen: list[str | None] = []

        async def recorder(scope: Any, receive: Any, send: Any) -> None:
            headers = dict(scope["headers"])
            if scope["path"] == "/usages":
                seen.append(headers.get(PATH_HEADER.encode(), b"").decode())
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"usages": {}}' if scope["path"] == "/usages" else
                        b'{"zone": "rec", "providers": 0, "classes": {}}'})
        tree.transport.register("inproc://rec", recorder)
        c = tree.client("a")
        assert (await c.post("/strato/v1/children",
                             json={"name": "rec", "url": "inproc://rec"})).status_code == 201
        r = await c.get("/usages?project_id=p", headers={PATH_HEADER: "up1,up2"})
        assert r.status_code == 200, r.text
        assert seen == [f"up1,up2,{tree.apps['a'].state.zone_id}"]
    run(tmp_path, ["a"], scenario)


async def _host(c: Any, name: str, vcpu: int = 8) -> None:
    made = await c.post("/resource_providers", json={"name": name})
    assert made.status_code in (200, 201), made.text
    rp = made.json()
    r = await c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": vcpu}}})
    assert r.status_code == 200, r.text


async def _cycle(tree: InProcessTree) -> None:
    """a and b, one host each, each registered as the other's child."""
    a, b = tree.client("a"), tree.client("b")
    await _host(a, "a-h0")
    await _host(b, "b-h0")
    assert (await a.post("/strato/v1/children",
                         json={"name": "b", "url": tree.url("b")})).status_code == 201
    await register_unseen(tree, "b", "a")


async def register_unseen(tree: InProcessTree, parent: str, child: str) -> None:
    """`parent` registers `child` while `child` cannot be asked, so the cycle
    it closes is not seen (a child whose summary shows it is a 409,
    tests/zone/test_tree_edges.py); then `parent` sees its summary, as
    registration would have."""
    tree.kill(child)
    r = await tree.client(parent).post("/strato/v1/children",
                                       json={"name": child, "url": tree.url(child)})
    assert r.status_code == 201, r.text
    tree.revive(child)
    zt = tree.zone_tree(parent)
    kid = await zt.child(child)
    assert kid is not None
    await zt.fetch_summary(kid)


async def _background_rounds(tree: InProcessTree, names: list[str], rounds: int) -> None:
    """What each zone's background refresher does, `rounds` times: fetch every
    child's summary (outside any request: no path of a caller)."""
    for _ in range(rounds):
        for n in names:
            zt = tree.zone_tree(n)
            for child in await zt.children():
                await zt.fetch_summary(child)


def test_summaries_in_a_cycle_stay_bounded(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await _cycle(tree)
        await _background_rounds(tree, ["a", "b"], 8)
        for name in ("a", "b"):
            s = (await tree.client(name).get("/strato/v1/summary")).json()
            # Two hosts in the whole cycle: no zone counted twice.
            assert s["providers"] <= 2, (name, s)
            assert s["classes"]["VCPU"]["capacity"] <= 16, (name, s)
            assert len(s["zone_ids"]) == len(set(s["zone_ids"])) <= 2
        # The edge that closes the cycle is marked, and says why.
        kids = [c for n in ("a", "b")
                for c in (await tree.client(n).get("/strato/v1/children")).json()["children"]]
        looped = [c for c in kids if not c["health"]["healthy"]]
        assert looped, kids
        assert all("loop" in c["health"]["last_error"] for c in looped), looped
        # A request at either zone never sees a count that grew.
        s = (await tree.client("a").get("/strato/v1/summary?fresh=true")).json()
        assert s["providers"] <= 2, s
    run(tmp_path, ["a", "b"], scenario)


def test_background_calls_carry_this_zones_id(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        seen: list[str] = []

        async def recorder(scope: Any, receive: Any, send: Any) -> None:
            seen.append(dict(scope["headers"]).get(PATH_HEADER.encode(), b"").decode())
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"zone": "rec", "providers": 0, "classes": {}}'})
        tree.transport.register("inproc://rec", recorder)
        assert (await tree.client("a").post(
            "/strato/v1/children", json={"name": "rec", "url": "inproc://rec"})).status_code == 201
        del seen[:]
        zt = tree.zone_tree("a")
        assert await zt.fetch_summary((await zt.children())[0]) is not None
        assert seen == [tree.apps["a"].state.zone_id]
    run(tmp_path, ["a"], scenario)


def test_a_summary_that_covers_the_caller_is_508(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        a = tree.client("a")
        assert (await a.post("/strato/v1/children",
                             json={"name": "b", "url": tree.url("b")})).status_code == 201
        b_id = tree.apps["b"].state.zone_id
        # b asks a (a's summary covers b): refused, naming the child.
        r = await a.get("/strato/v1/summary", headers={PATH_HEADER: b_id})
        assert r.status_code == 508, r.text
        err = r.json()["errors"][0]
        assert err["code"] == "strato.zone_loop" and "b" in err["detail"]
        # Anyone else asks: a's summary, covering a and b.
        r = await a.get("/strato/v1/summary", headers={PATH_HEADER: "someone"})
        assert r.status_code == 200, r.text
        assert r.json()["zone_ids"] == [tree.apps["a"].state.zone_id, b_id]
    run(tmp_path, ["a", "b"], scenario)


def test_a_tree_without_a_cycle_and_a_child_restarted_are_counted_once(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        for n in ("mid", "leaf"):
            await _host(tree.client(n), f"{n}-h0")
        await tree.link()
        await _background_rounds(tree, ["leaf", "mid", "top"], 4)
        s = (await tree.client("top").get("/strato/v1/summary")).json()
        assert s["providers"] == 2 and len(s["zone_ids"]) == 3, s
        # leaf restarts: the same database, a new process (a new zone id).
        old = tree.apps["leaf"].state.zone_id
        tree.add(ZoneSpec("leaf", parent="mid"))
        assert tree.apps["leaf"].state.zone_id != old
        await _background_rounds(tree, ["leaf", "mid", "top"], 4)
        for n in ("top", "mid"):
            kids = (await tree.client(n).get("/strato/v1/children")).json()["children"]
            assert all(c["health"]["healthy"] for c in kids), kids
        s = (await tree.client("top").get("/strato/v1/summary")).json()
        assert s["providers"] == 2 and tree.apps["leaf"].state.zone_id in s["zone_ids"], s
        r = await tree.client("top").post("/strato/v1/schedule", json={
            "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 8}}]})
        assert r.status_code == 200, r.text

    run(tmp_path, [ZoneSpec("top"), ZoneSpec("mid", parent="top"),
                   ZoneSpec("leaf", parent="mid")], scenario)


def test_a_cycle_below_a_parent_is_said_to_be_a_loop_and_not_kept(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        top, a, b = tree.client("top"), tree.client("a"), tree.client("b")
        for parent, child in (("top", "a"), ("a", "b")):
            r = await tree.client(parent).post("/strato/v1/children",
                                               json={"name": child, "url": tree.url(child)})
            assert r.status_code == 201, r.text
        await register_unseen(tree, "b", "a")
        body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "request_id": "loop-1", "groups": [{"resources": {"VCPU": 1}}]}
        for rounds in (0, 3):
            # Before and after the background refreshes marked the cycle.
            await _background_rounds(tree, ["top", "a", "b"], rounds)
            r = await top.post("/strato/v1/schedule", json=body)
            assert r.status_code == 508, r.text
            err = r.json()["errors"][0]
            assert err["code"] == "strato.zone_loop" and err["status"] == 508, err
            assert "cycle" in err["detail"] and "a:" in err["detail"], err
            assert err["request_id"]
            r = await top.get("/usages?project_id=p")
            assert r.status_code == 508, r.text
            assert r.json()["errors"][0]["code"] == "strato.zone_loop"
        # Not a final answer: once there is room, the same request id is placed.
        await _host(top, "top-h0")
        await asyncio.sleep(1.1)  # the zone looks at its own providers again
        r = await top.post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"] == "top"
        assert (await a.get("/strato/v1/children")).status_code == 200
        assert (await b.get("/strato/v1/children")).status_code == 200
    run(tmp_path, ["top", "a", "b"], scenario)
