"""One request divided among child zones (zone/split.py): the cases a root over
two cells could not place before, spread rules above a child, gangs that are
all or nothing across zones, and atomic=false."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from strato.model.schedule import ScheduleRequest
from strato.store.children import Child
from strato.zone import split
from strato.zone.inprocess import InProcessTree, ZoneSpec, build
from strato.zone.tree import ZoneTree

ZONES = [ZoneSpec("global"), ZoneSpec("dfw", parent="global", location_prefix="dfw"),
         ZoneSpec("ord", parent="global", location_prefix="ord")]
HOSTS = 4  # per cell, 8 VCPU each


async def host(c: Any, name: str, location: str, vcpu: int = 8) -> str:
    rp = (await c.post("/resource_providers", json={"name": name})).json()
    r = await c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 16384}}})
    assert r.status_code == 200, r.text
    r = await c.put(f"/strato/v1/providers/{rp['uuid']}/meta",
                    json={"location": location, "tags": []})
    assert r.status_code == 200, r.text
    return str(rp["uuid"])


async def make(tmp: Path, zones: list[ZoneSpec] = ZONES, hosts: int = HOSTS
               ) -> InProcessTree:
    tree = build(tmp, zones)
    await tree.link()
    parents = {z.parent for z in zones}
    for z in zones:
        if z.name in parents:
            continue
        for i in range(hosts):
            await host(tree.client(z.name), f"{z.name}-h{i}",
                       f"{z.location_prefix}/room1/rack{i % 2}/{z.name}-h{i}")
    await zt(tree, "global").refresh(fresh=True)
    return tree


def zt(tree: InProcessTree, name: str) -> ZoneTree:
    got: ZoneTree = tree.apps[name].state.tree
    return got


def run(tmp: Path, scenario: Callable[[InProcessTree], Awaitable[None]],
        **kw: Any) -> None:
    async def main() -> None:
        tree = await make(tmp, **kw)
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


def req(n: int, vcpu: int = 8, **kw: Any) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(n)], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"VCPU": vcpu, "MEMORY_MB": 1024}}],
            **kw}


async def affinity_to_a_split_group_is_refused(client: httpx.AsyncClient) -> None:
    """Group web4 has members in dfw/room1 and dfw/room2: hard affinity at
    the room level is refused, dry run or not, naming the rule and rooms."""
    for dry in (False, True):
        r = await client.post("/strato/v1/schedule", json=req(
            3, vcpu=1, group="web4", dry_run=dry,
            constraints=[{"type": "affinity", "level": "room"}]))
        assert r.status_code == 409, r.text
        err = r.json()["errors"][0]
        assert err["code"] == "strato.no_valid_placement"
        assert "affinity web4@room" in err["detail"], err
        assert "dfw/room1" in err["detail"] and "dfw/room2" in err["detail"], err


def cells(answer: dict[str, Any]) -> Counter[str]:
    return Counter(p["zone"].split("/")[1] for p in answer["placements"])


async def used(tree: InProcessTree, zone: str) -> int:
    r = await tree.client(zone).get("/strato/v1/summary?fresh=true")
    return int(r.json()["classes"]["VCPU"]["used"])


async def consumers_at(tree: InProcessTree, zone: str) -> set[str]:
    r = await tree.client(zone).get("/strato/v1/summary?fresh=true")
    assert r.status_code == 200
    out: set[str] = set()
    rps = (await tree.client(zone).get("/resource_providers")).json()["resource_providers"]
    for rp in rps:
        allocs = (await tree.client(zone).get(
            f"/resource_providers/{rp['uuid']}/allocations")).json()["allocations"]
        out |= set(allocs)
    return out


def test_anti_affinity_at_the_site_level_puts_one_instance_in_each_cell(tmp_path: Path
                                                                         ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(2, constraints=[{"type": "anti_affinity", "level": "site"}], group="web")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert cells(r.json()) == {"dfw": 1, "ord": 1}
        # A third cannot go anywhere: both sites hold one of the group... of this
        # request; a 3-instance request is refused whole, nothing held.
        body = req(3, constraints=[{"type": "anti_affinity", "level": "site"}], group="db")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 409, r.text
        assert "2 of 3" in r.text
        assert await used(tree, "dfw") == 8 and await used(tree, "ord") == 8
    run(tmp_path, scenario)


def test_soft_anti_affinity_above_the_cells_is_relaxed_when_it_must(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(3, vcpu=1, group="g",
                   constraints=[{"type": "anti_affinity", "level": "zone", "hard": False}])
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert sum(cells(answer).values()) == 3 and set(cells(answer)) == {"dfw", "ord"}
        assert [x["rule"] for x in answer["relaxed"]] == ["anti_affinity g@zone"]
        # Two instances fit one per zone: nothing relaxed.
        body = req(2, vcpu=1, group="h",
                   constraints=[{"type": "anti_affinity", "level": "zone", "hard": False}])
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert cells(r.json()) == {"dfw": 1, "ord": 1} and r.json()["relaxed"] == []
    run(tmp_path, scenario)


def test_a_gang_of_whole_hosts_larger_than_any_cell_is_divided(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert sorted(p["consumer_uuid"] for p in answer["placements"]) == sorted(
            body["consumers"])
        assert sum(cells(answer).values()) == 6 and len(cells(answer)) == 2
        assert answer["unplaced"] == []
        # Confirmed, not held: still there after the holds' time to live.
        assert await used(tree, "dfw") + await used(tree, "ord") == 48
        for name in ("dfw", "ord"):
            assert await zt(tree, name).recover() is not None
        found = await consumers_at(tree, "dfw") | await consumers_at(tree, "ord")
        assert found == set(body["consumers"])
    run(tmp_path, scenario)


def test_explain_names_each_share_and_each_child_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("global").post("/strato/v1/schedule",
                                             json=req(6, explain=True))
        assert r.status_code == 200, r.text
        explain = r.json()["explain"]
        shares = {d["zone"]: d["instances"] for d in explain["placed_by"]["divided"]}
        assert shares == dict(cells(r.json())) and sum(shares.values()) == 6
        # dfw is full now: the division looks at it again, and says so once.
        r = await tree.client("global").post("/strato/v1/schedule",
                                             json=req(12, explain=True))
        assert r.status_code == 409, r.text
        named = [c["zone"] for c in r.json()["explain"]["children"]]
        assert sorted(named) == sorted(set(named)), named
    run(tmp_path, scenario)


def test_a_gang_larger_than_the_tree_is_refused_with_nothing_held(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(9)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 409, r.text
        assert "8 of 9" in r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, scenario)


def test_atomic_false_places_what_fits_across_cells(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(9, atomic=False)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert len(answer["placements"]) == 8 and len(answer["unplaced"]) == 1
        assert cells(answer) == {"dfw": 4, "ord": 4}
        assert set(answer["unplaced"]) | {p["consumer_uuid"] for p in answer["placements"]} \
            == set(body["consumers"])
    run(tmp_path, scenario)


def test_a_dry_run_plans_the_division_and_claims_nothing(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6, dry_run=True)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert sum(cells(r.json()).values()) == 6 and r.json()["dry_run"] is True
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, scenario)


def test_a_gang_whose_second_cell_does_not_answer_leaves_nothing_held(tmp_path: Path
                                                                      ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # ord answers its plan, then dies before its share is claimed: the gang
        # is released everywhere (dfw's held share too).
        root = zt(tree, "global")
        real_ask = root.ask
        calls: Counter[str] = Counter()

        async def ask(child: Child, r: ScheduleRequest, attempt: Any, share: float = 1.0
                      ) -> Any:
            calls[child.name] += 1
            if child.name == "ord" and not r.dry_run and r.hold_ttl is not None:
                tree.kill("ord")
            return await real_ask(child, r, attempt, share)
        root.ask = ask  # type: ignore[method-assign,assignment]
        body = req(6)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code in (409, 503), r.text
        assert await used(tree, "dfw") == 0
        tree.revive("ord")
        # What ord may have held (in doubt) is cancelled once it answers again,
        # and its hold would expire anyway.
        await root.reconcile()
        assert await used(tree, "ord") == 0
        assert not (await consumers_at(tree, "dfw") | await consumers_at(tree, "ord"))
    run(tmp_path, scenario)


def test_a_cancel_after_a_divided_gang_undoes_every_share(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6, request_id="gang-1")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        r = await tree.client("global").post("/strato/v1/requests/cancel",
                                             json={"request_id": "gang-1"})
        assert r.status_code == 200, r.text
        # The answer says what went, as a zone without children does, and
        # names each child once (not once per part it held).
        assert sorted(r.json()["released"]) == sorted(body["consumers"]), r.text
        assert sorted(r.json()["forwarded"]) == ["dfw", "ord"], r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
        # A retry with the same id is told it was cancelled; nothing is placed.
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 409 and "cancel" in r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, scenario)


def test_concurrent_duplicates_of_a_divided_request_place_it_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6, request_id="dup-gang")
        got = await asyncio.gather(*(tree.client("global").post("/strato/v1/schedule",
                                                                json=body)
                                     for _ in range(4)))
        ok = [g for g in got if g.status_code == 200]
        assert ok, [g.text for g in got]
        assert all(g.status_code in (200, 409) for g in got), [g.text for g in got]
        assert await used(tree, "dfw") + await used(tree, "ord") == 48
        assert {p["consumer_uuid"] for p in ok[0].json()["placements"]} == set(
            body["consumers"])
    run(tmp_path, scenario)


@pytest.mark.parametrize("level", ["zone", "site"])
def test_hard_affinity_above_the_cells_keeps_the_gang_in_one_cell(tmp_path: Path,
                                                                  level: str) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(3, constraints=[{"type": "affinity", "level": level}], group="a")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert len(cells(r.json())) == 1
        body = req(5, constraints=[{"type": "affinity", "level": level}], group="b")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 409, r.text
    run(tmp_path, scenario)


def test_a_zone_level_rule_at_a_zone_without_children(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("dfw")
        r = await c.post("/strato/v1/schedule", json=req(
            2, vcpu=1, group="x", constraints=[{"type": "anti_affinity", "level": "zone"}]))
        assert r.status_code == 409, r.text
        r = await c.post("/strato/v1/schedule", json=req(
            2, vcpu=1, group="y", constraints=[{"type": "affinity", "level": "zone"}]))
        assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(
            2, vcpu=1, group="z",
            constraints=[{"type": "anti_affinity", "level": "zone", "hard": False}]))
        assert r.status_code == 200, r.text
        assert [x["rule"] for x in r.json()["relaxed"]] == ["anti_affinity z@zone"]
    run(tmp_path, scenario)


def test_domains_of_children() -> None:
    def kid(name: str, prefix: str | None) -> Child:
        return Child(name, "http://x", prefix, (), None)
    assert split.domain(kid("a", "dfw"), "site") == "dfw"
    assert split.domain(kid("a", "dfw"), "room") is None
    assert split.domain(kid("a", "dfw/r1"), "room") == "dfw/r1"
    assert split.domain(kid("a", None), "site") is None
    assert split.domain(kid("a", None), "zone") == "a"
    assert split.domain(kid("a", "dfw"), "nonsense") is None


MID_ZONES = [ZoneSpec("global"), ZoneSpec("s1", parent="global", location_prefix="s1"),
             ZoneSpec("c1", parent="s1", location_prefix="s1/room1"),
             ZoneSpec("c2", parent="s1", location_prefix="s1/room2"),
             ZoneSpec("s2", parent="global", location_prefix="s2"),
             ZoneSpec("c3", parent="s2", location_prefix="s2/room1")]


def test_a_group_member_in_another_cell_of_the_same_site_is_respected(tmp_path: Path
                                                                       ) -> None:
    """Site s1 has two cells: a member in c1 rules out c2 as well, for later
    requests that join the group, and one at a time per group (concurrent
    joins never put two members in one site)."""
    async def scenario(tree: InProcessTree) -> None:
        await zt(tree, "s1").refresh(fresh=True)
        await zt(tree, "s2").refresh(fresh=True)
        await zt(tree, "global").refresh(fresh=True)
        rule = [{"type": "anti_affinity", "level": "site"}]
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="g",
                                                          constraints=rule))
        assert r.status_code == 200, r.text
        first_site = r.json()["placements"][0]["zone"].split("/")[1]
        members = (await c.get("/strato/v1/groups/g")).json()
        assert [m["location"].split("/")[0] for m in members["members"]] == [first_site]
        assert members["unreachable"] == []
        # The second member goes to the other site, whichever cell is freer.
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="g",
                                                          constraints=rule))
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"].split("/")[1] != first_site
        # A third has no site left: refused, also when asked of s1 directly.
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="g",
                                                          constraints=rule))
        assert r.status_code == 409, r.text
        r = await tree.client("s1").post("/strato/v1/schedule", json=req(
            1, vcpu=1, group="g", constraints=rule))
        assert r.status_code == 409, r.text
        # Concurrent joins of a new group: at most one member per site.
        got = await asyncio.gather(*(c.post("/strato/v1/schedule", json=req(
            1, vcpu=1, group="h", constraints=rule)) for _ in range(5)))
        placed = [g.json()["placements"][0] for g in got if g.status_code == 200]
        sites = [p["location"].split("/")[0] for p in placed]
        assert len(sites) == len(set(sites)) == 2, [g.text for g in got]
        # Released members free their site again.
        gone = placed[0]["consumer_uuid"]
        owner = placed[0]["zone"].split("/")[-1]
        r = await tree.client(owner).delete(f"/allocations/{gone}")
        assert r.status_code == 204, r.text
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="h",
                                                          constraints=rule))
        assert r.status_code == 200, r.text
    run(tmp_path, scenario, zones=MID_ZONES)


def test_unknown_members_are_an_outage_not_a_refusal(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await zt(tree, "global").refresh(fresh=True)
        rule = [{"type": "anti_affinity", "level": "site"}]
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="g",
                                                          constraints=rule))
        assert r.status_code == 200, r.text
        tree.kill("c1")
        tree.kill("c3")
        r = await c.post("/strato/v1/schedule", json=req(1, vcpu=1, group="g",
                                                          constraints=rule))
        # c2 is up, but where g's members in s1 (c1) and s2 (c3) are is unknown.
        assert r.status_code == 503, r.text
    run(tmp_path, scenario, zones=MID_ZONES)


def test_group_names_are_checked(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("global").get("/strato/v1/groups/" + "x" * 300)
        assert r.status_code == 400, r.text
        r = await tree.client("global").get("/strato/v1/groups/nobody")
        assert r.status_code == 200 and r.json()["members"] == []
    run(tmp_path, scenario)


FOUR_CELLS = [ZoneSpec("global"), *(ZoneSpec(f"c{i}", parent="global", location_prefix=f"s{i}")
                                    for i in range(4))]


def test_topology_spread_across_cells(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        # Eight over four cells (sites), skew 1: two each.
        r = await c.post("/strato/v1/schedule", json=req(
            8, vcpu=1, constraints=[{"type": "spread", "level": "site"}]))
        assert r.status_code == 200, r.text
        assert sorted(cells(r.json()).values()) == [2, 2, 2, 2]
        # At most one per zone: five cannot fit four zones.
        r = await c.post("/strato/v1/schedule", json=req(
            5, vcpu=1, constraints=[{"type": "spread", "level": "zone",
                                     "max_per_domain": 1}]))
        assert r.status_code == 409, r.text
        # A group's earlier members count: two then two more, at most one per site.
        for _ in range(2):
            r = await c.post("/strato/v1/schedule", json=req(
                2, vcpu=1, group="web", constraints=[{"type": "spread", "level": "site",
                                                      "max_per_domain": 1}]))
            assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(
            1, vcpu=1, group="web", constraints=[{"type": "spread", "level": "site",
                                                  "max_per_domain": 1}]))
        assert r.status_code == 409, r.text
        members = (await c.get("/strato/v1/groups/web")).json()["members"]
        assert sorted(m["location"].split("/")[0] for m in members) == ["s0", "s1", "s2", "s3"]
    run(tmp_path, scenario, zones=FOUR_CELLS, hosts=2)


# -- this zone's own providers as one more share -----------------------------------------

def own_used(tree: InProcessTree, zone: str = "global") -> int:
    """VCPU used on `zone`'s own providers (not its children's)."""
    return int(zt(tree, zone).local.summary()["classes"]["VCPU"]["used"])


def with_own_hosts(scenario: Callable[[InProcessTree], Awaitable[None]]
                   ) -> Callable[[InProcessTree], Awaitable[None]]:
    """The root gets two 8-VCPU hosts of its own (its cells have two each)."""
    async def wrapped(tree: InProcessTree) -> None:
        for i in range(2):
            await host(tree.client("global"), f"global-h{i}", f"global/room1/rack0/g{i}")
        await zt(tree, "global").refresh(fresh=True)
        await scenario(tree)
    return wrapped


def test_a_gang_takes_this_zones_own_hosts_and_its_cells_together(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = zt(tree, "global")
        # Held shares must be confirmed to outlive this (long enough for a
        # slow machine to hold and confirm: 0.5 s was not, once).
        root.config.hold_ttl = 2.0
        body = req(6)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        zones = Counter(p["zone"].split("/")[1] if "/" in p["zone"] else "here"
                        for p in answer["placements"])
        assert zones == {"here": 2, "dfw": 2, "ord": 2}, answer["placements"]
        await asyncio.sleep(2.3)
        for name in ("global", "dfw", "ord"):
            await zt(tree, name).recover()
        assert own_used(tree) == 16
        assert await used(tree, "dfw") + await used(tree, "ord") == 32
        found = (await consumers_at(tree, "dfw") | await consumers_at(tree, "ord")
                 | {p["consumer_uuid"] for p in answer["placements"] if "/" not in p["zone"]})
        assert found == set(body["consumers"])
        # A seventh whole host is nowhere: the refusal counts this zone's own.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(2))
        assert r.status_code == 409, r.text
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_a_gang_larger_than_own_hosts_and_cells_says_what_each_could_take(tmp_path: Path
                                                                          ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("global").post("/strato/v1/schedule", json=req(7))
        assert r.status_code == 409, r.text
        assert "could take 6 of 7" in r.text and "own providers: 2" in r.text, r.text
        assert own_used(tree) == 0
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_a_gang_whose_cell_fails_releases_this_zones_own_share(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = zt(tree, "global")
        real_ask = root.ask

        async def ask(child: Child, r: ScheduleRequest, attempt: Any, share: float = 1.0
                      ) -> Any:
            if child.name == "ord" and not r.dry_run and r.hold_ttl is not None:
                tree.kill("ord")
            return await real_ask(child, r, attempt, share)
        root.ask = ask  # type: ignore[method-assign,assignment]
        r = await tree.client("global").post("/strato/v1/schedule", json=req(6))
        assert r.status_code in (409, 503), r.text
        assert own_used(tree) == 0
        assert await used(tree, "dfw") == 0
        tree.revive("ord")
        await root.reconcile()
        assert await used(tree, "ord") == 0
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_a_cancel_undoes_the_share_on_this_zones_own_hosts(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6, request_id="own-gang")
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        r = await tree.client("global").post("/strato/v1/requests/cancel",
                                             json={"request_id": "own-gang"})
        assert r.status_code == 200, r.text
        assert own_used(tree) == 0
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_atomic_false_fills_own_hosts_and_cells(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # One cell first takes what it can; the rest goes to the other cell and here.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(1))
        assert r.status_code == 200, r.text
        body = req(7, atomic=False)
        r = await tree.client("global").post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert len(answer["placements"]) == 5 and len(answer["unplaced"]) == 2
        assert own_used(tree) + await used(tree, "dfw") + await used(tree, "ord") == 48
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_concurrent_duplicates_of_a_gang_over_own_hosts_place_it_once(tmp_path: Path
                                                                      ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        body = req(6, request_id="dup-own")
        got = await asyncio.gather(*(tree.client("global").post("/strato/v1/schedule",
                                                                json=body)
                                     for _ in range(4)))
        assert all(g.status_code in (200, 409) for g in got), [g.text for g in got]
        ok = [g.json() for g in got if g.status_code == 200]
        assert ok and all(sorted(map(str, a["placements"])) == sorted(
            map(str, ok[0]["placements"])) for a in ok)
        assert own_used(tree) == 16
        assert await used(tree, "dfw") + await used(tree, "ord") == 32
    run(tmp_path, with_own_hosts(scenario), hosts=2)


# -- rules at a level above cells that are one room each ----------------------------------

ROOMS = [ZoneSpec("global"), ZoneSpec("dfw", parent="global", location_prefix="dfw"),
         ZoneSpec("dfw-r1", parent="dfw", location_prefix="dfw/room1"),
         ZoneSpec("dfw-r2", parent="dfw", location_prefix="dfw/room2")]


def in_rooms(scenario: Callable[[InProcessTree], Awaitable[None]]
             ) -> Callable[[InProcessTree], Awaitable[None]]:
    """Two 8-VCPU hosts in each room cell, one per rack."""
    async def wrapped(tree: InProcessTree) -> None:
        for cell in ("dfw-r1", "dfw-r2"):
            prefix = tree.specs[cell].location_prefix
            for i in range(2):
                await host(tree.client(cell), f"{cell}-h{i}", f"{prefix}/rack{i}/{cell}-h{i}")
        for z in ("dfw", "global"):
            await zt(tree, z).refresh(fresh=True)
        await scenario(tree)
    return wrapped


def rooms(answer: dict[str, Any]) -> Counter[str]:
    return Counter(p["location"].split("/")[1] for p in answer["placements"])


def test_soft_anti_affinity_at_the_room_level_is_relaxed_across_room_cells(tmp_path: Path
                                                                           ) -> None:
    """Each cell is one room: three instances under a soft room rule go two
    and one, with the rule reported relaxed (it was refused as if hard)."""
    async def scenario(tree: InProcessTree) -> None:
        rule = {"type": "anti_affinity", "level": "room", "hard": False}
        for zone in ("dfw", "global"):
            for dry in (True, False):
                body = req(3, vcpu=2, group=f"web-{zone}-{dry}", constraints=[rule],
                           dry_run=dry)
                r = await tree.client(zone).post("/strato/v1/schedule", json=body)
                assert r.status_code == 200, r.text
                answer = r.json()
                assert sorted(rooms(answer).values()) == [1, 2], answer["placements"]
                assert [x["rule"] for x in answer["relaxed"]] == [
                    f"anti_affinity web-{zone}-{dry}@room"], answer["relaxed"]
        # Two fit one per room: nothing relaxed.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            2, vcpu=2, group="two", constraints=[rule]))
        assert r.status_code == 200, r.text
        assert rooms(r.json()) == {"room1": 1, "room2": 1} and r.json()["relaxed"] == []
    run(tmp_path, in_rooms(scenario), zones=ROOMS, hosts=0)


def test_affinity_to_a_group_already_in_two_room_cells(tmp_path: Path) -> None:
    """The members are in both rooms: hard affinity (every member in one
    room) cannot hold, at the root or at dfw; soft is placed and relaxed, as
    in one zone (tests/zone/test_scheduler.py)."""
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            2, vcpu=1, group="web4", constraints=[{"type": "anti_affinity", "level": "room"}]))
        assert r.status_code == 200, r.text
        assert rooms(r.json()) == {"room1": 1, "room2": 1}
        for zone in ("global", "dfw"):
            await affinity_to_a_split_group_is_refused(tree.client(zone))
        for zone in ("global", "dfw"):
            r = await tree.client(zone).post("/strato/v1/schedule", json=req(
                3, vcpu=1, group="web4",
                constraints=[{"type": "affinity", "level": "room", "hard": False}]))
            assert r.status_code == 200, r.text
            assert len(r.json()["placements"]) == 3
            assert [x["rule"] for x in r.json()["relaxed"]] == ["affinity web4@room"]
        # Nothing of the refusals is remembered against a cell: a plain request
        # of the same shape is placed.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(3, vcpu=1))
        assert r.status_code == 200, r.text
    run(tmp_path, in_rooms(scenario), zones=ROOMS, hosts=0)


def test_soft_rules_above_the_cells_steer_a_single_instance(tmp_path: Path) -> None:
    """One instance at a time: a soft anti-affinity sends each to the site
    without a member while there is one (then relaxed, said so); a soft
    affinity follows the members; a soft spread goes to the emptiest site."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")

        async def one(group: str, rule: dict[str, Any], vcpu: int = 1) -> dict[str, Any]:
            r = await root.post("/strato/v1/schedule", json=req(
                1, vcpu=vcpu, group=group, constraints=[{**rule, "hard": False}]))
            assert r.status_code == 200, r.text
            return dict(r.json())

        anti = {"type": "anti_affinity", "level": "site"}
        first = await one("web", anti)
        second = await one("web", anti)
        assert {*cells(first), *cells(second)} == {"dfw", "ord"}
        assert first["relaxed"] == second["relaxed"] == []
        third = await one("web", anti)
        assert [x["rule"] for x in third["relaxed"]] == ["anti_affinity web@site"]
        # Affinity: wherever the first went, the next five follow.
        lead = cells(await one("db", {"type": "affinity", "level": "site"}))
        for _ in range(5):
            got = await one("db", {"type": "affinity", "level": "site"})
            assert cells(got) == lead and got["relaxed"] == []
        # Spread: each next instance to the site with fewer members.
        seen: Counter[str] = Counter()
        for _ in range(6):
            seen += cells(await one("api", {"type": "spread", "level": "site"}))
        assert seen == {"dfw": 3, "ord": 3}
    run(tmp_path, scenario)


