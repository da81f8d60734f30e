"""Edges of the zone tree that are not a plain tree: a zone registered under
two parents with a common ancestor (a diamond) is counted once in that
ancestor's summary, and a registration that would close a cycle is refused
when the child's summary shows it."""

from __future__ import annotations

from pathlib import Path

from strato.zone.inprocess import InProcessTree, ZoneSpec
from tests.zone.test_loops import _background_rounds, _host, run


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
        assert s["providers"] == 1 and not s.get("overlaps") and not s["loops"], s
    run(tmp_path, [ZoneSpec("top"), ZoneSpec("mid", parent="top"),
                   ZoneSpec("leaf", parent="mid")], scenario)
