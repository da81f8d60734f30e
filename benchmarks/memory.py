"""Resident memory of one zone against its size (issue 18: under 2 KiB per
provider above an empty zone).

    .venv/bin/python -m benchmarks.memory                      # 0, 10,000 and 100,000 hosts
    .venv/bin/python -m benchmarks.memory --sizes 0,10000      # a minute

For each size: the data set of `benchmarks/spec.py` bulk-loaded into a fresh
SQLite file, a real `strato serve` on it, then its RSS (psutil) at start (the
index is loaded before the server says it is ready), after a
`GET /allocation_candidates`, after a `POST /strato/v1/schedule` (the
scheduler's host arrays) and after `GET /strato/v1/summary`. The figure that
counts is the last one, less the empty zone's, per provider row (a nested
host is three rows) and per host. RSS is what the machine gives the process,
not a timing: it does not swing with the machine's speed. Writes
benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.candidates import HEADERS, Server, load_specs
from benchmarks.spec import make_specs
from strato.store.db import Database
from strato.store.migrate import upgrade

GOAL_KIB_PER_PROVIDER = 2.0


def measure(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="strato-mem-") as tmp:
        url = f"sqlite:///{tmp}/zone.db"
        specs = make_specs(n, seed=1) if n else []
        db = Database(url)
        if specs:
            load_specs(db, specs)
        else:
            upgrade(db)
        db.engine.dispose()
        with Server(url, Path(tmp) / "server.log") as server, httpx.Client(
                base_url=server.url, headers=HEADERS, timeout=300) as c:
            mib: dict[str, float] = {"start": server.rss_bytes() / 2**20}
            c.get("/allocation_candidates?resources=VCPU:1,MEMORY_MB:1024&limit=10")
            mib["after_candidates"] = server.rss_bytes() / 2**20
            c.post("/strato/v1/schedule", json={
                "consumers": [str(uuid.uuid4())], "project_id": "bench", "user_id": "bench",
                "groups": [{"resources": {"VCPU": 1, "MEMORY_MB": 1024}}]})
            mib["after_schedule"] = server.rss_bytes() / 2**20
            c.get("/strato/v1/summary")
            mib["after_summary"] = server.rss_bytes() / 2**20
    return {"hosts": n, "provider_rows": len(specs),
            **{f"rss_mib_{k}": round(v, 1) for k, v in mib.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,10000,100000",
                    help="hosts per run, comma separated (0: the empty zone, always run)")
    ap.add_argument("--json", default="benchmarks/results/memory.json")
    args = ap.parse_args(argv)
    sizes = sorted({0, *(int(s) for s in args.sizes.split(",") if s.strip())})
    rows = []
    for n in sizes:
        print(f"{n:,} hosts: loading and starting a zone ...", flush=True)
        rows.append(measure(n))
    empty = rows[0]["rss_mib_after_summary"]
    print(f"\n{'hosts':>8} {'rows':>8} {'RSS start':>10} {'RSS warm':>9} "
          f"{'above empty':>11} {'KiB/row':>8} {'KiB/host':>9}  goal < {GOAL_KIB_PER_PROVIDER} "
          "KiB/row")
    for r in rows:
        above = r["rss_mib_after_summary"] - empty
        r["mib_above_empty"] = round(above, 1)
        if r["provider_rows"]:
            r["kib_per_provider_row"] = round(above * 1024 / r["provider_rows"], 2)
            r["kib_per_host"] = round(above * 1024 / r["hosts"], 2)
            r["goal_met"] = r["kib_per_provider_row"] < GOAL_KIB_PER_PROVIDER
        print(f"{r['hosts']:>8,} {r['provider_rows']:>8,} {r['rss_mib_start']:>9.1f}M "
              f"{r['rss_mib_after_summary']:>8.1f}M {above:>10.1f}M "
              f"{r.get('kib_per_provider_row', 0):>8.2f} {r.get('kib_per_host', 0):>9.2f}  "
              + ("" if not r["provider_rows"] else "met" if r["goal_met"] else "NOT met"))
    out = {"benchmark": "memory", "when": datetime.now(UTC).isoformat(timespec="seconds"),
           "argv": list(argv) if argv is not None else None, "results": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
