"""Claim cost versus zone size: PUT /allocations over HTTP against a real server.

    python -m benchmarks.claims --sizes 100,100000 --claims 2000 --clients 1,8

For each size: a fresh SQLite (or --db-base PostgreSQL) database is filled in
bulk, a real `strato serve` process is started, and new consumers are claimed
on random providers, sequentially and with concurrent clients. It prints
claims/s and p50/p99 latency per size, plus the store's claim() alone (no
HTTP), and writes JSON to benchmarks/results/claims.json. The point: the cost
of a claim must not depend on how many providers the zone has.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from benchmarks.populate import populate
from strato.process import ServerProcess
from strato.store.allocations import ConsumerClaim, claim
from strato.store.db import Database

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
RESOURCES = {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 10}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def http_claims(url: str, uuids: list[str], n: int, clients: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    plan = [rng.choice(uuids) for _ in range(n)]
    per_client = [plan[i::clients] for i in range(clients)]
    latencies: list[float] = []
    failures = 0

    def run(targets: list[str]) -> tuple[list[float], int]:
        lat, bad = [], 0
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
            for rp in targets:
                body = {"allocations": {rp: {"resources": RESOURCES}}, "project_id": "bench",
                        "user_id": "bench", "consumer_generation": None,
                        "consumer_type": "INSTANCE"}
                t = time.perf_counter()
                r = c.put(f"/allocations/{uuid.uuid4()}", json=body)
                lat.append((time.perf_counter() - t) * 1000)
                bad += r.status_code != 204
        return lat, bad

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for lat, bad in pool.map(run, per_client):
            latencies += lat
            failures += bad
    elapsed = time.perf_counter() - t0
    return {"clients": clients, "claims": n, "failures": failures,
            "claims_per_s": n / elapsed, "p50_ms": pct(latencies, 0.5),
            "p99_ms": pct(latencies, 0.99), "mean_ms": statistics.fmean(latencies)}


def store_claims(db: Database, uuids: list[str], n: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    lat = []
    t0 = time.perf_counter()
    for _ in range(n):
        rp = rng.choice(uuids)
        t = time.perf_counter()
        with db.write() as conn:
            claim(conn, [ConsumerClaim(str(uuid.uuid4()), {rp: RESOURCES}, "bench", "bench",
                                       None, None)])
        lat.append((time.perf_counter() - t) * 1000)
    elapsed = time.perf_counter() - t0
    return {"clients": 0, "claims": n, "claims_per_s": n / elapsed,
            "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,100000")
    ap.add_argument("--claims", type=int, default=2000)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--out", default="benchmarks/results/claims.json")
    args = ap.parse_args()
    console = Console()
    results: list[dict[str, Any]] = []
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="strato-bench-") as tmp:
            url = f"sqlite:///{Path(tmp) / 'zone.db'}"
            db = Database(url)
            t = time.perf_counter()
            pop = populate(db, size)
            console.print(f"[bold]{size}[/] providers loaded in {time.perf_counter() - t:.1f}s")
            row = store_claims(db, pop.uuids, min(args.claims, 1000), seed=size)
            results.append({"size": size, "path": "store claim()", **row})
            db.dispose()
            with ServerProcess(url, log_path=Path(tmp) / "server.log") as server:
                for clients in [int(c) for c in args.clients.split(",")]:
                    row = http_claims(server.url, pop.uuids, args.claims, clients, seed=size)
                    results.append({"size": size, "path": "HTTP PUT /allocations", **row})
                    console.print(f"  {clients} client(s): {row['claims_per_s']:.0f} claims/s")
    table = Table(title="Claim cost vs zone size (SQLite, one server process)")
    for col in ("providers", "path", "clients", "claims/s", "p50 ms", "p99 ms"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r["size"]), r["path"], str(r["clients"] or "-"),
                      f"{r['claims_per_s']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}")
    console.print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
