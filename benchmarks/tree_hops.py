"""What each zone of the seven-process tree spends on the cheapest route.

`python -m benchmarks.tree_hops --requests 400 --rounds 3` builds the tree of
`benchmarks.tree --parts http` (root, two mid zones, four cells, sharing
pools; 2,000 hosts), warms it with 30 requests, then sends `delegate`
requests one at a time and prints, per round, the p50 and p90 latency and
the CPU each zone process spent per request (from /proc). Run it from two
checkouts taking turns to compare two versions of the code in the same hour:
the per-zone CPU says where a difference comes from (routing zones against
cells). The zones' `--ledger-commit` is taken from STRATO_LEDGER_COMMIT.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from benchmarks.tree import http_run, pct
from strato.cli.demo import Options, ZoneProcesses, _cpu, build

console = Console()


def one_round(requests: int, hosts: int) -> tuple[float, float, int, dict[str, float]]:
    """(p50 ms, p90 ms, failed, CPU ms per request by zone)."""
    with tempfile.TemporaryDirectory() as d:
        zp = ZoneProcesses(Path(d))
        try:
            build(zp, Options(providers=hosts, api_sample=0), Console(quiet=True))
            url = zp.url(zp.zones[0].name)
            http_run(url, "delegate", 30, 1, 60)
            before = {name: _cpu(p) for name, p in zp.procs.items()}
            lat, _, failed, _ = http_run(url, "delegate", requests, 1, 300)
            cpu = {name: 1000 * (_cpu(p) - before[name]) / max(1, len(lat))
                   for name, p in zp.procs.items()}
        finally:
            zp.stop()
    return pct(lat, 0.5), pct(lat, 0.9), failed, cpu


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=2000)
    args = ap.parse_args(argv)
    mode = os.environ.get("STRATO_LEDGER_COMMIT", "sync")
    for i in range(args.rounds):
        p50, p90, failed, cpu = one_round(args.requests, args.hosts)
        by_zone = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
        console.print(f"round {i + 1} (ledger {mode}): delegate, 1 client, "
                      f"p50 {p50:.2f} ms, p90 {p90:.2f} ms, {failed} failed; "
                      f"CPU ms/request: {by_zone}; load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