def test_an_atomic_false_dry_run_uses_this_zones_own_hosts_once(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # Six whole hosts in all (two here, two in each cell): a dry run of
        # eight places six, as the real request does, and never one host
        # twice (the rest asked of the children went back to the own hosts a
        # dry run had not filled, and a parent dividing a gang believed it).
        for body in (req(8, atomic=False, dry_run=True), req(8, atomic=False)):
            r = await tree.client("global").post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            hosts = Counter(p["provider"] for p in answer["placements"])
            assert max(hosts.values()) == 1, answer["placements"]
            assert len(answer["placements"]) == 6 and len(answer["unplaced"]) == 2
    run(tmp_path, with_own_hosts(scenario), hosts=2)


@pytest.mark.parametrize("hard", [True, False])
def test_affinity_below_the_cells_is_not_broken_by_dividing(tmp_path: Path, hard: bool
                                                            ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # Each cell has two hosts in two racks: no rack takes two whole hosts.
        # Dividing the request among the cells put one in each (two racks)
        # and called the hard rule kept.
        rule = {"type": "affinity", "level": "rack", "hard": hard}
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(2, group="g", constraints=[rule]))
        if hard:
            assert r.status_code == 409, r.text
            assert "affinity g@rack" in r.json()["errors"][0]["detail"], r.text
            assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
            r = await c.post("/strato/v1/schedule", json=req(
                2, group="g", constraints=[rule], atomic=False))
            assert r.status_code == 200, r.text
            assert len(r.json()["placements"]) == 1 and len(r.json()["unplaced"]) == 1
        else:
            assert r.status_code == 200, r.text
            assert [x["rule"] for x in r.json()["relaxed"]] == ["affinity g@rack"], r.text
    run(tmp_path, scenario, hosts=2)


def test_hard_affinity_above_the_cells_keeps_this_zones_own_hosts_out_of_it(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # The group's first member is in dfw: a member joining it under a
        # hard site affinity goes to dfw, never to this zone's own hosts
        # (site 'global'), whose planner sees no member and allowed any site.
        c = tree.client("global")
        first = req(1, 1, group="a", constraints=[
            {"type": "location", "pattern": "dfw/room1/rack0"}])
        r = await c.post("/strato/v1/schedule", json=first)
        assert r.status_code == 200, r.text
        for _ in range(3):
            r = await c.post("/strato/v1/schedule", json=req(1, 1, group="a", constraints=[
                {"type": "affinity", "level": "site"}]))
            assert r.status_code == 200, r.text
            assert [p["zone"] for p in r.json()["placements"]] == ["global/dfw"], r.text
        assert own_used(tree) == 0
        # Members in two sites: a hard affinity is refused, own hosts included.
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="a", constraints=[
            {"type": "location", "pattern": "ord/room1/rack0"}]))
        assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="a", constraints=[
            {"type": "affinity", "level": "site"}]))
        assert r.status_code == 409, r.text
        assert own_used(tree) == 0
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_rules_at_level_zone_reach_this_zones_own_hosts_as_one_zone(tmp_path: Path
                                                                  ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        # Level `zone` is valid at a zone with children; its own providers
        # (one zone of the rule) were asked with the rule as it was and
        # answered 400 "unknown level 'zone'".
        c = tree.client("global")
        here = {"type": "location", "pattern": "global"}
        for rule in ({"type": "affinity", "level": "zone"},
                     {"type": "spread", "level": "zone"}):
            r = await c.post("/strato/v1/schedule", json=req(1, 1, group="z1",
                                                             constraints=[rule, here]))
            assert r.status_code == 200, r.text
            assert [p["zone"] for p in r.json()["placements"]] == ["global"], r.text
        # A member here: a hard anti-affinity at level zone keeps the next one out.
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="z2", constraints=[here]))
        assert r.status_code == 200, r.text
        anti = {"type": "anti_affinity", "level": "zone"}
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="z2", constraints=[anti]))
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"] in ("global/dfw", "global/ord"), r.text
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="z2",
                                                         constraints=[anti, here]))
        assert r.status_code == 409, r.text
    run(tmp_path, with_own_hosts(scenario), hosts=2)


