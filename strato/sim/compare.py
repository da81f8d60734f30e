"""Run several policies on one scenario and seed, side by side, and write the report.

Policy names: `strato` (in-process zone through LocalScheduler and the
store), `strato-tree` / `strato-tree-best` (the scenario's zone tree in
process, delegate / best mode), `strato-memory` / `strato-tree-memory` (the
engine and planner deciding in memory, no store: one zone, or the zone tree
in delegate mode; see strato/sim/memory.py), `strato-live` (a running server
at --url), `random`, `first-fit`, `nova`, and `exact` (the clairvoyant optimum,
small scenarios only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strato.sim import report
from strato.sim.baselines import BASELINES
from strato.sim.cluster import ClusterModel, HostSpec, build_hosts
from strato.sim.exact import ExactSolution, ExactTarget, SolveProgress, solve
from strato.sim.runner import Progress, RunResult, run
from strato.sim.scenario import Scenario
from strato.sim.target import Target

POLICIES = ("strato", "strato-tree", "strato-tree-best", "strato-memory",
            "strato-tree-memory", "strato-live", "random",
            "first-fit", "nova", "exact")


@dataclass(frozen=True, slots=True)
class Options:
    seed: int = 1
    db_url: str | None = None  # PostgreSQL (empty database) for the in-process zone
    live_url: str | None = None
    live_token: str = "admin"
    live_register: bool = True
    live_timeout: float = 60.0  # seconds to wait for each answer of the live zone
    time_scale: float | None = None  # live mode: virtual seconds per wall second
    exact_time_limit: float = 120.0


def make_target(name: str, hosts: Sequence[HostSpec], model: ClusterModel,
                scenario: Scenario, opts: Options,
                exact: ExactSolution | None = None) -> Target:
    if name == "strato":
        from strato.sim.inprocess import InProcessZone

        return InProcessZone(hosts, levels=scenario.levels, url=opts.db_url)
    if name in ("strato-tree", "strato-tree-best"):
        from strato.sim.tree import InProcessTreeTarget

        target = InProcessTreeTarget(hosts, scenario,
                                     mode="best" if name.endswith("best") else "delegate")
        target.name = name
        return target
    if name in ("strato-memory", "strato-tree-memory"):
        from strato.sim.memory import MemoryTreeTarget

        return MemoryTreeTarget(hosts, scenario, flat=name == "strato-memory")
    if name == "strato-live":
        from strato.sim.live import LiveTarget

        if not opts.live_url:
            raise ValueError("strato-live needs --url")
        return LiveTarget(opts.live_url, hosts, token=opts.live_token,
                          register=opts.live_register, timeout=opts.live_timeout)
    if name == "exact":
        assert exact is not None
        return ExactTarget(exact, model)
    if name in BASELINES:
        return BASELINES[name](model, opts.seed)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")


def compare(scenario: Scenario, policies: Sequence[str], opts: Options, out: Path | None,
            progress: Callable[[str], Progress | None] | None = None,
            solving: Callable[[SolveProgress], None] | None = None) -> dict[str, Any]:
    """Run `policies` in order; write the report into `out` if given; return its data.
    `solving` hears how the exact solve (policy `exact`) is getting on."""
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; known: {', '.join(POLICIES)}")
    setup: dict[str, float] = {}
    t0 = time.perf_counter()
    hosts = build_hosts(scenario, opts.seed)
    model = ClusterModel(hosts, scenario.levels)
    setup["cluster"] = time.perf_counter() - t0
    exact = None
    if "exact" in policies:
        t0 = time.perf_counter()
        exact = solve(scenario, model, opts.seed, time_limit=opts.exact_time_limit,
                      progress=solving)
        setup["exact"] = time.perf_counter() - t0
    results: list[RunResult] = []
    for name in policies:
        t0 = time.perf_counter()
        target = make_target(name, hosts, model, scenario, opts, exact)
        setup[name] = time.perf_counter() - t0
        try:
            results.append(run(scenario, target, model, seed=opts.seed,
                               progress=progress(name) if progress else None,
                               time_scale=opts.time_scale if name == "strato-live" else None))
        finally:
            target.close()
    if out is not None:
        return report.write(out, scenario, opts.seed, results, exact, setup)
    return report.build(scenario, opts.seed, results, exact, setup)


# Figures averaged over seeds (the rest are per run).
_AVERAGED = ("accepted_load_share", "rejection_rate", "placements_per_s",
             "hard_violations", "invariant_violations")


def compare_seeds(scenario: Scenario, policies: Sequence[str], opts: Options, seeds: int,
                  out: Path | None,
                  progress: Callable[[str], Progress | None] | None = None,
                  solving: Callable[[SolveProgress], None] | None = None) -> dict[str, Any]:
    """`compare` for seeds opts.seed .. opts.seed + seeds - 1; per-seed reports go to
    out/seed-K; the answer holds every run's figures and their means per policy."""
    from dataclasses import replace

    runs = []
    for k in range(opts.seed, opts.seed + seeds):
        data = compare(scenario, policies, replace(opts, seed=k),
                       out / f"seed-{k}" if out is not None else None, progress, solving)
        runs.append(data)
    mean: dict[str, dict[str, float]] = {}
    for p in policies:
        mean[p] = {f: sum(float(r["policies"][p][f]) for r in runs) / len(runs)
                   for f in _AVERAGED}
        mean[p]["p50_ms"] = sum(r["policies"][p]["latency_ms"]["p50"] for r in runs) / len(runs)
    ex = [r["exact"] for r in runs if r.get("exact")]
    summary: dict[str, Any] = {
        "scenario": scenario.name, "seeds": list(range(opts.seed, opts.seed + seeds)),
        "mean": mean,
        "per_seed": {p: [{f: r["policies"][p][f] for f in _AVERAGED} for r in runs]
                     for p in policies},
        "exact": ex,
    }
    if out is not None:
        import json

        out.mkdir(parents=True, exist_ok=True)
        (out / "seeds.json").write_text(json.dumps(summary, indent=1))
    return summary
