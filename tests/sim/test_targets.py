"""What issue 6 says the simulator must show, on the shipped small scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from strato.sim.compare import Options, compare, compare_seeds
from strato.sim.scenario import load

SMALL = Path(__file__).resolve().parents[2] / "scenarios" / "small.toml"


@pytest.mark.slow
def test_small_strato_within_5_percent_of_the_optimum() -> None:
    pytest.importorskip("highspy")
    data = compare(load(SMALL), ["strato", "exact"], Options(seed=1, exact_time_limit=120),
                   out=None)
    ex = data["exact"]
    assert ex["status"] == "Optimal"
    strato = data["policies"]["strato"]
    assert strato["accepted_load"] >= 0.95 * ex["objective"]
    assert data["checks"]["hard_violations"] == 0


@pytest.mark.slow
def test_small_strato_rejects_no_more_than_nova() -> None:
    summary = compare_seeds(load(SMALL), ["strato", "nova"], Options(seed=1), 3, out=None)
    mean = summary["mean"]
    assert mean["strato"]["rejection_rate"] <= mean["nova"]["rejection_rate"]
    assert mean["strato"]["accepted_load_share"] >= mean["nova"]["accepted_load_share"]
    assert all(m["hard_violations"] + m["invariant_violations"] == 0 for m in mean.values())
