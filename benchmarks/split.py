"""Benchmark one request divided among child zones, against the same request in one zone.

    .venv/bin/python -m benchmarks.split            # 4 and 16 instances, 2 and 10 children
    .venv/bin/python -m benchmarks.split --quick    # a smoke run

Every request is a gang of `instances` consumers (VCPU 1, MEMORY_MB 1024 each)
with a soft anti-affinity rule at level `zone`: at a root over `children`
cells it is divided among them (plan by dry runs, hold every share, confirm
them all: zone/split.py); in one zone holding the same hosts the rule is
about that zone alone and is relaxed, and the zone places the gang itself.
Both run in one process (the in-process transport), one after the other, in
the same run, with one client, so the ratio is the cost of the division
across zones. Prints a table and writes benchmarks/results/split.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.tree import make_tree, write_results
from strato.cli.demo import pct
from strato.zone.inprocess import InProcessTree

console = Console(width=None if sys.stdout.isatty() else 120)


def body(instances: int) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(instances)],
            "project_id": "bench", "user_id": "bench",
            "groups": [{"resources": {"VCPU": 1, "MEMORY_MB": 1024}}],
            "group": f"g-{uuid.uuid4().hex[:12]}",
            "constraints": [{"type": "anti_affinity", "level": "zone", "hard": False}]}


async def drive(tree: InProcessTree, instances: int, requests: int
                ) -> tuple[list[float], int, int, float, float]:
    client = tree.client("global")
    lat: list[float] = []
    placed = failed = 0
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(requests):
        start = time.perf_counter()
        r = await client.post("/strato/v1/schedule", json=body(instances))
        lat.append((time.perf_counter() - start) * 1000)
        if r.status_code == 200:
            placed += len(r.json()["placements"])
        else:
            failed += 1
    return lat, placed, failed, time.perf_counter() - t0, time.process_time() - cpu0


async def one(root: Path, fanout: list[int], per_cell: int, instances: int, requests: int
              ) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    tree, hosts = await make_tree(root, fanout, per_cell)
    try:
        await drive(tree, instances, 3)  # warm: first calls load and cache
        lat, placed, failed, wall, cpu = await drive(tree, instances, requests)
    finally:
        await tree.aclose()
    return {"children": fanout[0] if fanout else 0, "hosts": hosts, "instances": instances,
            "requests": requests, "placed": placed, "failed": failed,
            "p50_ms": round(pct(lat, 0.5), 2), "p99_ms": round(pct(lat, 0.99), 2),
            "placements_per_s": round(placed / wall, 1) if wall else 0.0,
            "cpu_ms_per_request": round(1000 * cpu / max(1, requests), 1)}


async def run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    rows = []
    n = 0
    for children in args.children:
        for instances in args.instances:
            per_cell = args.hosts // children
            n += 1
            flat = await one(root / f"flat{n}", [], per_cell * children, instances,
                             args.requests)
            split = await one(root / f"split{n}", [children], per_cell, instances,
                              args.requests)
            ratio = split["p50_ms"] / flat["p50_ms"] if flat["p50_ms"] else None
            rows.append({"flat": flat, "split": split,
                         "p50_ratio": None if ratio is None else round(ratio, 2),
                         "rate_ratio": round(split["placements_per_s"]
                                             / flat["placements_per_s"], 2)
                         if flat["placements_per_s"] else None})
            console.print(f"{children} children, {instances} instances: one zone p50 "
                          f"{flat['p50_ms']} ms, divided p50 {split['p50_ms']} ms "
                          f"(x{rows[-1]['p50_ratio']})")
    return rows


def table(rows: Sequence[dict[str, Any]]) -> Table:
    t = Table(title="a gang divided among child zones vs the same gang in one zone "
              "(in-process, one client)")
    for col in ("children", "instances", "one zone p50/p99 ms", "divided p50/p99 ms",
                "p50 ratio", "placements/s one zone", "divided", "failed"):
        t.add_column(col, justify="right")
    for r in rows:
        f, s = r["flat"], r["split"]
        t.add_row(str(s["children"]), str(s["instances"]), f"{f['p50_ms']}/{f['p99_ms']}",
                  f"{s['p50_ms']}/{s['p99_ms']}", f"x{r['p50_ratio']}",
                  str(f["placements_per_s"]), str(s["placements_per_s"]),
                  f"{f['failed']}/{s['failed']}")
    return t


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--children", type=int, nargs="+", default=[2, 10])
    ap.add_argument("--instances", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--hosts", type=int, default=2000, help="hosts in all")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="benchmarks/results/split.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.hosts, args.requests = 200, 20
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strato-bench-split-") as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    console.print(table(rows))
    write_results(args.json, "split", load_before, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
