"""`strato sim` with the exact solver: HiGHS's banner stays off stdout, and the solve
shows progress on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = Path(__file__).resolve().parents[2] / "scenarios" / "small.toml"


def test_exact_solve_is_silent_on_stdout_and_shows_progress_on_stderr() -> None:
    pytest.importorskip("highspy")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "strato.cli.main", "sim", str(SMALL),
                           "--compare", "first-fit,exact", "--no-progress",
                           "--requests", "0.25"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "HiGHS" not in done.stdout and "Running" not in done.stdout, done.stdout
    assert done.stdout.lstrip().startswith("small (seed 1)"), done.stdout
    assert "solving the exact bound with HiGHS (time limit 120 s)" in done.stderr
    assert "exact bound solved in" in done.stderr, done.stderr


def test_solve_reports_its_progress() -> None:
    pytest.importorskip("highspy")
    from strato.sim.cluster import ClusterModel, build_hosts
    from strato.sim.exact import SolveProgress, solve
    from strato.sim.scenario import load

    sc = load(SMALL).scaled(requests=0.25)
    seen: list[SolveProgress] = []
    sol = solve(sc, ClusterModel(build_hosts(sc, 1), sc.levels), 1, time_limit=60,
                progress=seen.append)
    assert seen, "no progress reported"
    last = seen[-1]
    assert last.seconds >= 0 and last.incumbent == pytest.approx(sol.objective)
    assert last.bound == pytest.approx(sol.bound) and last.done


def test_ctrl_c_during_the_solve_stops_the_run() -> None:
    """Ctrl-C lands in the progress callback HiGHS calls while it solves: it was
    swallowed there (HiGHS ended with "Solve error" and the run went on to
    report an exact result of 0% with exit 0)."""
    pytest.importorskip("highspy")
    from strato.sim.cluster import ClusterModel, build_hosts
    from strato.sim.exact import SolveProgress, solve
    from strato.sim.scenario import load

    sc = load(SMALL).scaled(requests=0.25)

    def interrupted(p: SolveProgress) -> None:
        if not p.done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        solve(sc, ClusterModel(build_hosts(sc, 1), sc.levels), 1, time_limit=60,
              progress=interrupted)


def test_ctrl_c_during_strato_sim_exits_130_without_a_traceback() -> None:
    import signal
    import time

    pytest.importorskip("highspy")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.Popen([sys.executable, "-m", "strato", "sim", str(SMALL), "--compare",
                          "exact", "--no-progress"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        assert p.stderr is not None
        while "solving the exact bound" not in p.stderr.readline():
            assert time.monotonic() < deadline and p.poll() is None
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err and "exact:" not in out, (out, err)
