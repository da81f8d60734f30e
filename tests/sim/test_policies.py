"""Baselines, the exact bound, workload draws and the stranded-capacity gauge."""

from __future__ import annotations

import dataclasses
import random
import statistics

import numpy as np
import pytest

from strato.sim.baselines import FirstFit, NovaLike, RandomFit
from strato.sim.cluster import ClusterModel, build_hosts
from strato.sim.inprocess import schedule_body
from strato.sim.metrics import StrandedGauge
from strato.sim.runner import run
from strato.sim.scenario import (
    ArrivalSpec,
    LifetimeSpec,
    RuleSpec,
    ScenarioError,
    load,
    parse,
)
from strato.sim.target import Outcome
from strato.sim.workload import SimRequest, arrival_times, lifetime, requests
from tests.sim.worlds import tiny


def _model() -> ClusterModel:
    sc = tiny()
    return ClusterModel(build_hosts(sc, 1), sc.levels)


def _req(i: int, vcpu: int = 1, count: int = 1, rules: tuple[RuleSpec, ...] = (),
         group: str | None = None) -> SimRequest:
    return SimRequest(index=i, time=float(i), shape="small",
                      consumers=tuple(f"c{i}-{k}" for k in range(count)),
                      resources={"VCPU": vcpu, "MEMORY_MB": 1024}, required_traits=(),
                      rules=rules, group=group, lifetime=10.0)


def test_first_fit_fills_the_first_host() -> None:
    m = _model()
    ff = FirstFit(m)
    hosts = [ff.schedule(_req(i, vcpu=4)).placements[0].host for i in range(3)]
    assert hosts == [m.uuids[0], m.uuids[0], m.uuids[1]]


def test_nova_spreads_by_free_ram() -> None:
    m = _model()
    nova = NovaLike(m)
    hosts = [nova.schedule(_req(i)).placements[0].host for i in range(6)]
    assert len(set(hosts)) == 6


def test_random_is_seeded() -> None:
    m = _model()
    a = [RandomFit(m, 7).schedule(_req(i)).placements[0].host for i in range(5)]
    b = [RandomFit(m, 7).schedule(_req(i)).placements[0].host for i in range(5)]
    assert a == b


def test_baselines_keep_hard_rules_and_explain() -> None:
    m = _model()
    nova = NovaLike(m)
    rack = (RuleSpec(type="anti_affinity", level="rack"),)
    out = nova.schedule(_req(0, count=3, rules=rack, group="g"))
    assert len({m.domains["rack"][m.pos[p.host]] for p in out.placements}) == 3
    # Every rack is taken by the group now.
    refused = nova.schedule(_req(1, rules=rack, group="g"))
    assert not refused.accepted and refused.reason == "anti_affinity@rack"
    assert nova.schedule(_req(2, vcpu=9)).reason == "VCPU: short"
    nova.release([out.placements[0].consumer])
    tags = (RuleSpec(type="tags", required=("hipaa",)),)
    placed = nova.schedule(_req(3, rules=tags)).placements[0].host
    assert "hipaa" in m.hosts[m.pos[placed]].tags


def test_every_baseline_runs_clean() -> None:
    sc = tiny(requests=80, rate=3.0)
    m = ClusterModel(build_hosts(sc, 1), sc.levels)
    for cls in (RandomFit, FirstFit, NovaLike):
        s = run(sc, cls(m, 1), m, seed=1).summary()
        assert s["hard_violations"] == 0 and s["invariant_violations"] == 0
        assert 0 < s["accepted"] <= 80


def test_exact_bounds_every_policy() -> None:
    pytest.importorskip("highspy")
    from strato.sim.exact import ExactTarget, solve

    sc = tiny(requests=40, rate=1.0)
    m = ClusterModel(build_hosts(sc, 1), sc.levels)
    sol = solve(sc, m, 1, time_limit=30)
    assert sol.status == "Optimal"
    replay = run(sc, ExactTarget(sol, m), m, seed=1).summary()
    assert replay["hard_violations"] == 0 and replay["invariant_violations"] == 0
    assert replay["accepted_load"] == pytest.approx(sol.objective, rel=1e-6)
    for cls in (RandomFit, FirstFit, NovaLike):
        s = run(sc, cls(m, 1), m, seed=1).summary()
        assert s["accepted_load"] <= sol.bound + 1e-6


