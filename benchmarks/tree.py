"""Benchmark the zone tree: POST /strato/v1/schedule at the root of a tree of zones.

    .venv/bin/python -m benchmarks.tree            # all three parts, as published
    .venv/bin/python -m benchmarks.tree --quick    # small sizes, a minute or two

Three parts, each request one new consumer asking `VCPU:1,MEMORY_MB:1024`
(nothing else, so every zone could take it and the figures are the tree's
own cost), `delegate` and `best` modes:

* **inprocess**: the in-process transport (`strato.zone.inprocess`), root ->
  `--regions` regions -> `--cells` cells each, `--per-cell` hosts per cell
  (default 10 x 10 x 1,000 = 100,000 hosts in 111 zones, each its own SQLite
  file copied from one migrated template and bulk-loaded through the store).
  Sequential requests (one client), then `--clients` concurrent ones.
* **http**: the seven-process tree of `strato demo` (root, two regions, four
  cells of `--http-hosts`/4 hosts) on loopback, 1 and 8 client threads.
  Reports the zones' CPU per request too: the machine is shared, and CPU-ms
  per request does not depend on what else runs.
* **depth**: the same `--depth-cells` x `--per-cell` hosts as one zone
  (depth 1), root -> cells (depth 2), root -> 2 regions -> cells (depth 3),
  in-process, sequential: what each extra level costs.

Servers run with their defaults (untuned). Latencies are per call, measured by
the client; placements/s is successful placements over wall time. Prints
tables and writes benchmarks/results/tree.json (or --json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from strato.cli.demo import (
    HEADERS,
    Options,
    ZoneDef,
    ZoneProcesses,
    build,
    bulk_load,
    pct,
    plan_hosts,
)
from strato.zone.inprocess import InProcessTree, ZoneSpec
from strato.zone.inprocess import build as build_inprocess

# Wide enough for the tables when the output goes to a file.
console = Console(width=None if sys.stdout.isatty() else 120)


# --request-ids: every request carries a fresh request_id, as a client that
# retries after a lost answer must send (then a single zone keeps it in its
# ledger too, as every zone of a tree does with the id it makes up).
REQUEST_IDS = False


def request(mode: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "consumers": [str(uuid.uuid4())], "project_id": "bench", "user_id": "bench",
        "groups": [{"resources": {"VCPU": 1, "MEMORY_MB": 1024}}], "mode": mode}
    if REQUEST_IDS:
        body["request_id"] = f"bench-{uuid.uuid4().hex}"
    return body


def figures(part: str, shape: str, mode: str, clients: int, latencies: Sequence[float],
            placed: int, failed: int, seconds: float, cpu_s: float | None,
            **extra: Any) -> dict[str, Any]:
    n = len(latencies)
    return {"part": part, "shape": shape, "mode": mode, "clients": clients, "requests": n,
            "placed": placed, "failed": failed, "seconds": round(seconds, 3),
            "placements_per_s": round(placed / seconds, 1) if seconds else 0.0,
            "p50_ms": round(pct(latencies, 0.5), 2), "p99_ms": round(pct(latencies, 0.99), 2),
            "cpu_ms_per_request": None if cpu_s is None or not n
            else round(1000 * cpu_s / n, 1), **extra}


# -- in-process trees ----------------------------------------------------------------------

def tree_specs(fanout: Sequence[int]) -> list[ZoneSpec]:
    """Root `global`, then one level per entry of `fanout`; location prefixes nest so
    that a parent can prune by them (z3/z3-1/...)."""
    specs = [ZoneSpec("global")]
    level = [specs[0]]
    for width in fanout:
        below = []
        for parent in level:
            for i in range(width):
                name = f"z{i}" if parent.parent is None else f"{parent.name}-{i}"
                prefix = name if parent.location_prefix is None else (
                    f"{parent.location_prefix}/{name}")
                below.append(ZoneSpec(name, parent=parent.name, location_prefix=prefix))
        specs += below
        level = below
    return specs


async def make_tree(root_dir: Path, fanout: Sequence[int], per_cell: int,
                    seed: int = 1) -> tuple[InProcessTree, int]:
    """The tree, with hosts bulk-loaded into its leaves; returns it and its host count."""
    specs = tree_specs(fanout)
    tree = build_inprocess(root_dir, specs)
    parents = {s.parent for s in specs}
    leaves = [s for s in specs if s.name not in parents]
    rng = random.Random(seed)
    aggregate = str(uuid.uuid4())
    for leaf in leaves:
        hosts = plan_hosts(ZoneDef(leaf.name, prefix=leaf.location_prefix or leaf.name),
                           per_cell, rng)
        bulk_load(tree.dbs[leaf.name], hosts, aggregate)
    await tree.link()
    # Every zone loads its index and every parent caches its children's summaries.
    r = await tree.client("global").get("/strato/v1/summary?fresh=true")
    r.raise_for_status()
    assert r.json()["providers"] == per_cell * len(leaves), r.json()["providers"]
    return tree, per_cell * len(leaves)


async def drive(tree: InProcessTree, mode: str, requests: int, clients: int,
                max_seconds: float) -> tuple[list[float], int, int, float, float]:
    """(latencies ms, placed, failed, wall s, process CPU s) of `requests` calls."""
    client = tree.client("global")
    latencies: list[float] = []
    placed = failed = 0
    sent = 0
    t0, cpu0 = time.perf_counter(), time.process_time()

    async def worker() -> None:
        nonlocal placed, failed, sent
        while sent < requests and time.perf_counter() - t0 < max_seconds:
            sent += 1
            start = time.perf_counter()
            r = await client.post("/strato/v1/schedule", json=request(mode))
            latencies.append((time.perf_counter() - start) * 1000)
            if r.status_code == 200:
                placed += len(r.json()["placements"])
            else:
                failed += 1

    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, placed, failed, time.perf_counter() - t0, time.process_time() - cpu0


async def inprocess_part(args: argparse.Namespace, root_dir: Path) -> list[dict[str, Any]]:
    fanout = [args.regions, args.cells]
    t0 = time.perf_counter()
    tree, hosts = await make_tree(root_dir, fanout, args.per_cell)
    zones = len(tree.apps)
    console.print(f"in-process tree: {zones} zones, {hosts:,} hosts, built and loaded in "
                  f"{time.perf_counter() - t0:.0f}s")
    shape = f"{zones} zones, {hosts:,} hosts"
    out = []
    try:
        for mode in ("delegate", "best"):
            await drive(tree, mode, 5, 1, 60)  # warm: first calls load and cache
            for clients in (1, args.clients):
                lat, placed, failed, wall, cpu = await drive(
                    tree, mode, args.requests, clients, args.run_seconds)
                out.append(figures("inprocess", shape, mode, clients, lat, placed, failed,
                                   wall, cpu, zones=zones, hosts=hosts))
    finally:
        await tree.aclose()
    return out


async def depth_part(args: argparse.Namespace, root_dir: Path) -> list[dict[str, Any]]:
    """Every depth built first, then measured in `--depth-rounds` rounds taking
    turns (depth 1, 2, 3, 1, 2, 3, ...), so that the machine's speed, which
    drifts from minute to minute here, weighs on every depth alike."""
    cells_n = args.depth_cells
    shapes: list[tuple[int, list[int], int]] = [
        (1, [], cells_n * args.per_cell),            # one zone holds every host
        (2, [cells_n], args.per_cell),               # root -> cells
        (3, [2, cells_n // 2], args.per_cell),       # root -> 2 regions -> cells
    ]
    trees: list[tuple[int, InProcessTree, int]] = []
    rounds = max(1, args.depth_rounds)
    each = max(1, args.depth_requests // rounds)
    kept: dict[tuple[int, str], list[Any]] = {}
    # Each round's p50 of depth d over depth 1's, per mode: the machine's
    # speed drifts between rounds, so the spread of these says how far one
    # pooled ratio can be trusted.
    round_ratios: dict[tuple[int, str], list[float]] = {}
    try:
        for depth, fanout, per_leaf in shapes:
            where = root_dir / f"depth{depth}"
            where.mkdir()
            tree, hosts = await make_tree(where, fanout, per_leaf)
            trees.append((depth, tree, hosts))
            for mode in ("delegate", "best"):
                await drive(tree, mode, 5, 1, 60)  # warm: first calls load and cache
        for _ in range(rounds):
            for mode in ("delegate", "best"):
                p50s: dict[int, float] = {}
                for depth, tree, _hosts in trees:
                    lat, placed, failed, wall, cpu = await drive(
                        tree, mode, each, 1, args.run_seconds / rounds)
                    if lat:
                        p50s[depth] = pct(lat, 0.5)
                    got = kept.setdefault((depth, mode), [[], 0, 0, 0.0, 0.0])
                    got[0] += lat
                    got[1] += placed
                    got[2] += failed
                    got[3] += wall
                    got[4] += cpu
                for depth, p50 in p50s.items():
                    if depth != 1 and p50s.get(1):
                        round_ratios.setdefault((depth, mode), []).append(p50 / p50s[1])
    finally:
        for _, tree, _ in trees:
            await tree.aclose()
    out = []
    for depth, tree, hosts in trees:
        for mode in ("delegate", "best"):
            lat, placed, failed, wall, cpu = kept.get((depth, mode), [[], 0, 0, 0.0, 0.0])
            out.append(figures("depth", f"depth {depth}: {len(tree.apps)} zone(s)", mode,
                               1, lat, placed, failed, wall, cpu, depth=depth,
                               zones=len(tree.apps), hosts=hosts, rounds=rounds))
    one = {r["mode"]: r["p50_ms"] for r in out if r["depth"] == 1}
    for r in out:
        r["p50_vs_depth1"] = round(r["p50_ms"] / one[r["mode"]], 2) if one.get(r["mode"]) \
            else None
        ratios = sorted(round_ratios.get((r["depth"], r["mode"]), []))
        if ratios:
            r["round_ratios"] = {"median": round(pct(ratios, 0.5), 2),
                                 "min": round(ratios[0], 2), "max": round(ratios[-1], 2),
                                 "rounds": len(ratios)}
    return out


# -- the seven-process tree over HTTP ------------------------------------------------------

def http_run(url: str, mode: str, requests: int, clients: int, max_seconds: float
             ) -> tuple[list[float], int, int, float]:
    latencies: list[float] = []
    counts = {"placed": 0, "failed": 0, "sent": 0}
    lock = threading.Lock()
    t0 = time.perf_counter()

    def worker() -> None:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
            while True:
                with lock:
                    if counts["sent"] >= requests or time.perf_counter() - t0 > max_seconds:
                        return
                    counts["sent"] += 1
                start = time.perf_counter()
                r = c.post("/strato/v1/schedule", json=request(mode))
                ms = (time.perf_counter() - start) * 1000
                with lock:
                    latencies.append(ms)
                    if r.status_code == 200:
                        counts["placed"] += len(r.json()["placements"])
                    else:
                        counts["failed"] += 1

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, counts["placed"], counts["failed"], time.perf_counter() - t0


def http_part(args: argparse.Namespace, root_dir: Path) -> list[dict[str, Any]]:
    zp = ZoneProcesses(root_dir)
    out = []
    try:
        t0 = time.perf_counter()
        build(zp, Options(providers=args.http_hosts, api_sample=0), Console(quiet=True))
        console.print(f"seven-process tree: {args.http_hosts:,} hosts, started in "
                      f"{time.perf_counter() - t0:.0f}s")
        url = zp.url(zp.zones[0].name)
        shape = f"7 processes, {args.http_hosts:,} hosts"
        for mode in ("delegate", "best"):
            http_run(url, mode, 10, 1, 60)  # warm connections and summaries
            for clients in (1, 8):
                cpu0, me0 = zp.cpu_seconds(), time.process_time()
                lat, placed, failed, wall = http_run(url, mode, args.http_requests, clients,
                                                     args.run_seconds)
                out.append(figures("http", shape, mode, clients, lat, placed, failed, wall,
                                   zp.cpu_seconds() - cpu0, client_cpu_ms_per_request=round(
                                       1000 * (time.process_time() - me0) / max(1, len(lat)),
                                       1)))
    finally:
        zp.stop()
    return out


# -- output ----------------------------------------------------------------------------------

def table(title: str, rows: Sequence[dict[str, Any]]) -> Table:
    t = Table(title=title)
    for col in ("shape", "mode", "clients", "requests", "placements/s", "p50 ms", "p99 ms",
                "CPU ms/req"):
        t.add_column(col, justify="left" if col in ("shape", "mode") else "right")
    for r in rows:
        t.add_row(r["shape"], r["mode"], str(r["clients"]),
                  f"{r['requests']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
                  f"{r['placements_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
                  "-" if r["cpu_ms_per_request"] is None else f"{r['cpu_ms_per_request']:.0f}")
    return t


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--parts", default="inprocess,http,depth")
    ap.add_argument("--regions", type=int, default=10)
    ap.add_argument("--cells", type=int, default=10, help="cells per region")
    ap.add_argument("--per-cell", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=300, help="per in-process run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--http-hosts", type=int, default=2000)
    ap.add_argument("--http-requests", type=int, default=400)
    ap.add_argument("--depth-cells", type=int, default=10)
    ap.add_argument("--depth-requests", type=int, default=400,
                    help="per depth and mode, over all rounds")
    ap.add_argument("--depth-rounds", type=int, default=8,
                    help="rounds in which the depths take turns")
    ap.add_argument("--run-seconds", type=float, default=60.0, help="cap per run")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--json", default="benchmarks/results/tree.json")
    ap.add_argument("--sqlite-synchronous", choices=("FULL", "NORMAL"), default=None,
                    help="the HTTP zones' durability (strato serve --sqlite-synchronous); "
                    "default: theirs (FULL)")
    ap.add_argument("--access-log", action="store_true",
                    help="keep the HTTP zones' access lines (off by default here: a "
                    "formatted line per request per zone, which code before them "
                    "did not pay)")
    ap.add_argument("--ledger-commit", choices=("sync", "async"), default=None,
                    help="the HTTP zones' ledger commits (strato serve --ledger-commit); "
                    "default: theirs (sync)")
    ap.add_argument("--request-ids", action="store_true",
                    help="every request carries a fresh request_id (a client that can "
                    "retry safely), at every depth")
    args = ap.parse_args(argv)
    global REQUEST_IDS
    REQUEST_IDS = args.request_ids
    if not args.access_log:
        os.environ["STRATO_ACCESS_LOG"] = "0"
    if args.ledger_commit:
        os.environ["STRATO_LEDGER_COMMIT"] = args.ledger_commit
    if args.sqlite_synchronous:
        os.environ["STRATO_SQLITE_SYNCHRONOUS"] = args.sqlite_synchronous
    if args.quick:
        args.regions, args.cells, args.per_cell = 2, 2, 200
        args.requests, args.http_hosts, args.http_requests = 40, 400, 60
        args.depth_cells, args.depth_requests, args.depth_rounds = 4, 40, 2
    parts = set(args.parts.split(","))
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="strato-bench-tree-") as tmp:
        root = Path(tmp)
        if "inprocess" in parts:
            (root / "inprocess").mkdir()
            results["inprocess"] = asyncio.run(inprocess_part(args, root / "inprocess"))
            console.print(table(f"(a) in-process: root -> {args.regions} regions -> "
                                f"{args.cells} cells each (CPU: this process)",
                                results["inprocess"]))
        if "http" in parts:
            (root / "http").mkdir()
            results["http"] = http_part(args, root / "http")
            console.print(table("(b) HTTP: root -> 2 regions -> 4 cells (CPU: the seven "
                                "zones)", results["http"]))
        if "depth" in parts:
            (root / "depth").mkdir()
            results["depth"] = asyncio.run(depth_part(args, root / "depth"))
            console.print(table(f"(c) cost per level: the same "
                                f"{args.depth_cells * args.per_cell:,} hosts, in-process, one "
                                "client", results["depth"]))
            for r in results["depth"]:
                if r["depth"] == 3 and r["p50_vs_depth1"] is not None:
                    goal = " (issue 18's goal: <= x2, " + (
                        "met)" if r["p50_vs_depth1"] <= 2.0 else "not met)") \
                        if r["mode"] == "delegate" else ""
                    spread = r.get("round_ratios")
                    rounds_said = "" if not spread else (
                        f"; per round x{spread['median']} median, x{spread['min']}-"
                        f"x{spread['max']} over {spread['rounds']} rounds")
                    console.print(f"{r['mode']}: depth 3 p50 x{r['p50_vs_depth1']} of depth "
                                  f"1{rounds_said}{goal}")
    write_results(args.json, "tree", load_before,
                  sqlite_synchronous=args.sqlite_synchronous or "FULL",
                  ledger_commit=args.ledger_commit or "sync", request_ids=args.request_ids,
                  **results)
    return 0


def write_results(where: str, name: str, load_before: tuple[float, float, float],
                  **fields: Any) -> None:
    """The run's figures as JSON, with when, how and the machine's load."""
    doc = {"benchmark": name, "when": datetime.now(UTC).isoformat(timespec="seconds"),
           "argv": sys.argv[1:], "cores": os.cpu_count(),
           "load_average_before": [round(x, 1) for x in load_before],
           "load_average_after": [round(x, 1) for x in os.getloadavg()], **fields}
    path = Path(where)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {path}; load average {load_before[0]:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")


if __name__ == "__main__":
    sys.exit(main())
