"""The in-memory targets: Strato's planner without a store, flat and as a zone tree."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from strato.model.schedule import ScheduleRequest
from strato.sim.cluster import ClusterModel, build_hosts
from strato.sim.inprocess import InProcessZone
from strato.sim.invariants import check
from strato.sim.memory import MemoryRouter, MemoryTreeTarget, MemoryZone, demand_of
from strato.sim.runner import run
from strato.sim.scenario import Scenario, parse
from strato.sim.target import Outcome, Target
from strato.sim.workload import SimRequest
from tests.sim.worlds import assert_clean, tiny, tree


class Recording:
    """A target that remembers every answer of the target it wraps."""

    def __init__(self, inner: Target) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: list[tuple[bool, tuple[str, ...], str | None]] = []

    def schedule(self, request: SimRequest) -> Outcome:
        out = self.inner.schedule(request)
        self.seen.append((out.accepted, tuple(p.host for p in out.placements), out.reason))
        return out

    def release(self, consumers: Sequence[str]) -> None:
        self.inner.release(consumers)

    def snapshot_for_invariants(self) -> Any:
        return self.inner.snapshot_for_invariants()

    def close(self) -> None:
        self.inner.close()


def test_memory_zone_decides_as_the_store_backed_zone() -> None:
    """Same planner, same view: the same host for every request, the same refusals."""
    sc = tiny(requests=120, rate=1.0)
    hosts = build_hosts(sc, 3)
    model = ClusterModel(hosts, sc.levels)
    stored = Recording(InProcessZone(hosts, levels=sc.levels))
    memory = Recording(MemoryTreeTarget(hosts, sc, flat=True))
    try:
        a = run(sc, stored, model, seed=3)
        b = run(sc, memory, model, seed=3)
    finally:
        stored.close()
        memory.close()
    assert stored.seen == memory.seen
    assert a.metrics.summary()["rejection_rate"] > 0  # the world is tight enough to refuse
    assert b.summary()["invariant_violations"] == 0


def test_tree_memory_keeps_every_invariant_and_repeats_itself() -> None:
    sc = tree(requests=80, rate=1.0)
    hosts = build_hosts(sc, 1)
    model = ClusterModel(hosts, sc.levels)
    runs = []
    for _ in range(2):
        target = MemoryTreeTarget(hosts, sc)
        try:
            result = run(sc, target, model, seed=1)
            zones = {z.path for z in target.owner.values()}
        finally:
            target.close()
        s = result.summary()
        assert_clean(s)
        assert zones <= {"root/east", "root/west"}
        runs.append({k: s[k] for k in ("accepted", "placements", "rejection_rate", "reasons",
                                        "mean_utilization")})
    assert runs[0] == runs[1]


def _deep() -> Scenario:
    """A root with hosts of its own, a region with two cells, and a tagged cell."""
    inv = {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 32768}, "DISK_GB": 200}
    big = {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}, "DISK_GB": 1000}

    def cell(name: str, site: str, count: int, inventory: dict[str, Any], **extra: Any
             ) -> dict[str, Any]:
        return {"name": name, "site": site, **extra, "providers": [
            {"name": "h", "count": count, "hosts_per_rack": 2, "racks_per_room": 2,
             "inventory": inventory,
             "trait_fractions": {"HW_CPU_X86_AVX512F": 1.0 if inventory is big else 0.0}}]}

    data: dict[str, Any] = {
        "scenario": {"name": "deep"},
        "cluster": {"zone": {
            "name": "root", "site": "root",
            "providers": [{"name": "own", "count": 2, "inventory": inv}],
            "children": [
                {"name": "region", "site": "eu", "children": [
                    cell("c1", "eu", 4, inv), cell("c2", "eu", 3, big)]},
                cell("secure", "us", 3, inv, tags=["hipaa"]),
                cell("c3", "us", 5, inv)]}},
        "workload": {"requests": 1, "shapes": [{"name": "x", "resources": {"VCPU": 1}}]},
    }
    return parse(data)


def _request(rng: random.Random) -> ScheduleRequest:
    resources = {"VCPU": rng.choice([1, 4, 16, 48, 64]),
                 "MEMORY_MB": rng.choice([1024, 16384, 65536])}
    if rng.random() < 0.3:
        resources["DISK_GB"] = rng.choice([10, 500])
    group: dict[str, Any] = {"resources": resources}
    if rng.random() < 0.2:
        group["required"] = ["HW_CPU_X86_AVX512F"]
    constraints: list[dict[str, Any]] = []
    if rng.random() < 0.2:
        constraints.append({"type": "tags", "required": ["hipaa"], "hard": True})
    if rng.random() < 0.2:
        constraints.append({"type": "location", "hard": True,
                            "pattern": rng.choice(["eu/*", "us/*", "root/*", "mars"])})
    count = rng.choice([1, 1, 2, 5])
    return ScheduleRequest.model_validate({
        "consumers": [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(count)],
        "project_id": "p", "user_id": "u", "groups": [group], "constraints": constraints,
        "weigher": {"name": rng.choice(["pack", "spread"])},
        "atomic": rng.random() < 0.8})


def _routers(node: MemoryRouter) -> list[MemoryRouter]:
    out = [node]
    for e in node.entries:
        if isinstance(e, MemoryRouter):
            out += _routers(e)
    return out


def test_rank_orders_children_as_zone_tree_does() -> None:
    """The vectorised pruning and ranking give ZoneTree's own answer (prune_reason,
    predicted_fit), on every router of a deep tree, as usage moves."""
    sc = _deep()
    hosts = build_hosts(sc, 2)
    target = MemoryTreeTarget(hosts, sc)
    routers = _routers(target.root)
    assert [r.name for r in routers] == ["root", "region"]
    assert sorted(e.name for e in target.root.entries) == ["", "c3", "region", "secure"]
    rng = random.Random(7)
    checked = placed = 0
    for _ in range(300):
        req = _request(rng)
        d = demand_of(req, target.col)
        for r in routers:
            assert [r.entries[row].name for row in r.rank(d)] == [n for _, n in r.fits(req)]
            checked += 1
        # Move usage: place the request when it fits, free some now and then.
        got = target.root.schedule(req, d, [])
        if got is not None:
            for p in got[0].claim(req, got[1]):
                target.owner[p.consumer] = got[0]
            placed += 1
        if target.owner and rng.random() < 0.3:
            target.release([rng.choice(sorted(target.owner))])
    assert placed > 20 and checked == 600
    assert check(target.snapshot_for_invariants()) == []


def test_a_drifted_index_is_caught() -> None:
    sc = tiny()
    hosts = build_hosts(sc, 1)
    zone = MemoryZone("z", hosts, levels=sc.levels, classes=["VCPU"])
    zone.index.rc["VCPU"].used[0] += 1
    with pytest.raises(RuntimeError, match=r"free room of .* drifted"):
        zone.snapshot()
    zone.free_m[0, zone.col["VCPU"]] -= 1
    with pytest.raises(RuntimeError, match="held allocations sum to 0"):
        zone.snapshot()


def test_refusals_name_their_reason() -> None:
    """A shape no host can take is refused with the class that is short."""
    sc = tree(requests=20)
    shapes = (replace(sc.workload.shapes[0], name="huge", resources={"VCPU": 999}),)
    sc = replace(sc, workload=replace(sc.workload, shapes=shapes))
    hosts = build_hosts(sc, 1)
    for flat in (True, False):
        target = MemoryTreeTarget(hosts, sc, flat=flat)
        try:
            result = run(sc, target, ClusterModel(hosts, sc.levels), seed=1)
        finally:
            target.close()
        assert result.metrics.reasons == {"VCPU: short": 20}


def test_the_kept_failure_memories_change_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The routers' vector failure memory and the zones' remembered pre-check
    refusals only save work: without them, every answer and reason is the same."""
    cell = {"count": 4, "hosts_per_rack": 1, "racks_per_room": 2, "name": "h",
            "inventory": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16384}}}
    # One kind of request in several sizes, some CPU-heavy and some memory-
    # heavy, so that cells pass the summary test and still refuse (free CPU on
    # one host, free memory on another), and the refusals of small requests
    # stand for bigger ones.
    sizes = [(6, 1024), (1, 14336), (3, 6144), (2, 2048), (1, 1024)]
    sc = parse({
        "scenario": {"name": "cells"},
        "cluster": {"zone": {"name": "root", "site": "root", "children": [
            {"name": f"c{i}", "site": f"s{i}", "providers": [cell]} for i in range(6)]}},
        "workload": {
            "requests": 600, "weigher": "pack",
            "arrival": {"process": "poisson", "rate": 3.0},
            "lifetime": {"distribution": "exponential", "mean": 20.0, "minimum": 1.0},
            "shapes": [{"name": f"s{v}-{m}", "resources": {"VCPU": v, "MEMORY_MB": m}}
                       for v, m in sizes]}})
    hosts = build_hosts(sc, 2)
    model = ClusterModel(hosts, sc.levels)

    def recorded() -> tuple[list[tuple[bool, tuple[str, ...], str | None]], int]:
        target = Recording(MemoryTreeTarget(hosts, sc))
        try:
            result = run(sc, target, model, seed=5)
        finally:
            target.close()
        return target.seen, result.metrics.requests - result.metrics.accepted

    kept, refused = recorded()
    rank, refuse = MemoryRouter.rank, MemoryZone._surely_refused

    def forgetful_rank(self: MemoryRouter, d: Any, *, remembered: bool = False) -> list[int]:
        return rank(self, d)

    def forgetful_refuse(self: MemoryZone, req: ScheduleRequest, hosts: Any) -> bool:
        self._refused_at.clear()
        return refuse(self, req, hosts)

    monkeypatch.setattr(MemoryRouter, "rank", forgetful_rank)
    monkeypatch.setattr(MemoryZone, "_surely_refused", forgetful_refuse)
    assert recorded() == (kept, refused)
    assert refused > 20  # tight enough to refuse
