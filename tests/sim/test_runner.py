"""The runner end to end: reproducible, correct against the real store, reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from strato.sim.baselines import BASELINES
from strato.sim.cluster import ClusterModel, build_hosts
from strato.sim.compare import Options, compare
from strato.sim.inprocess import InProcessZone
from strato.sim.runner import run
from tests.sim.worlds import tiny

# Figures that depend on the wall clock, not on the decisions.
_CLOCK = {"latency_ms", "wall_s", "release_s", "placements_per_s", "decisions_per_s"}


def _decisions(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in _CLOCK}


def _run_strato(seed: int) -> dict[str, Any]:
    sc = tiny()
    hosts = build_hosts(sc, seed)
    model = ClusterModel(hosts, sc.levels)
    zone = InProcessZone(hosts, levels=sc.levels)
    try:
        result = run(sc, zone, model, seed=seed)
    finally:
        zone.close()
    return {**_decisions(result.summary()), "series": result.metrics.series.utilization}


def test_same_seed_same_result() -> None:
    first, again = _run_strato(3), _run_strato(3)
    assert first == again
    assert first["requests"] == 60


def test_another_seed_another_run() -> None:
    sc = tiny()
    model = ClusterModel(build_hosts(sc, 1), sc.levels)
    a = run(sc, BASELINES["random"](model, 1), model, seed=1).summary()
    b = run(sc, BASELINES["random"](model, 2), model, seed=2).summary()
    assert _decisions(a) != _decisions(b)


def test_strato_in_process_keeps_every_invariant() -> None:
    summary = _run_strato(1)
    assert summary["accepted"] > 0
    assert summary["hard_violations"] == 0
    assert summary["invariant_violations"] == 0, summary["invariant_examples"]
    # Strato enforces soft rules first: with room to spare it keeps them all.
    assert summary["soft_rules"]["satisfaction"] == 1.0


def test_overload_rejects_with_explained_reasons() -> None:
    sc = tiny(requests=80, rate=5.0)
    data = compare(sc, ["strato", "nova"], Options(seed=1), out=None)
    for policy in ("strato", "nova"):
        s = data["policies"][policy]
        assert s["rejected"] > 0
        assert sum(s["reasons"].values()) == s["rejected"]
        assert all("short" in r or "anti_affinity" in r or "tags" in r or "joint" in r
                   for r in s["reasons"]), s["reasons"]
    assert data["checks"]["hard_violations"] == 0


def test_compare_writes_the_report(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    data = compare(tiny(), ["strato", "random", "first-fit", "nova"], Options(seed=1), out)
    assert set(data["policies"]) == {"strato", "random", "first-fit", "nova"}
    saved = json.loads((out / "report.json").read_text())
    assert saved["policies"]["nova"]["requests"] == 60
    for png in ("utilization.png", "latency_cdf.png", "rejections.png"):
        assert (out / png).stat().st_size > 1000
    md = (out / "report.md").read_text()
    assert "| strato |" in md and "![utilization.png]" in md


def test_cli_sim_command(tmp_path: Path) -> None:
    from strato.cli.main import app

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "small.toml"
    result = CliRunner().invoke(app, [
        "sim", str(scenario), "--compare", "first-fit,nova", "--requests", "0.1",
        "--no-progress", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.json").exists()
    bad = CliRunner().invoke(app, ["sim", str(scenario), "--compare", "nope", "--no-progress"])
    assert bad.exit_code == 2
    several = CliRunner().invoke(app, [
        "sim", str(scenario), "--compare", "first-fit,nova", "--requests", "0.2", "--seeds",
        "2", "--no-progress", "--out", str(tmp_path / "seeds")])
    assert several.exit_code == 0, several.output
    summary = json.loads((tmp_path / "seeds" / "seeds.json").read_text())
    assert summary["seeds"] == [1, 2] and set(summary["mean"]) == {"first-fit", "nova"}
    assert (tmp_path / "seeds" / "seed-2" / "report.md").exists()


@pytest.mark.postgres
def test_strato_on_postgresql(pg_db_url: str) -> None:
    sc = tiny(requests=40)
    hosts = build_hosts(sc, 1)
    model = ClusterModel(hosts, sc.levels)
    zone = InProcessZone(hosts, levels=sc.levels, url=pg_db_url)
    try:
        s = run(sc, zone, model, seed=1).summary()
    finally:
        zone.close()
    assert s["accepted"] > 0
    assert s["hard_violations"] == 0 and s["invariant_violations"] == 0