def test_a_refusal_by_a_hard_rule_above_the_cells_names_the_rule(tmp_path: Path) -> None:
    """As a zone without children names the rule its instances cannot keep
    together (its explain's `cause`), the root does: each cell's own count is
    under the rule already (one site takes one instance of a site
    anti-affinity), so "could take 2 of 3" alone hid why."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        cases = [
            (req(3, 1, group="db", constraints=[{"type": "anti_affinity", "level": "site"}]),
             "anti_affinity db@site: 3 instances need 3 sites apart, and the children that "
             "could take one are in 2 site(s)"),
            (req(3, 1, constraints=[{"type": "spread", "level": "site", "max_per_domain": 1}]),
             "spread @site: at most 1 per site, and the 2 site(s) the children that could "
             "take one are in take 2 more"),
            (req(5, group="web", constraints=[{"type": "affinity", "level": "site"}]),
             "affinity web@site: no single site among the 2 the children that could take "
             "one are in has room for all 5 instances"),
        ]
        for body, cause in cases:
            for dry in (False, True):
                r = await c.post("/strato/v1/schedule", json={**body, "dry_run": dry})
                assert r.status_code == 409, r.text
                assert r.json()["errors"][0]["detail"].startswith(
                    f"no valid placement for {len(body['consumers'])} consumer(s) under zone "
                    f"global: {cause}"), r.text
                assert r.json()["explain"]["cause"] == cause, r.text
            r = await c.post("/strato/v1/explain", json=body)
            assert r.status_code == 200 and r.json()["placements"] == [], r.text
            assert r.json()["explain"]["cause"] == cause, r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, scenario, hosts=2)


def test_rules_about_another_group_do_not_keep_the_requests_instances_apart_or_together(
        tmp_path: Path) -> None:
    """An affinity or anti-affinity rule naming a group the request does not
    join is about that group's members only, as in one zone: the new
    instances may share a site (anti-affinity) or be in several (affinity).
    The root capped them at one per site (refused three over two sites) and
    kept them in one site."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        # Affinity to a group without members: anywhere, not in one site (no
        # site has three whole hosts).
        r = await c.post("/strato/v1/schedule", json=req(3, group="web2", dry_run=True,
                                                         constraints=[
            {"type": "affinity", "level": "site", "group": "nobody"}]))
        assert r.status_code == 200, r.text
        assert sorted(cells(r.json()).values()) == [1, 2], r.text
        anti = {"type": "anti_affinity", "level": "site", "group": "db"}
        for group in ("web", None):
            body = req(3, 1, constraints=[anti], **({"group": group} if group else {}))
            r = await c.post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
        # db's member in ord: a hard rule keeps the next three out of ord.
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="db", constraints=[
            {"type": "location", "pattern": "ord/*"}]))
        assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(3, 1, group="web", constraints=[anti]))
        assert r.status_code == 200, r.text
        assert cells(r.json()) == {"dfw": 3} and r.json()["relaxed"] == [], r.text
        # Level zone at a zone without children: one zone, and the instances
        # need not be apart.
        r = await tree.client("dfw").post("/strato/v1/schedule", json=req(
            2, 1, group="web3", constraints=[
                {"type": "anti_affinity", "level": "zone", "group": "db"}]))
        assert r.status_code == 200, r.text
    run(tmp_path, scenario, hosts=2)


