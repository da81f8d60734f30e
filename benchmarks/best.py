"""`best` mode against `delegate` on one in-process tree, nested widths taking turns.

    python -m benchmarks.best [--regions 10] [--cells 10] [--per-cell 1000]
                              [--requests 200] [--rounds 3] [--nested 3,1]

The root of `regions` x `cells` cells answers POST /strato/v1/schedule in
`delegate` and in `best` mode, for each `best_nested_width` in `--nested`,
round after round on the same tree (same run, so the ratios compare): p50 of
each with 1 and 8 clients, the best / delegate ratio (issue 18's goal: x3 or
less with one client, no failed request with 8), and failures. Warm: each
setting answers a few requests first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.tree import drive, make_tree, write_results

console = Console()


async def rounds(args: argparse.Namespace, where: Path) -> list[dict[str, Any]]:
    tree, hosts = await make_tree(where, [args.regions, args.cells], args.per_cell)
    out: list[dict[str, Any]] = []
    try:
        for rnd in range(1, args.rounds + 1):
            for nested in args.nested:
                for app in tree.apps.values():
                    app.state.tree.config.best_nested_width = nested
                await drive(tree, "best", 5, 1, 60)  # warm
                row: dict[str, Any] = {"round": rnd, "nested": nested, "hosts": hosts}
                for mode in ("delegate", "best"):
                    for clients in (1, 8):
                        lat, _, failed, _, _ = await drive(tree, mode, args.requests, clients,
                                                           120)
                        row[f"{mode}_{clients}_p50"] = round(statistics.median(lat), 2)
                        row[f"{mode}_{clients}_failed"] = failed
                for clients in (1, 8):
                    row[f"ratio_{clients}"] = round(
                        row[f"best_{clients}_p50"] / row[f"delegate_{clients}_p50"], 2)
                out.append(row)
                console.print(f"round {rnd}, nested width {nested}: best x{row['ratio_1']} "
                              f"delegate (1 client), x{row['ratio_8']} (8)")
    finally:
        await tree.aclose()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--regions", type=int, default=10)
    ap.add_argument("--cells", type=int, default=10, help="cells per region")
    ap.add_argument("--per-cell", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nested", default="3,1", help="best_nested_width values, in turn")
    ap.add_argument("--json", default="benchmarks/results/best.json")
    args = ap.parse_args(argv)
    args.nested = [int(n) for n in args.nested.split(",")]
    os.environ.setdefault("STRATO_ACCESS_LOG", "0")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="strato-bench-best-") as tmp:
        rows = asyncio.run(rounds(args, Path(tmp)))
    t = Table(title=f"best against delegate, {1 + args.regions + args.regions * args.cells} "
                    f"zones, {args.regions * args.cells * args.per_cell:,} hosts, in process")
    for col in ("round", "nested width", "delegate p50 ms", "best p50 ms", "ratio",
                "8 clients: delegate", "best", "ratio", "failed"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["round"]), str(r["nested"]), str(r["delegate_1_p50"]),
                  str(r["best_1_p50"]), f"x{r['ratio_1']}", str(r["delegate_8_p50"]),
                  str(r["best_8_p50"]), f"x{r['ratio_8']}",
                  str(r["best_1_failed"] + r["best_8_failed"]))
    console.print(t)
    for nested in args.nested:
        mine = [r["ratio_1"] for r in rows if r["nested"] == nested]
        failed = sum(r["best_8_failed"] for r in rows if r["nested"] == nested)
        med = statistics.median(mine)
        console.print(f"nested width {nested}: median x{med} (goal x3: "
                      f"{'met' if med <= 3 else 'not met'}), {failed} failed with 8 clients")
    write_results(args.json, "best", load, rows=rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
