"""Benchmark POST /strato/v1/schedule against a real server, next to real Placement.

    .venv/bin/python -m benchmarks.schedule --sizes 10000,100000 --clients 1,8 [--peer]

For each size: build the shared data set (`benchmarks.spec.make_specs`: VCPU,
MEMORY_MB, DISK_GB; 10% nested hosts, 10% with a trait, ten aggregates),
bulk-load it into a fresh SQLite zone and give every host a location
`siteS/roomR/rackK/host-NNNNNN` (40 hosts a rack, 10 racks a room, 5 rooms a
site), so rack-level anti-affinity is meaningful. Then start `strato serve`
(defaults, untuned) and, per client count, time `--requests` calls of
`POST /strato/v1/schedule`, one new consumer per call, `VCPU:1,MEMORY_MB:1024`:

* `plain`: no constraints;
* `anti_affinity`: a hard `anti_affinity` rule at rack level in every request;
  each client starts a new server group every `--group-size` requests, so the
  rule stays satisfiable (a group never needs more racks than there are);
* `dry_run`: as `plain` with `dry_run: true`, nothing claimed: what planning
  alone costs, to tell it from the claim's write transaction.
* `mixed` (issue 18): each request one of 20 shapes drawn at random (sizes,
  required and forbidden traits, aggregates, two granular groups, `isolate`
  over NUMA nodes, several instances atomic or not, anti-affinity and
  affinity, topology spread, the pack weigher), and after a placement, one
  time in three, an earlier placement released (`DELETE /allocations/{c}`),
  so that about a third of what is placed is freed during the run. Its rate
  is compared with `plain`'s in the same run (goal: at least 70%).

A run stops after `--requests` calls or `--run-seconds`, whichever comes first,
so 100,000 hosts finish in bounded time; the table says how many were made.
With `--rounds N` the modes take turns N times on the same server: each ratio
(claim against dry run, mixed against plain) is taken within a round, and the
verdict is the median of the rounds' ratios. This machine's speed moves by
half within seconds, so one pair of 2-second runs is a coin toss near a goal.

Placements/s is successful placements over wall time; p50/p99 are per call.
Each client thread keeps one HTTP/1.1 connection open (the standard library's
`http.client`): it costs the machine ~0.2 CPU-ms a call where an httpx client
cost ~1.2, and on two cores that CPU comes out of the server's share.

`--peer` (sizes of 10,000 hosts or fewer) loads the same specs into real
OpenStack Placement 16.0.0 (`benchmarks.peer`) and does the same job the way
Nova does: GET /allocation_candidates (limit 10), then PUT /allocations for
the first candidate, the next on 409, GET again when used up. Placement takes
seconds per placement at 10,000 hosts, so it gets `--peer-requests` placements
per client count (default 16), far fewer than Strato: its rate is measured over
a short run and its p99 over few samples.

Prints a table and writes benchmarks/results/schedule.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from benchmarks import slowdisk
from benchmarks.candidates import load_specs
from benchmarks.client import HEADERS, KeepAlive
from benchmarks.spec import TRAIT, ProviderSpec, aggregate_uuids, make_specs
from strato.process import ServerProcess
from strato.store.db import Database
from strato.store.schema import provider_meta, resource_providers
from strato.store.util import utcnow

RESULTS = Path(__file__).parent / "results"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 1024}
HOSTS_PER_RACK = 40
RACKS_PER_ROOM = 10
ROOMS_PER_SITE = 5
PEER_MAX_HOSTS = 10_000
TARGETS = {"placements_per_s": 1000.0, "placements_per_s_min": 500.0,
           "vs_placement": 100.0, "anti_affinity_per_s": 300.0}


# -- data ---------------------------------------------------------------------

def location_of(i: int, name: str) -> str:
    rack = i // HOSTS_PER_RACK
    room = rack // RACKS_PER_ROOM
    site = room // ROOMS_PER_SITE
    return f"site{site}/room{room}/rack{rack}/{name}"


def load(url: str, specs: Sequence[ProviderSpec]) -> int:
    """Specs into the store, plus a location per host (root provider); racks loaded."""
    db = Database(url)
    load_specs(db, specs)
    hosts = [s for s in specs if s.parent_uuid is None]
    with db.write() as conn:
        ids = {u: int(i) for i, u in conn.execute(
            sa.select(resource_providers.c.id, resource_providers.c.uuid)
            .where(resource_providers.c.parent_provider_id.is_(None)))}
        now = utcnow()
        rows = [{"resource_provider_id": ids[s.uuid], "location": location_of(i, s.name),
                 "tags": "[]", "heartbeat": False, "last_report_at": None, "updated_at": now}
                for i, s in enumerate(hosts)]
        for lo in range(0, len(rows), 5000):
            conn.execute(sa.insert(provider_meta), rows[lo: lo + 5000])
    db.dispose()
    return (len(hosts) + HOSTS_PER_RACK - 1) // HOSTS_PER_RACK


# -- measuring ----------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))] if s else float("nan")


@dataclass
class Run:
    placed: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # error code -> count
    retries: int = 0
    latencies: list[float] = field(default_factory=list)
    released: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict[str, Any]:
        return {"requests": len(self.latencies), "placed": self.placed,
                "released": self.released,
                "refused": dict(self.refused), "retries": self.retries,
                "seconds": round(self.seconds, 3),
                "placements_per_s": round(self.placed / self.seconds, 1) if self.seconds
                else 0.0,
                "p50_ms": round(pct(self.latencies, 50) * 1e3, 2),
                "p99_ms": round(pct(self.latencies, 99) * 1e3, 2)}


def body(rule: dict[str, Any] | None, group: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"consumers": [str(uuid.uuid4())], "project_id": "bench",
                           "user_id": "bench", "groups": [{"resources": RESOURCES}]}
    if rule is not None:
        out["group"] = group
        out["constraints"] = [rule]
    return out


def mixed_shapes(aggregates: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The 20 request shapes of the `mixed` mode: (name, body without consumers).
    `n` in a body is its instance count; groups for rules are added per request."""
    a0, a1 = aggregates[0], aggregates[1]
    small = {"VCPU": 1, "MEMORY_MB": 1024}
    return [
        ("small", {"groups": [{"resources": small}]}),
        ("medium", {"groups": [{"resources": {"VCPU": 4, "MEMORY_MB": 8192}}]}),
        ("large", {"groups": [{"resources": {"VCPU": 8, "MEMORY_MB": 32768,
                                             "DISK_GB": 100}}]}),
        ("disk", {"groups": [{"resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 20}}]}),
        ("avx2", {"groups": [{"resources": {"VCPU": 2, "MEMORY_MB": 2048},
                              "required": [TRAIT]}]}),
        ("no_avx2", {"groups": [{"resources": small, "required": [f"!{TRAIT}"]}]}),
        ("aggregate", {"groups": [{"resources": small, "member_of": [[a0]]}]}),
        ("any_aggregate", {"groups": [{"resources": small, "member_of": [[a0, a1]]}]}),
        ("granular", {"groups": [{"resources": small, "suffix": "1"},
                                 {"resources": {"DISK_GB": 10}, "suffix": "2"}],
                      "group_policy": "none"}),
        ("isolate_numa", {"groups": [{"resources": {"VCPU": 1}, "suffix": "1"},
                                     {"resources": {"VCPU": 1}, "suffix": "2"}],
                          "group_policy": "isolate"}),
        ("three", {"n": 3, "groups": [{"resources": small}]}),
        ("four_partial", {"n": 4, "atomic": False, "groups": [{"resources": small}]}),
        ("anti_rack", {"n": 2, "groups": [{"resources": small}],
                       "constraints": [{"type": "anti_affinity", "level": "rack"}]}),
        ("anti_host_soft", {"n": 3, "groups": [{"resources": small}],
                            "constraints": [{"type": "anti_affinity", "level": "host",
                                             "hard": False}]}),
        ("affinity_rack", {"n": 2, "groups": [{"resources": small}],
                           "constraints": [{"type": "affinity", "level": "rack"}]}),
        ("spread_rack", {"n": 4, "groups": [{"resources": small}],
                         "constraints": [{"type": "spread", "level": "rack",
                                          "max_skew": 1}]}),
        ("spread_room_cap", {"n": 3, "groups": [{"resources": small}],
                             "constraints": [{"type": "spread", "level": "room",
                                              "max_per_domain": 2}]}),
        ("pack", {"groups": [{"resources": {"VCPU": 2, "MEMORY_MB": 2048}}],
                  "weigher": {"name": "pack"}}),
        ("nested_mix", {"groups": [{"resources": {"VCPU": 2, "MEMORY_MB": 4096,
                                                  "DISK_GB": 50}}]}),
        ("wide_memory", {"groups": [{"resources": {"VCPU": 1, "MEMORY_MB": 65536}}]}),
    ]


def mixed_body(shape: dict[str, Any], tag: str) -> dict[str, Any]:
    out = {k: v for k, v in shape.items() if k != "n"}
    out.update({"consumers": [str(uuid.uuid4()) for _ in range(int(shape.get("n", 1)))],
                "project_id": "bench", "user_id": "bench"})
    if any(c["type"] in ("anti_affinity", "affinity") for c in out.get("constraints", [])):
        out["group"] = tag  # a new server group per request: always satisfiable
    return out


def schedule_run(url: str, requests: int, clients: int, *, mode: str, group_size: int,
                 tag: str, seconds: float, shapes: Sequence[tuple[str, dict[str, Any]]] = ()
                 ) -> Run:
    """Up to `requests` schedule calls spread over `clients` threads, one consumer each
    (`mixed`: a shape of `shapes` each, and releases); clients stop early after
    `seconds` so that slow sizes finish."""
    run = Run()
    rule = {"type": "anti_affinity", "level": "rack"} if mode == "anti_affinity" else None
    start = threading.Barrier(clients)
    deadline = [0.0]

    def client(k: int, share: int) -> None:
        c = KeepAlive(url)
        rng = random.Random(f"{tag}-{k}")
        placed: list[list[str]] = []
        try:
            start.wait()
            for i in range(share):
                if time.perf_counter() > deadline[0]:
                    return
                group = f"{tag}-c{k}-g{i // group_size}" if rule else None
                name = None
                if mode == "mixed":
                    name, shape = rng.choice(shapes)
                    req = mixed_body(shape, f"{tag}-c{k}-{i}")
                else:
                    req = body(rule, group)
                if mode == "dry_run":
                    req["dry_run"] = True
                t = time.perf_counter()
                status, answer = c.post("/strato/v1/schedule", req)
                dt = time.perf_counter() - t
                if mode == "mixed" and status == 200:
                    placed.append([p["consumer_uuid"] for p in answer["placements"]])
                    if rng.random() < 1 / 3 and placed:
                        # Free an earlier placement (a third of what is placed).
                        for consumer in placed.pop(rng.randrange(len(placed))):
                            gone = c.delete(f"/allocations/{consumer}")
                            if gone not in (204, 404):
                                raise RuntimeError(f"release: {gone}")
                        with run.lock:
                            run.released += 1
                with run.lock:
                    run.latencies.append(dt)
                    if status == 200:
                        run.placed += len(answer["placements"])
                        run.retries += int(answer["retries"])
                    elif status == 409:
                        code = str(answer["errors"][0]["code"])
                        if name is not None:
                            code = f"{name}: {code}"  # which shapes were refused
                        run.refused[code] = run.refused.get(code, 0) + 1
                    else:
                        raise RuntimeError(f"schedule: {status} {str(answer)[:500]}")
        finally:
            c.close()

    shares = [requests // clients + (i < requests % clients) for i in range(clients)]
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client, k, s) for k, s in enumerate(shares)]:
            f.result()
    run.seconds = time.perf_counter() - t0
    return run


def fsync_ms(url: str) -> float | None:
    """The server's mean fsync time so far (ms), from its /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    got = {}
    for line in text.splitlines():
        for key in ("sum", "count"):
            if line.startswith(f"strato_db_sync_duration_seconds_{key} "):
                got[key] = float(line.split()[1])
    return round(got["sum"] / got["count"] * 1000, 3) if got.get("count") else None


def strato_size(n: int, specs: Sequence[ProviderSpec], args: argparse.Namespace,
                slow_disk_ms: float = 0.0) -> dict[str, Any]:
    out: dict[str, Any] = {"slow_disk_ms": slow_disk_ms}
    with tempfile.TemporaryDirectory(prefix="strato-sched-bench-") as tmp:
        url = f"sqlite:///{tmp}/zone.db"
        t = time.perf_counter()
        out["racks"] = load(url, specs)
        out["bulk_load_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        server = ServerProcess(url, log_path=Path(tmp) / "server.log",
                               env=slowdisk.env(slow_disk_ms)).start(timeout=600)
        try:
            out["server_start_s"] = round(time.perf_counter() - t, 2)
            with httpx.Client(base_url=server.url, headers=HEADERS, timeout=600) as c:
                t = time.perf_counter()
                r = c.post("/strato/v1/schedule", json={**body(None, None), "dry_run": True})
                assert r.status_code == 200, r.text
                out["first_request_s"] = round(time.perf_counter() - t, 3)
            runs = []
            shapes = mixed_shapes(aggregate_uuids(10, args.seed))
            # Rounds: the modes take turns on one server, so that a ratio of
            # two modes is taken within each round (the machine's speed moves
            # within seconds) and the verdict is the rounds' median.
            for rnd in range(1, args.rounds + 1):
                for clients in args.clients:
                    for mode in args.modes:
                        requests = args.requests if clients > 1 else args.requests // 2
                        turn = f", round {rnd} of {args.rounds}" if args.rounds > 1 else ""
                        _log(f"  {n} hosts, {clients} client(s), {mode}: up to {requests} "
                             f"requests or {args.run_seconds:g} s{turn}")
                        schedule_run(server.url, min(2 * clients, requests), clients,
                                     mode=mode, group_size=args.group_size,
                                     tag=f"warm{clients}{mode}r{rnd}",
                                     seconds=args.run_seconds, shapes=shapes)
                        run = schedule_run(server.url, requests, clients, mode=mode,
                                           group_size=args.group_size,
                                           tag=f"b{clients}{mode}r{rnd}",
                                           seconds=args.run_seconds, shapes=shapes)
                        runs.append({"clients": clients, "mode": mode, "round": rnd,
                                     **run.summary()})
            out["runs"] = runs
            out["fsync_mean_ms"] = fsync_ms(server.url)
        finally:
            server.stop()
    return out


def peer_size(specs: Sequence[ProviderSpec], args: argparse.Namespace,
              db: str = "sqlite") -> dict[str, Any]:
    """Real Placement on `db`, Nova's way: GET candidates, PUT allocations, retry on 409."""
    from benchmarks.peer.placement import PlacementPeer, ensure_peer_venv, nova_claims, verify

    ensure_peer_venv()
    out: dict[str, Any] = {"peer": "openstack-placement 16.0.0", "db": db,
                           "candidate_limit": 10, "runs": []}
    resources = ",".join(f"{rc}:{n}" for rc, n in RESOURCES.items())
    with PlacementPeer(specs=specs, db=db) as peer:
        out["server"] = peer.description
        verify(peer.url, specs)
        for clients in args.clients:
            count = max(args.peer_requests, clients)
            _log(f"  Placement ({db}), {clients} client(s): {count} placements")
            stats = nova_claims(peer.url, resources, count, clients=clients, limit=10)
            s = stats.summary()
            out["runs"].append({"clients": clients, "mode": "plain", "requests": count,
                                "placed": s["placements"], "failures": s["failures"],
                                "retries": s["retries"] + s["server_errors"],
                                "retries_409": s["retries"],
                                "retries_500_locked": s["server_errors"],
                                "seconds": s["seconds"],
                                "placements_per_s": s["placements_per_s"],
                                "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]})
    return out


def git_state() -> dict[str, Any]:
    """What was measured: others change the server while baselines are taken."""
    import subprocess

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], capture_output=True, text=True, timeout=10,
                                  cwd=Path(__file__).parent.parent).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    # Porcelain lines are "XY path": never strip the leading status column.
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--", "strato").splitlines()
             if len(ln) > 3]
    return {"head": git("rev-parse", "HEAD").strip(), "uncommitted_in_strato": dirty}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- report -------------------------------------------------------------------

def _rate(run: dict[str, Any] | None) -> float:
    return float(run["placements_per_s"]) if run else 0.0


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _ratios(rounds: dict[int, dict[tuple[int, str], dict[str, Any]]], top: tuple[int, str],
            bottom: tuple[int, str]) -> list[float]:
    """`top`'s rate over `bottom`'s, per round where both ran."""
    return [_rate(by.get(top)) / _rate(by.get(bottom)) for by in rounds.values()
            if by.get(top) and _rate(by.get(bottom))]


def _each(ratios: Sequence[float], fmt: str) -> str:
    return "" if len(ratios) < 2 else \
        " (rounds: " + ", ".join(format(r, fmt) for r in ratios) + ")"


def verdicts(results: list[dict[str, Any]]) -> list[str]:
    """The issue's targets at 10,000 hosts, 8 clients, SQLite, against what was
    measured. With several rounds, each ratio is taken within a round and the
    verdict is the median of the rounds' ratios (a rate: the rounds' median)."""
    out: list[str] = []
    for r in results:
        if r["hosts"] != 10_000:
            continue
        rounds: dict[int, dict[tuple[int, str], dict[str, Any]]] = {}
        for x in r["strato"]["runs"]:
            rounds.setdefault(int(x.get("round", 1)), {})[(x["clients"], x["mode"])] = x

        def rate(key: tuple[int, str],
                 rounds: dict[int, dict[tuple[int, str], dict[str, Any]]] = rounds
                 ) -> float | None:
            got = [_rate(by[key]) for by in rounds.values() if key in by]
            return _median(got) if got else None

        slow = r["strato"].get("slow_disk_ms") or 0
        claim = _ratios(rounds, (8, "plain"), (8, "dry_run"))
        if claim:
            share = _median(claim)
            disk = f"(each fsync {slow:g} ms slower) " if slow else ""
            out.append(f"{disk}10,000 hosts, 8 clients: schedule and claim at {share:.0%} of "
                       f"the dry run's rate (issue 18's goal 60%){_each(claim, '.0%')}: "
                       f"{'met' if share >= 0.6 else 'MISSED'}")
        if slow:
            continue  # only the claim's ratio to the dry run is asked of a slower disk
        plain, aa = rate((8, "plain")), rate((8, "anti_affinity"))
        if plain is not None:
            verdict = ("met" if plain >= TARGETS["placements_per_s"] else
                       "below target, above minimum" if plain >= TARGETS["placements_per_s_min"]
                       else "MISSED")
            out.append(f"10,000 hosts, 8 clients: {plain:.0f} placements/s "
                       f"(target 1,000, at least 500): {verdict}")
        if aa is not None:
            out.append(f"10,000 hosts, 8 clients, hard rack anti-affinity: {aa:.0f} "
                       f"placements/s (target 300): "
                       f"{'met' if aa >= TARGETS['anti_affinity_per_s'] else 'MISSED'}")
        for clients in sorted({x["clients"] for x in r["strato"]["runs"]}):
            mixed = _ratios(rounds, (clients, "mixed"), (clients, "plain"))
            if mixed:
                share = _median(mixed)
                out.append(f"10,000 hosts, {clients} client(s), 20 shapes with releases: "
                           f"{rate((clients, 'mixed')):.0f} placements/s, {share:.0%} of "
                           f"plain's (target 70%){_each(mixed, '.0%')}: "
                           f"{'met' if share >= 0.7 else 'MISSED'}")
        for key, label in (("placement", "SQLite"), ("placement_postgresql", "PostgreSQL")):
            peer = {x["clients"]: x for x in r.get(key, {}).get("runs", [])}
            if plain and 8 in peer and peer[8]["placements_per_s"]:
                ratio = plain / peer[8]["placements_per_s"]
                out.append(f"vs Placement on {label}, 8 clients: x{ratio:.0f} (issue 18's "
                           f"goal x500): {'met' if ratio >= 500 else 'MISSED'}")
    return out


def print_table(results: list[dict[str, Any]]) -> None:
    head = (f"{'hosts':>7} {'server':<9} {'clients':>7} {'mode':<13} {'round':>5} "
            f"{'requests':>8} {'placed':>6} {'/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'retries':>7} refused")
    print(head)
    print("-" * len(head))
    for r in results:
        for name, key in (("strato", "strato"), ("placement", "placement"),
                          ("plc-pg", "placement_postgresql")):
            for x in r.get(key, {}).get("runs", []):
                refused = x.get("refused") or ({"failed": x["failures"]} if x.get("failures")
                                               else {})
                print(f"{r['hosts']:>7} {name:<9} {x['clients']:>7} {x['mode']:<13} "
                      f"{x.get('round', 1):>5} {x['requests']:>8} {x['placed']:>6} "
                      f"{x['placements_per_s']:>8.1f} "
                      f"{x['p50_ms']:>8.1f} {x['p99_ms']:>8.1f} {x['retries']:>7} "
                      f"{refused or ''}")
        s = r["strato"]
        slow = f", each fsync {s['slow_disk_ms']:g} ms slower" if s.get("slow_disk_ms") else ""
        fsync = ("" if s.get("fsync_mean_ms") is None
                 else f", fsync mean {s['fsync_mean_ms']:.2f} ms")
        print(f"{r['hosts']:>7} strato: {r['provider_rows']} provider rows, {s['racks']} racks, "
              f"bulk load {s['bulk_load_s']} s, server start {s['server_start_s']} s, "
              f"first request {s['first_request_s']} s{fsync}{slow}")
    for line in verdicts(results):
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated host counts")
    ap.add_argument("--clients", default="1,8", help="comma-separated client counts")
    ap.add_argument("--requests", type=int, default=1000,
                    help="schedule calls per run with several clients (half with one)")
    ap.add_argument("--run-seconds", type=float, default=30.0,
                    help="stop a run after this long even if requests remain")
    ap.add_argument("--modes", default="plain,anti_affinity,dry_run,mixed",
                    help="plain, anti_affinity (hard, rack level) and dry_run (plain, "
                    "nothing claimed: the planning cost alone)")
    ap.add_argument("--group-size", type=int, default=20,
                    help="anti-affinity: requests per server group before a client starts "
                    "a new one (must stay below the number of racks)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="the modes take turns this many times on each server; each ratio "
                    "is taken within a round and judged by the rounds' median (this "
                    "machine's speed moves within seconds)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--peer", action="store_true",
                    help=f"also run real Placement (sizes <= {PEER_MAX_HOSTS} only)")
    ap.add_argument("--peer-db", default="sqlite",
                    help="Placement's database(s), comma-separated: sqlite, postgresql "
                    "(a fresh database on the local server, Placement's usual deployment)")
    ap.add_argument("--peer-requests", type=int, default=16,
                    help="Placement placements per client count (it is slow)")
    ap.add_argument("--slow-disk-ms", default="0",
                    help="comma-separated: measure Strato with each fsync of its server this "
                    "many ms slower, once per value (a network block device, a busy host; "
                    "see benchmarks/slowdisk.py); 0, the default, is the machine's own disk")
    ap.add_argument("--json", type=Path, default=None,
                    help="where to write results (default benchmarks/results/schedule.json)")
    args = ap.parse_args(argv)
    args.clients = [int(c) for c in str(args.clients).split(",") if c]
    args.modes = [m for m in args.modes.split(",") if m]
    args.peer_db = [d for d in args.peer_db.split(",") if d]
    args.slow_disk_ms = [float(d) for d in str(args.slow_disk_ms).split(",") if d]
    if set(args.peer_db) - {"sqlite", "postgresql"}:
        raise SystemExit(f"--peer-db: unknown database in {args.peer_db}")
    if set(args.modes) - {"plain", "anti_affinity", "dry_run", "mixed"}:
        raise SystemExit(f"--modes: unknown mode in {args.modes}")
    if args.rounds < 1:
        raise SystemExit("--rounds: at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = []
    load_before = os.getloadavg()
    source = git_state()
    for n in sizes:
        _log(f"-- {n} hosts")
        specs = make_specs(n, seed=args.seed)
        if (n + HOSTS_PER_RACK - 1) // HOSTS_PER_RACK <= args.group_size:
            raise SystemExit(f"{n} hosts have too few racks for --group-size {args.group_size}")
        for k, slow in enumerate(args.slow_disk_ms or [0.0]):
            if slow:
                _log(f"   each fsync {slow:g} ms slower")
            result: dict[str, Any] = {"hosts": n, "provider_rows": len(specs),
                                      "strato": strato_size(n, specs, args, slow)}
            if args.peer and n <= PEER_MAX_HOSTS and k == 0:
                for db in args.peer_db:
                    key = "placement" if db == "sqlite" else f"placement_{db}"
                    result[key] = peer_size(specs, args, db)
            results.append(result)
    print_table(results)
    RESULTS.mkdir(exist_ok=True)
    path = args.json or RESULTS / "schedule.json"
    doc = {"when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": "python -m benchmarks.schedule " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv),
           "source": source,
           "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                       "loadavg_before": [round(x, 2) for x in load_before],
                       "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
           "request": {"resources": RESOURCES, "consumers_per_request": 1,
                       "anti_affinity": {"level": "rack", "hard": True,
                                         "group_size": args.group_size}},
           "layout": {"hosts_per_rack": HOSTS_PER_RACK, "racks_per_room": RACKS_PER_ROOM,
                      "rooms_per_site": ROOMS_PER_SITE},
           "targets": TARGETS, "verdicts": verdicts(results), "results": results}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