# -- a mid zone: hosts of its own in a room beside its cells' rooms ------------------------

MID = [*ROOMS, ZoneSpec("ord", parent="global", location_prefix="ord")]


def with_a_mid_zone(scenario: Callable[[InProcessTree], Awaitable[None]]
                    ) -> Callable[[InProcessTree], Awaitable[None]]:
    """dfw has two 16-VCPU hosts of its own in dfw/room0 (one per rack) and
    two cells, one room each, of two 8-VCPU hosts; ord has two."""
    async def wrapped(tree: InProcessTree) -> None:
        for i in range(2):
            await host(tree.client("dfw"), f"dfw-own{i}", f"dfw/room0/rack{i}/own{i}", vcpu=16)
        for cell in ("dfw-r1", "dfw-r2", "ord"):
            prefix = tree.specs[cell].location_prefix
            loc = prefix if "room" in str(prefix) else f"{prefix}/room1"
            for i in range(2):
                await host(tree.client(cell), f"{cell}-h{i}", f"{loc}/rack{i}/{cell}-h{i}")
        for z in ("dfw", "global"):
            await zt(tree, z).refresh(fresh=True)
        await scenario(tree)
    return wrapped


def test_a_mid_zones_own_hosts_are_one_more_room_of_a_room_rule(tmp_path: Path) -> None:
    """At dfw a room rule is above its cells (one room each); its own hosts,
    all in room0, are one more room, as in one zone with the same hosts: they
    were left out of a divided request (three rooms apart refused) and their
    members not steered from by a soft rule."""
    async def scenario(tree: InProcessTree) -> None:
        anti = {"type": "anti_affinity", "level": "room"}
        dfw_only = {"type": "location", "pattern": "dfw/*"}
        for zone in ("dfw", "global"):
            body = req(3, 1, group=f"a-{zone}", constraints=[anti, dfw_only])
            r = await tree.client(zone).post("/strato/v1/schedule",
                                             json={**body, "dry_run": True})
            assert r.status_code == 200, r.text
            r = await tree.client(zone).post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            assert rooms(r.json()) == {"room0": 1, "room1": 1, "room2": 1}, r.text
            # Every room holds one: a fourth is refused, the rule named.
            r = await tree.client(zone).post("/strato/v1/schedule", json=req(
                1, 1, group=f"a-{zone}", constraints=[anti, dfw_only]))
            assert r.status_code == 409, r.text
            assert "anti_affinity" in r.json()["errors"][0]["detail"], r.text
        assert own_used(tree, "dfw") == 2
        # The spread rule's cap, likewise.
        r = await tree.client("dfw").post("/strato/v1/schedule", json=req(3, 1, constraints=[
            {"type": "spread", "level": "room", "max_per_domain": 1}]))
        assert r.status_code == 200, r.text
        assert rooms(r.json()) == {"room0": 1, "room1": 1, "room2": 1}, r.text
        # A member in room0 (own hosts, the roomiest): a soft room rule sends
        # the next one to a cell's room, kept, not to room0 and relaxed.
        r = await tree.client("dfw").post("/strato/v1/schedule", json=req(
            1, 1, group="s", constraints=[{"type": "location", "pattern": "dfw/room0/*"}]))
        assert r.status_code == 200, r.text
        for zone in ("dfw", "global"):
            r = await tree.client(zone).post("/strato/v1/schedule", json=req(
                1, 1, group="s", dry_run=True, constraints=[{**anti, "hard": False}, dfw_only]))
            assert r.status_code == 200, r.text
            assert r.json()["relaxed"] == [] and rooms(r.json()) != {"room0": 1}, r.text
    run(tmp_path, with_a_mid_zone(scenario), zones=MID, hosts=0)


