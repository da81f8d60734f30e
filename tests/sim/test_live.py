"""Live mode: the same workload against a real server process over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from strato.process import ServerProcess
from strato.sim.cluster import ClusterModel, build_hosts
from strato.sim.live import LiveTarget
from strato.sim.runner import run
from tests.sim.worlds import tiny


@pytest.mark.slow
def test_live_server_keeps_every_invariant(sqlite_db_url: str, tmp_path: Path) -> None:
    sc = tiny(requests=40, rate=2.0)
    hosts = build_hosts(sc, 1)
    model = ClusterModel(hosts, sc.levels)
    with ServerProcess(sqlite_db_url, log_path=tmp_path / "server.log") as server:
        target = LiveTarget(server.url, hosts)
        try:
            # 40 requests over ~20 virtual seconds, replayed 200x faster than real time.
            result = run(sc, target, model, seed=1, time_scale=200.0)
        finally:
            target.close()
    s = result.summary()
    assert s["requests"] == 40 and s["accepted"] > 0
    assert s["hard_violations"] == 0
    assert s["invariant_violations"] == 0, s["invariant_examples"]
    assert sum(s["reasons"].values()) == s["rejected"]