def test_lifetimes_and_arrivals_follow_their_parameters() -> None:
    rng = random.Random(1)
    logn = [lifetime(LifetimeSpec(distribution="lognormal", median=100.0, sigma=1.0,
                                  minimum=0.0), rng) for _ in range(4000)]
    assert statistics.median(logn) == pytest.approx(100.0, rel=0.1)
    pareto = [lifetime(LifetimeSpec(distribution="pareto", alpha=1.2, minimum=10.0), rng)
              for _ in range(4000)]
    assert min(pareto) >= 10.0 and max(pareto) > 100 * statistics.median(pareto)
    times = arrival_times(ArrivalSpec(rate=2.0), random.Random(2))
    last = [next(times) for _ in range(4000)][-1]
    assert 4000 / last == pytest.approx(2.0, rel=0.1)
    bursty = arrival_times(ArrivalSpec(rate=2.0, burst_fraction=0.5, burst_mean_size=6.0),
                           random.Random(3))
    got = [next(bursty) for _ in range(4000)]
    assert 4000 / got[-1] == pytest.approx(2.0, rel=0.2)
    assert len(set(got)) < 0.6 * len(got)  # clumps share an instant


def test_workload_stream_is_reproducible() -> None:
    wl = tiny().workload
    assert list(requests(wl, 5)) == list(requests(wl, 5))
    assert list(requests(wl, 5)) != list(requests(wl, 6))


def test_stranded_capacity_definition() -> None:
    m = _model()
    gauge = StrandedGauge(m, tiny().workload)
    free = m.capacity.copy()
    vcpu, mem = m.col["VCPU"], m.col["MEMORY_MB"]
    # Host 0: plenty of VCPU left, memory exhausted: its free VCPU is stranded.
    free[0, mem] = 0
    out = dict(zip(m.classes, gauge(free), strict=True))
    assert out["VCPU"] == pytest.approx(float(free[0, vcpu]) / float(m.total[vcpu]))
    assert out["MEMORY_MB"] == 0.0
    assert gauge(m.capacity.copy()) == [0.0] * len(m.classes)
    assert np.all(np.array(gauge(np.zeros_like(m.capacity))) == 0.0)


def test_shipped_scenarios_parse() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "scenarios"
    for path in sorted(root.glob("*.toml")):
        sc = load(path)
        assert sc.provider_count() > 0 and sc.workload.requests > 0, path


def test_scenario_errors_name_the_field() -> None:
    with pytest.raises(ScenarioError, match=r"workload\.shapes"):
        parse({"cluster": {"zone": {"providers": [
            {"count": 1, "inventory": {"VCPU": 1}}]}}, "workload": {}})
    with pytest.raises(ScenarioError, match="group_pool"):
        parse({"cluster": {"zone": {"providers": [{"count": 1, "inventory": {"VCPU": 1}}]}},
               "workload": {"shapes": [{"name": "x", "resources": {"VCPU": 1},
                                        "rules": [{"type": "anti_affinity"}]}]}})
    one = {"cluster": {"zone": {"providers": [{"count": 1, "inventory": {"VCPU": 1}}]}}}
    shapes = [{"name": "x", "resources": {"VCPU": 1}}]
    with pytest.raises(ScenarioError, match=r"workload\.spare"):
        parse({**one, "workload": {"shapes": shapes, "spare": "no"}})


def test_sparing_rare_hosts_can_be_turned_off_per_scenario() -> None:
    one = {"cluster": {"zone": {"providers": [{"count": 1, "inventory": {"VCPU": 1}}]}}}
    shapes = [{"name": "x", "resources": {"VCPU": 1}}]
    for spare in (True, False):
        sc = parse({**one, "workload": {"shapes": shapes, "spare": spare}})
        req = next(iter(requests(sc.workload, 1)))
        assert schedule_body(req)["weigher"] == {"name": "spread", "spare": spare}


class _IgnoresRules(FirstFit):
    """A broken policy: drops every rule before placing."""

    name = "broken"

    def schedule(self, request: SimRequest) -> Outcome:
        return super().schedule(dataclasses.replace(request, rules=()))


def test_a_policy_that_breaks_hard_rules_is_caught() -> None:
    sc = tiny(requests=60, rate=1.0)
    m = ClusterModel(build_hosts(sc, 1), sc.levels)
    s = run(sc, _IgnoresRules(m, 1), m, seed=1).summary()
    assert s["hard_violations"] > 0
    assert any("anti_affinity" in v or "tags" in v for v in s["violation_examples"])
    assert s["soft_rules"]["satisfaction"] < 1.0
