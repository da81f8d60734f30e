"""The agent's own cost at steady state: CPU seconds and memory per report.

    python -m benchmarks.agent_cost --reports 50 --interval 0.1

Starts a real `strato serve` on a temporary SQLite database and a real agent
(facts from a file, so the work is the same on any machine), lets it register
and settle, then measures the agent process with psutil over N steady reports
(each a heartbeat: one POST). Runs the lightweight entry point
(`python -m strato.cli.agent`) and the full CLI (`python -m strato.cli.main
agent`, which also imports the server's modules). Writes
benchmarks/results/agent_cost.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from strato.process import ServerProcess

ENTRY_POINTS = {"python -m strato.cli.agent": ["-m", "strato.cli.agent"],
                "strato agent": ["-m", "strato.cli.main", "agent"]}


def _count(log: Path) -> int:
    return log.read_text().count(": heartbeat only") if log.exists() else 0


def measure(url: str, tmp: Path, entry: list[str], reports: int, interval: float
            ) -> dict[str, Any]:
    facts = tmp / "facts.json"
    facts.write_text(json.dumps({"vcpu": 16, "memory_mb": 65536, "disk_gb": 500,
                                 "used": {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}}))
    log = tmp / f"agent-{uuid.uuid4().hex[:6]}.log"
    cmd = [sys.executable, *entry, "--zone-url", url, "--uuid", str(uuid.uuid4()),
           "--name", f"bench-{uuid.uuid4().hex[:6]}", "--facts-file", str(facts),
           "--interval", str(interval), "--log-level", "debug"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out)
    try:
        p = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while _count(log) < 5:  # registered and settled
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"agent did not settle: {log.read_text()[-2000:]}")
            time.sleep(0.02)
        start_n, t0, cpu0 = _count(log), time.monotonic(), p.cpu_times()
        while _count(log) < start_n + reports:
            time.sleep(0.02)
        n, t1, cpu1 = _count(log) - start_n, time.monotonic(), p.cpu_times()
        mem = p.memory_full_info()
        cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        return {"reports": n, "wall_s": round(t1 - t0, 3),
                "cpu_ms_per_report": round(cpu / n * 1000, 3),
                "cpu_percent_at_30s_interval": round(cpu / n / 30 * 100, 4),
                "rss_mb": round(mem.rss / 2**20, 1), "uss_mb": round(mem.uss / 2**20, 1)}
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reports", type=int, default=50)
    ap.add_argument("--interval", type=float, default=0.1)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with ServerProcess(f"sqlite:///{tmp / 'zone.db'}") as server:
            for label, entry in ENTRY_POINTS.items():
                results[label] = measure(server.url, tmp, entry, args.reports, args.interval)
                print(label, results[label])
    out = Path(__file__).parent / "results" / "agent_cost.json"
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