def test_affinity_below_the_cells_follows_the_members_to_their_cell(tmp_path: Path) -> None:
    """A room or rack is below the root's cells (each a site): each cell keeps
    such a rule only with the members it holds. The group's member is in ord:
    the root sent the next ones to dfw (the roomier cell), whose planner saw
    no member and allowed any room, so a hard affinity was broken."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[
            {"type": "location", "pattern": "ord/room1/rack1/*"}]))
        assert r.status_code == 200, r.text
        for level in ("room", "rack"):
            for hard in (True, False):
                for n in (1, 2):
                    # (Dry runs: the member stays alone in its rack.)
                    r = await c.post("/strato/v1/schedule", json=req(
                        n, 1, group="g", dry_run=True, constraints=[
                            {"type": "affinity", "level": level, "hard": hard}]))
                    assert r.status_code == 200, r.text
                    assert cells(r.json()) == {"ord": n}, r.text
                    assert r.json()["relaxed"] == [], r.text
                    if level == "rack":
                        assert {p["location"].split("/")[2] for p in r.json()["placements"]
                                } == {"rack1"}, r.text
        # Affinity to another group follows its members too.
        r = await c.post("/strato/v1/schedule", json=req(2, 1, group="h", constraints=[
            {"type": "affinity", "level": "room", "group": "g"}]))
        assert r.status_code == 200, r.text
        assert cells(r.json()) == {"ord": 2}, r.text
        # A member in dfw too: two rooms. Every member in one room cannot hold.
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[
            {"type": "location", "pattern": "dfw/*"}]))
        assert r.status_code == 200, r.text
        rule = {"type": "affinity", "level": "room"}
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[rule]))
        assert r.status_code == 409, r.text
        assert "affinity g@room: members already in 2 zones" in r.text, r.text
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[
            {**rule, "hard": False}]))
        assert r.status_code == 200, r.text
        assert [x["rule"] for x in r.json()["relaxed"]] == ["affinity g@room"], r.text
    run(tmp_path, scenario, hosts=2)


def test_soft_rules_above_the_cells_steer_several_instances_placed_whole(tmp_path: Path
                                                                          ) -> None:
    """Several instances one cell takes whole go where the soft rules about
    the members are kept (as one instance does, and as one zone does): the
    root sent them to the roomiest cell, which broke a soft affinity without
    a word (it saw no member) or relaxed an anti-affinity to another group."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")

        async def place(body: dict[str, Any]) -> dict[str, Any]:
            r = await c.post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            return dict(r.json())
        dfw, ord_ = ({"type": "location", "pattern": f"{s}/*"} for s in ("dfw", "ord"))
        await place(req(2, 6, constraints=[dfw]))  # dfw: 2 VCPU free a host
        await place(req(1, 1, group="db", constraints=[ord_]))
        got = await place(req(2, 1, group="web", dry_run=True, constraints=[
            {"type": "anti_affinity", "level": "site", "group": "db", "hard": False}]))
        assert cells(got) == {"dfw": 2} and got["relaxed"] == [], got
        await place(req(1, 1, group="s", constraints=[dfw]))
        rule = {"type": "affinity", "level": "site", "hard": False}
        got = await place(req(2, 1, group="s", dry_run=True, constraints=[rule]))
        assert cells(got) == {"dfw": 2} and got["relaxed"] == [], got
        # More than dfw has room for: placed, the rule said relaxed.
        got = await place(req(4, 1, group="s", dry_run=True, constraints=[rule]))
        assert len(got["placements"]) == 4, got
        assert [x["rule"] for x in got["relaxed"]] == ["affinity s@site"], got
    run(tmp_path, scenario, hosts=2)


