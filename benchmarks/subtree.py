"""`GET /allocation_candidates` at the root of a tree against one zone.

The root of a tree (1 root over 10 cells, 1,000 hosts each) answers for its
subtree by asking every cell and merging (zone/subtree.py); one zone holding
the same 10,000 hosts answers from its own index. Both in one process (the
zones talk through in-process ASGI calls), same run, same query:

    python -m benchmarks.subtree [--cells 10] [--per-cell 1000] [--requests 300]

Prints p50/p99 and requests/s for 1 and 8 clients, and the ratio (goal:
the tree within 2x of the flat zone, issue "the tree as one Placement").
Warm: each shape answers a few requests first (indexes loaded, connections
made); the figures are of the requests after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.tree import make_tree, write_results

console = Console()
QUERY = "/allocation_candidates?resources=VCPU:1,MEMORY_MB:512&limit=10"
HEADERS = {"openstack-api-version": "placement 1.39"}


async def measure(client: Any, requests: int, clients: int) -> dict[str, float]:
    lat: list[float] = []
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t = time.perf_counter()
            r = await client.get(QUERY, headers=HEADERS)
            lat.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200 and len(r.json()["allocation_requests"]) == 10, r.text

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    lat.sort()
    return {"p50": round(statistics.median(lat), 2),
            "p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
            "per_s": round(len(lat) / wall, 1)}


async def shape(where: Path, fanout: Sequence[int], per_leaf: int, requests: int
                ) -> dict[int, dict[str, float]]:
    tree, _ = await make_tree(where, fanout, per_leaf)
    try:
        client = tree.client("global")
        await measure(client, 10, 1)  # warm
        return {c: await measure(client, requests, c) for c in (1, 8)}
    finally:
        await tree.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cells", type=int, default=10)
    ap.add_argument("--per-cell", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--json", default="benchmarks/results/subtree.json")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    hosts = args.cells * args.per_cell
    with tempfile.TemporaryDirectory(prefix="strato-bench-subtree-") as tmp:
        (Path(tmp) / "flat").mkdir()
        (Path(tmp) / "tree").mkdir()
        flat = asyncio.run(shape(Path(tmp) / "flat", [], hosts, args.requests))
        tree = asyncio.run(shape(Path(tmp) / "tree", [args.cells], args.per_cell,
                                 args.requests))
    t = Table(title=f"GET /allocation_candidates, limit 10, {hosts:,} hosts, in process")
    for col in ("clients", "one zone p50 ms", "p99", "per s", f"root of {args.cells} cells p50",
                "p99", "per s", "p50 ratio"):
        t.add_column(col, justify="right")
    ratios = {}
    for c in (1, 8):
        ratios[c] = round(tree[c]["p50"] / flat[c]["p50"], 2)
        t.add_row(str(c), *(str(flat[c][k]) for k in ("p50", "p99", "per_s")),
                  *(str(tree[c][k]) for k in ("p50", "p99", "per_s")), f"{ratios[c]}x")
    console.print(t)
    met = ratios[1] <= 2.0
    console.print(f"goal (the tree within 2x of one zone, 1 client): "
                  f"{'met' if met else 'not met'} ({ratios[1]}x)")
    write_results(args.json, "subtree", load, flat=flat, tree=tree, ratios=ratios,
                  cells=args.cells, per_cell=args.per_cell)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
