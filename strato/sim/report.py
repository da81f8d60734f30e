"""report.json (every figure) and report.md (the figures, read together) for one run."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strato.sim import plots
from strato.sim.exact import ExactSolution
from strato.sim.runner import RunResult
from strato.sim.scenario import Scenario


def build(scenario: Scenario, seed: int, results: Sequence[RunResult],
          exact: ExactSolution | None, setup_s: dict[str, float]) -> dict[str, Any]:
    by = {r.policy: r.summary() for r in results}
    checks: dict[str, Any] = {
        "hard_violations": sum(s["hard_violations"] + s["invariant_violations"]
                               for s in by.values())}
    strato = next((s for p, s in by.items() if p.startswith("strato")), None)
    if strato is not None and exact is not None:
        checks["strato_vs_optimum"] = strato["accepted_load"] / exact.objective \
            if exact.objective else None
        checks["strato_vs_bound"] = strato["accepted_load"] / exact.bound if exact.bound else None
    if strato is not None and "nova" in by:
        checks["strato_rejection_rate"] = strato["rejection_rate"]
        checks["nova_rejection_rate"] = by["nova"]["rejection_rate"]
    series = {r.policy: {"times": r.metrics.series.times,
                         "utilization": r.metrics.series.utilization,
                         "stranded": r.metrics.series.stranded} for r in results}
    return {
        "scenario": scenario.name, "description": scenario.description, "seed": seed,
        "providers": scenario.provider_count(), "requests": scenario.workload.requests,
        "weigher": {"name": scenario.workload.weigher, "spare": scenario.workload.spare},
        "classes": results[0].metrics.model.classes if results else [],
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "setup_s": setup_s, "policies": by,
        "exact": exact.as_dict() if exact is not None else None,
        "checks": checks, "series": series,
    }


def _weigher(data: dict[str, Any]) -> str:
    w = data.get("weigher")
    if not w:
        return ""
    spare = "on" if w["spare"] else "off"
    return f"Strato's weigher: {w['name']}, sparing rare hosts {spare}. "


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def markdown(data: dict[str, Any], images: Sequence[str]) -> str:
    pol = data["policies"]
    lines = [f"# Simulation: {data['scenario']}", "", data["description"], "",
             f"{data['providers']} providers, {data['requests']} requests, seed {data['seed']}. "
             f"{_weigher(data)}Definitions of every figure: docs/simulator.md.", "",
             "## Summary", "",
             "| policy | accepted load | rejected | p50 ms | p99 ms | placements/s | "
             "soft kept | hard violations |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in pol.items():
        lat = s["latency_ms"]
        lines.append(
            f"| {name} | {_pct(s['accepted_load_share'])} | {_pct(s['rejection_rate'])} "
            f"| {lat['p50']:.2f} | {lat['p99']:.2f} | {s['placements_per_s']:.0f} "
            f"| {_pct(s['soft_rules']['satisfaction'])} "
            f"| {s['hard_violations'] + s['invariant_violations']} |")
    lines += ["", "Baselines and `exact` decide on the in-memory model, with no store: "
              "their latencies show the policy's cost only. So do `strato-memory` and "
              "`strato-tree-memory` (Strato's planner on in-memory zones), while `strato`, "
              "`strato-tree` and `strato-live` include the engine refresh and the claim's "
              "database transaction."]
    ex = data.get("exact")
    if ex:
        lines += ["", "## Gap to the optimum", "",
                  f"The clairvoyant optimum (HiGHS, {ex['status']}, {ex['seconds']:.0f} s, "
                  f"{ex['variables']} variables, {ex['rows']} rows) accepts "
                  f"{_pct(ex['objective_share'])} of the offered load; no policy can exceed "
                  f"{_pct(ex['bound_share'])} (the proven bound)."]
        for name, s in pol.items():
            if name == "exact" or not ex["objective"]:
                continue
            lines.append(f"- {name}: {_pct(s['accepted_load'] / ex['objective'])} of the "
                         f"optimum found, {_pct(s['accepted_load'] / ex['bound'])} of the bound")
    first = next(iter(pol.values()), None)
    if first is not None:
        lines += ["", "Offered load in steady state (arrival rate x demand x lifetime / "
                  "capacity): " + ", ".join(f"{c} {_pct(v)}" for c, v in
                                            first["offered_intensity"].items()) + "."]
    lines += ["", "## Utilization and stranded capacity (time averages)", "",
              "| policy | " + " | ".join(f"{c} used | {c} stranded" for c in data["classes"])
              + " |", "| --- |" + " ---: | ---: |" * len(data["classes"])]
    for name, s in pol.items():
        cells = [f"{_pct(s['mean_utilization'][c])} | {_pct(s['mean_stranded'][c])}"
                 for c in data["classes"]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Rejections by reason", ""]
    for name, s in pol.items():
        reasons = ", ".join(f"{k}: {v}" for k, v in s["reasons"].items()) or "none"
        lines.append(f"- **{name}** ({s['rejected']}): {reasons}")
    lines += ["", "## Conflicts and invariants", ""]
    for name, s in pol.items():
        lines.append(f"- {name}: {s['retries']} claim retries "
                     f"({s['requests_with_retries']} requests); "
                     f"{s['hard_violations']} hard-rule violations; "
                     f"{s['invariant_violations']} invariant violations in the store"
                     + (": " + "; ".join(s["invariant_examples"]) if s["invariant_examples"]
                        else ""))
    if images:
        lines += ["", "## Plots", ""] + [f"![{i}]({i})" for i in images]
    else:
        lines += ["", "(no plots: install the `sim` extra for matplotlib)"]
    return "\n".join(lines) + "\n"


def write(out: Path, scenario: Scenario, seed: int, results: Sequence[RunResult],
          exact: ExactSolution | None, setup_s: dict[str, float]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    data = build(scenario, seed, results, exact, setup_s)
    (out / "report.json").write_text(json.dumps(data, indent=1))
    images = plots.write_all(results, out) if plots.available() and results else []
    (out / "report.md").write_text(markdown(data, images))
    return data