def test_a_soft_anti_affinity_below_the_cells_is_kept_when_a_division_keeps_it(
        tmp_path: Path) -> None:
    """Soft rules are enforced as hard ones first (one zone does so): three
    instances on three hosts apart fit over two cells of two hosts. The root
    gave them whole to one cell, which relaxed the rule on its two hosts."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        for level in ("host", "rack"):
            for dry in (True, False):
                rule = {"type": "anti_affinity", "level": level, "hard": False}
                r = await c.post("/strato/v1/schedule", json=req(
                    3, 1, group=f"w-{level}-{dry}", dry_run=dry, constraints=[rule]))
                assert r.status_code == 200, r.text
                answer = r.json()
                assert answer["relaxed"] == [], answer
                assert len({p["provider"] for p in answer["placements"]}) == 3, answer
        # Five cannot be apart on four hosts: placed, the rule relaxed.
        r = await c.post("/strato/v1/schedule", json=req(5, 1, group="w5", constraints=[
            {"type": "anti_affinity", "level": "host", "hard": False}]))
        assert r.status_code == 200, r.text
        assert [x["rule"] for x in r.json()["relaxed"]] == ["anti_affinity w5@host"], r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 3 + 3 + 5
    run(tmp_path, scenario, hosts=2)


def test_soft_location_and_tags_rules_go_first_to_the_cells_that_can_keep_them(
        tmp_path: Path) -> None:
    """One zone tries its perfect matches first; the root asked the roomiest
    cell (dfw), which relaxed a soft rule that only ord's hosts keep."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(1, 1, constraints=[
            {"type": "location", "pattern": "ord/*"}]))
        assert r.status_code == 200, r.text  # ord is the fuller cell now
        rps = (await tree.client("ord").get("/resource_providers")).json()
        h0 = next(rp["uuid"] for rp in rps["resource_providers"] if rp["name"] == "ord-h0")
        r = await tree.client("ord").put(f"/strato/v1/providers/{h0}/meta", json={
            "location": "ord/room1/rack0/ord-h0", "tags": ["hipaa"]})
        assert r.status_code == 200, r.text
        await zt(tree, "global").refresh(fresh=True)
        for rule, host in (({"type": "location", "pattern": "ord/*"}, None),
                           ({"type": "location", "pattern": "ord-h1.rack1.room1.ord"},
                            "ord/room1/rack1/ord-h1"),
                           ({"type": "tags", "required": ["hipaa"]}, "ord/room1/rack0/ord-h0")):
            for n in (1, 2):
                r = await c.post("/strato/v1/schedule", json=req(
                    n, 1, dry_run=True, constraints=[{**rule, "hard": False}]))
                assert r.status_code == 200, r.text
                assert cells(r.json()) == {"ord": n} and r.json()["relaxed"] == [], r.text
                if host:
                    assert {p["location"] for p in r.json()["placements"]} == {host}, r.text
    run(tmp_path, scenario, hosts=2)


def test_a_hard_affinity_whose_members_cannot_be_read_is_an_outage(tmp_path: Path) -> None:
    """docs/schedule.md: "If a child that may hold members does not answer, a
    request with a hard rule gets 503". The group's only member is in ord,
    which is down: a hard affinity (above the cells or below) was placed in
    dfw, as if the group had no member."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[
            {"type": "location", "pattern": "ord/*"}]))
        assert r.status_code == 200, r.text
        tree.kill("ord")
        for level in ("site", "room"):
            for n in (1, 2):
                for dry in (True, False):
                    r = await c.post("/strato/v1/schedule", json=req(
                        n, 1, group="g", dry_run=dry,
                        constraints=[{"type": "affinity", "level": level}]))
                    assert r.status_code == 503, r.text
        assert await used(tree, "dfw") == 0
        # A soft one goes on without them.
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[
            {"type": "affinity", "level": "site", "hard": False}]))
        assert r.status_code == 200 and cells(r.json()) == {"dfw": 1}, r.text
        tree.revive("ord")
        await zt(tree, "global").refresh(fresh=True)
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="h", constraints=[
            {"type": "location", "pattern": "ord/*"}]))
        assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="h", constraints=[
            {"type": "affinity", "level": "room"}]))
        assert r.status_code == 200 and cells(r.json()) == {"ord": 1}, r.text
    run(tmp_path, scenario, hosts=2)


# -- children without a location prefix -------------------------------------------------

ANYWHERE = [ZoneSpec("global"), ZoneSpec("a", parent="global"), ZoneSpec("b", parent="global")]


def in_both_sites(scenario: Callable[[InProcessTree], Awaitable[None]]
                  ) -> Callable[[InProcessTree], Awaitable[None]]:
    """Cells a and b, no location prefix, each with a host in dfw and one in ord."""
    async def wrapped(tree: InProcessTree) -> None:
        for cell, room in (("a", "room1"), ("b", "room2")):
            for site in ("dfw", "ord"):
                await host(tree.client(cell), f"{cell}-{site}", f"{site}/{room}/rack0/{cell}")
        await zt(tree, "global").refresh(fresh=True)
        await scenario(tree)
    return wrapped


def test_a_hard_anti_affinity_holds_across_cells_that_may_share_a_site(tmp_path: Path
                                                                       ) -> None:
    """Each cell keeps a site anti-affinity only with the members it holds, and
    both have hosts in both sites: the third member went to the other cell,
    into a site the group already had (one zone refuses it)."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        anti = {"type": "anti_affinity", "level": "site"}
        sites = []
        for _ in range(2):
            r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[anti]))
            assert r.status_code == 200, r.text
            sites += [p["location"].split("/")[0] for p in r.json()["placements"]]
        assert sorted(sites) == ["dfw", "ord"]
        r = await c.post("/strato/v1/schedule", json=req(1, 1, group="g", constraints=[anti]))
        assert r.status_code == 409, r.text
        assert "group g has a member in site" in r.text, r.text
        # ord full: two at once fit only in dfw, one a cell. Not divided (each
        # share keeps the rule only within itself: both took dfw).
        for room in ("room1", "room2"):
            r = await c.post("/strato/v1/schedule", json=req(1, 7, constraints=[
                {"type": "location", "pattern": f"ord/{room}/*"}]))
            assert r.status_code == 200, r.text
        r = await c.post("/strato/v1/schedule", json=req(2, 2, group="h", constraints=[anti]))
        assert r.status_code == 409, r.text
        assert "anti_affinity h@site" in r.text, r.text
    run(tmp_path, in_both_sites(scenario), zones=ANYWHERE, hosts=0)


def test_a_spread_cap_above_the_cells_takes_as_many_as_it_allows(tmp_path: Path) -> None:
    """max_per_domain 2 at the site level, two sites: four instances fit, as in
    one zone. Each instance was counted twice against the cap (once as capped,
    once as spread evenly), so the root took one a site and refused four."""
    async def scenario(tree: InProcessTree) -> None:
        rule = {"type": "spread", "level": "site", "max_per_domain": 2}
        for dry in (True, False):
            r = await tree.client("global").post("/strato/v1/schedule", json=req(
                4, 1, dry_run=dry, constraints=[rule]))
            assert r.status_code == 200, r.text
            assert cells(r.json()) == {"dfw": 2, "ord": 2}, r.text
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            5, 1, atomic=False, constraints=[rule]))
        assert r.status_code == 200, r.text
        assert cells(r.json()) == {"dfw": 2, "ord": 2} and len(r.json()["unplaced"]) == 1
        # Relaxed, a spread rule without a group is named as one zone names it.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            5, 1, dry_run=True, constraints=[{**rule, "hard": False}]))
        assert r.status_code == 200, r.text
        assert [x["rule"] for x in r.json()["relaxed"]] == ["spread @site"], r.text
    run(tmp_path, scenario, hosts=2)


def test_balance_counts_each_rule_once() -> None:
    kids = [Child(name=n, url=f"inproc://{n}", location_prefix=n, tags=(), credential=None)
            for n in ("dfw", "ord")]
    body = ScheduleRequest.model_validate(req(4, 1, constraints=[
        {"type": "spread", "level": "site", "max_per_domain": 2}]))
    wide = split.wide_rules(body, kids)
    shares, relaxed = split.assign(body, [(kids[0], 4), (kids[1], 4)], wide)
    assert sorted((k.name, c) for k, c in shares) == [("dfw", 2), ("ord", 2)]
    assert relaxed == []


def test_soft_tags_are_kept_in_another_cell_before_they_are_relaxed(tmp_path: Path) -> None:
    """dfw has a hipaa host, but full; ord's is free. One zone with the same
    hosts keeps a soft hipaa rule on ord's; the root asked dfw (it has the
    tag, and sorts first), which relaxed it on its other host."""
    async def scenario(tree: InProcessTree) -> None:
        c = tree.client("global")
        for cell in ("dfw", "ord"):
            rps = (await tree.client(cell).get("/resource_providers")).json()
            h0 = next(rp["uuid"] for rp in rps["resource_providers"]
                      if rp["name"] == f"{cell}-h0")
            r = await tree.client(cell).put(f"/strato/v1/providers/{h0}/meta", json={
                "location": f"{cell}/room1/rack0/{cell}-h0", "tags": ["hipaa"]})
            assert r.status_code == 200, r.text
        for pattern in ("dfw-h0.rack0.room1.dfw", "ord-h1.rack1.room1.ord"):
            r = await c.post("/strato/v1/schedule", json=req(1, 8, constraints=[
                {"type": "location", "pattern": pattern}]))
            assert r.status_code == 200, r.text
        await zt(tree, "global").refresh(fresh=True)
        soft = {"type": "tags", "required": ["hipaa"], "hard": False}
        for n, dry in ((1, True), (2, True), (1, False)):
            r = await c.post("/strato/v1/schedule", json=req(n, 4, dry_run=dry,
                                                             constraints=[soft]))
            assert r.status_code == 200, r.text
            assert r.json()["relaxed"] == [], r.text
            assert {p["location"] for p in r.json()["placements"]} == {
                "ord/room1/rack0/ord-h0"}, r.text
    run(tmp_path, scenario, hosts=2)


def test_a_soft_affinity_its_instances_break_across_zones_is_said_relaxed(tmp_path: Path
                                                                         ) -> None:
    """Five whole 8-VCPU instances in one room (a soft rule): room0 (dfw's own
    hosts) takes four, a cell the fifth. Each zone kept the rule within its
    share and the answer said nothing relaxed (one zone says it)."""
    async def scenario(tree: InProcessTree) -> None:
        rule = {"type": "affinity", "level": "room", "hard": False}
        for dry in (True, False):
            r = await tree.client("dfw").post("/strato/v1/schedule", json=req(
                5, 8, group=f"s{dry}", atomic=False, dry_run=dry, constraints=[rule]))
            assert r.status_code == 200, r.text
            assert len(r.json()["placements"]) == 5, r.text
            assert len(set(rooms(r.json()))) > 1, r.text
            assert [x["rule"] for x in r.json()["relaxed"]] == [f"affinity s{dry}@room"], r.text
    run(tmp_path, with_a_mid_zone(scenario), zones=MID, hosts=0)


def test_a_hard_spread_measures_its_skew_over_every_room_that_could_take_one(
        tmp_path: Path) -> None:
    """Hard affinity and hard spread (skew 1) in rooms: two instances cannot
    keep both, as one zone says. The spread's skew was measured over the room
    the affinity kept only, so dfw placed both in one room."""
    async def scenario(tree: InProcessTree) -> None:
        r = await tree.client("dfw").post("/strato/v1/schedule", json=req(
            2, 1, group="s", dry_run=True, constraints=[
                {"type": "affinity", "level": "room"}, {"type": "spread", "level": "room"}]))
        assert r.status_code == 409, r.text
    run(tmp_path, with_a_mid_zone(scenario), zones=MID, hosts=0)


def test_a_hard_affinity_below_wins_over_a_soft_rule_that_would_divide(tmp_path: Path
                                                                      ) -> None:
    """Two instances on one host (hard) and spread over rooms (soft): one zone
    puts both on a host and relaxes the spread. dfw divided the request for
    the spread, which the hard affinity forbids, and refused it."""
    async def scenario(tree: InProcessTree) -> None:
        for dry in (True, False):
            r = await tree.client("dfw").post("/strato/v1/schedule", json=req(
                2, 4, group=f"s{dry}", dry_run=dry, constraints=[
                    {"type": "affinity", "level": "host"},
                    {"type": "spread", "level": "room", "hard": False}]))
            assert r.status_code == 200, r.text
            assert len({p["provider"] for p in r.json()["placements"]}) == 1, r.text
            assert [x["rule"] for x in r.json()["relaxed"]] == [f"spread s{dry}@room"], r.text
    run(tmp_path, with_a_mid_zone(scenario), zones=MID, hosts=0)


def test_a_divided_dry_run_says_what_the_real_request_relaxes(tmp_path: Path) -> None:
    """At most two a site (soft), four instances: two in each site keep it,
    and the real request says nothing relaxed. The dry run cut each site's
    plan of all four (which relaxed the rule there) to its share of two and
    kept its 'relaxed'."""
    async def scenario(tree: InProcessTree) -> None:
        rule = {"type": "spread", "level": "site", "max_per_domain": 2, "hard": False}
        for dry in (True, False):
            r = await tree.client("global").post("/strato/v1/schedule", json=req(
                4, 1, dry_run=dry, constraints=[rule]))
            assert r.status_code == 200, r.text
            assert cells(r.json()) == {"dfw": 2, "ord": 2}, r.text
            assert r.json()["relaxed"] == [], r.text
    run(tmp_path, scenario, hosts=2)


def hosts_of(answer: dict[str, Any]) -> Counter[str]:
    return Counter(p["location"].rsplit("/", 1)[1] for p in answer["placements"])


def test_a_soft_host_anti_affinity_that_must_give_spreads_as_in_one_zone(tmp_path: Path
                                                                         ) -> None:
    """Two cells of two hosts: eight instances under a soft host anti-affinity
    cannot be kept apart. One zone with the four hosts places two on each; the
    root sent all eight to one cell, four on each of its two hosts. It now
    divides them as the cells' hosts with room are (four and four), dry run
    or not, and each cell spreads its share."""
    async def scenario(tree: InProcessTree) -> None:
        rule = {"type": "anti_affinity", "level": "host", "hard": False}
        for n, most in ((8, 2), (5, 2), (6, 2)):
            for dry in (True, False):
                body = req(n, vcpu=1, group=f"g{n}-{dry}", constraints=[rule], dry_run=dry)
                r = await tree.client("global").post("/strato/v1/schedule", json=body)
                assert r.status_code == 200, r.text
                answer = r.json()
                assert sorted(cells(answer).values()) == [n // 2, n - n // 2], answer
                assert len(hosts_of(answer)) == 4 and max(hosts_of(answer).values()) == most
                assert [x["rule"] for x in answer["relaxed"]] == [
                    f"anti_affinity g{n}-{dry}@host"], answer["relaxed"]
                if not dry:
                    assert (await consumers_at(tree, "dfw") | await consumers_at(tree, "ord")
                            ) >= set(body["consumers"])
                    for c in body["consumers"]:
                        r = await tree.client("global").delete(f"/allocations/{c}")
                        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
        # Kept apart when it can be: four on four hosts, nothing relaxed.
        r = await tree.client("global").post("/strato/v1/schedule", json=req(
            4, vcpu=1, group="four", constraints=[rule]))
        assert r.status_code == 200, r.text
        assert hosts_of(r.json()) == Counter({h: 1 for h in hosts_of(r.json())})
        assert len(hosts_of(r.json())) == 4 and r.json()["relaxed"] == []
    run(tmp_path, scenario, hosts=2)


def test_even_shares() -> None:
    a, b, c = (Child(name=x, url=f"inproc://{x}", location_prefix=None, tags=(),
                     credential=None) for x in "abc")
    # In proportion to the domains with room, within each child's room.
    assert split.even_shares(8, [(a, 8), (b, 8)], {"a": 2, "b": 2}) == [(a, 4), (b, 4)]
    assert split.even_shares(8, [(a, 8), (b, 8)], {"a": 3, "b": 1}) == [(a, 6), (b, 2)]
    assert split.even_shares(8, [(a, 3), (b, 8)], {"a": 2, "b": 2}) == [(a, 3), (b, 5)]
    # A child with no such domain takes only what the others cannot.
    assert split.even_shares(5, [(a, 3), (b, 9), (c, 1)], {"a": 1, "c": 1}) == [
        (a, 3), (c, 1), (b, 1)]
    assert split.even_shares(3, [(a, 1)], {"a": 1}) == [(a, 1)]


def test_a_spread_below_the_cells_is_kept_over_every_cells_domains(tmp_path: Path) -> None:
    """Two cells of two hosts: a host-level spread of four instances went
    whole to one cell, two on each of its hosts (the cell's own skew 0, the
    tree's 2 with the other cell's hosts empty). Instances that outnumber any
    one cell's hosts are now divided as the cells' hosts are: one per host,
    as in one zone with the four hosts, hard or soft, dry run or not. Two
    instances still go to one cell (each on a host of its own)."""
    async def scenario(tree: InProcessTree) -> None:
        for n, hard in ((4, True), (4, False), (3, True), (2, True)):
            for dry in (True, False):
                body = req(n, vcpu=1, dry_run=dry, constraints=[
                    {"type": "spread", "level": "host", "max_skew": 1, "hard": hard}])
                r = await tree.client("global").post("/strato/v1/schedule", json=body)
                assert r.status_code == 200, r.text
                answer = r.json()
                assert sorted(hosts_of(answer).values()) == [1] * n, answer["placements"]
                assert answer["relaxed"] == []
                assert len(cells(answer)) == (1 if n == 2 else 2)
                for c in [] if dry else body["consumers"]:
                    r = await tree.client("global").delete(f"/allocations/{c}")
                    assert r.status_code == 204, r.text
        assert await used(tree, "dfw") == 0 and await used(tree, "ord") == 0
    run(tmp_path, scenario, hosts=2)


def test_a_single_child_that_refuses_is_not_asked_again_as_a_division(tmp_path: Path
                                                                       ) -> None:
    """A chain (global -> dfw -> cell): three instances of a hard rack
    anti-affinity on two racks. Each routing zone divided the request among
    its one child after the child refused it whole, so the refusal said
    "(divided among children)" once per level; the child's reason is the
    answer, said once."""
    zones = [ZoneSpec("global"), ZoneSpec("dfw", parent="global", location_prefix="dfw"),
             ZoneSpec("cell", parent="dfw", location_prefix="dfw")]

    async def scenario(tree: InProcessTree) -> None:
        body = req(3, vcpu=1, group="web",
                   constraints=[{"type": "anti_affinity", "level": "rack"}])
        for zone in ("global", "dfw"):
            r = await tree.client(zone).post("/strato/v1/schedule", json=body)
            assert r.status_code == 409, r.text
            detail = r.json()["errors"][0]["detail"]
            assert "divided among children" not in detail, detail
            assert detail.count("3 instances need 3 racks apart") == 1, detail
        assert await used(tree, "cell") == 0
    run(tmp_path, scenario, zones=zones, hosts=4)
