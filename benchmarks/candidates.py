"""Benchmark GET /allocation_candidates: engine alone and a real `strato serve`.

    .venv/bin/python -m benchmarks.candidates --sizes 1000,10000,100000

For each size: build the issue-3 data set (`benchmarks.spec.make_specs`: three
classes, 10% of hosts with a trait, ten aggregates, 10% nested hosts with two
NUMA children), bulk-load it into a fresh SQLite zone through the store's
tables, then measure p50/p95/p99 of each request shape

* engine alone (no HTTP): `Engine.query` (with its per-request freshness check
  against the store) and `Engine.query_snapshot` (pure compute);
* over HTTP against a real server process, sequentially and with 8
  concurrent clients;

and the server's RSS. Prints a table and writes JSON under benchmarks/results/.

`--peer` also runs real OpenStack Placement 16.0.0 (`benchmarks.peer.placement`,
its own virtualenv) on the same specs and the same requests, in the same run:
it prints Strato p50, Placement p50 and their ratio per shape, sequentially and
with the same concurrent clients. Placement takes seconds per request at
10,000 hosts, so it gets 20 sequential and 16 concurrent requests per shape
(--peer-requests, --peer-concurrent-requests) where Strato gets --requests.
Up to --cross-check-max provider rows, the same allocations are written to
both (--cross-check-usage), then every shape (and a few more, see
`check_shapes`) is asked of both without a limit, and the answers are
compared: the same hosts, allocation requests, mappings and summaries.

    .venv/bin/python -m benchmarks.candidates --sizes 1000,10000 --peer

`--modes workload` (issue 18; with `shapes`, the default, or alone) runs
Nova's loop against the server: a shape drawn at random from 22
(`workload_shapes`: sizes, traits required, forbidden and any-of,
aggregates, granular groups, `isolate` and `same_subtree` over NUMA nodes,
`root_required`, answers of 1 to 50), `GET /allocation_candidates`, then
`PUT /allocations` for one of the candidates (another on a conflict), and
one time in three after a placement an earlier one released. The same loop
with one shape is its yardstick (goal: the mix at 70% of its placements/s
or more), per client count (`--workload-clients`, default 1 and 8). The
first request of each shape is reported apart (cold: nothing kept for that
shape yet), as is the first request after start-up.

    .venv/bin/python -m benchmarks.candidates --sizes 10000 --modes workload
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import sqlalchemy as sa

from benchmarks.client import KeepAlive
from benchmarks.spec import NUMA_TRAIT, TRAIT, ProviderSpec, aggregate_uuids, make_specs
from strato.api.microversion import MAX_VERSION
from strato.api.routes.allocation_candidates import parse_request
from strato.engine import Engine
from strato.store import changes
from strato.store.db import Database
from strato.store.migrate import upgrade
from strato.store.schema import (
    inventories,
    placement_aggregates,
    resource_classes,
    resource_provider_aggregates,
    resource_provider_traits,
    resource_providers,
    traits,
)
from strato.store.util import utcnow

RESULTS = Path(__file__).parent / "results"
HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
BASE = "resources=VCPU:1,MEMORY_MB:1024"


def shapes(seed: int) -> dict[str, str]:
    """The request shapes of issue 3, as query strings."""
    agg = aggregate_uuids(10, seed)[0]
    return {
        "limit10": f"{BASE}&limit=10",
        "no_limit": BASE,
        "trait": f"{BASE}&required={TRAIT}&limit=10",
        "member_of": f"{BASE}&member_of={agg}&limit=10",
        "granular2": ("resources1=VCPU:1,MEMORY_MB:1024&resources2=DISK_GB:10"
                      "&group_policy=none&limit=10"),
    }


def check_shapes(seed: int) -> dict[str, str]:
    """Extra shapes, cross-checked against Placement but not timed: the parts
    of Placement's semantics the timed shapes do not reach."""
    a0, a1, a2 = aggregate_uuids(10, seed)[:3]
    return {
        "with_disk": "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100",
        "forbidden": f"resources=VCPU:1&required=!{TRAIT}",
        "any_trait": f"resources=VCPU:1&required=in:{TRAIT},{NUMA_TRAIT}",
        "member_in": f"resources=VCPU:1&member_of=in:{a0},{a1}&member_of=!{a2}",
        "isolate": "resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate",
        "root_req": f"resources=VCPU:1&root_required={TRAIT}",
        "root_forb": f"resources=VCPU:1,DISK_GB:10&root_required=!{TRAIT}",
        "subtree": ("resources_A=VCPU:1&resources_B=MEMORY_MB:1024&same_subtree=_A,_B"
                    "&group_policy=none"),
        "big": "resources=VCPU:40,MEMORY_MB:200000",
    }


def workload_shapes(seed: int) -> list[tuple[str, str]]:
    """The 22 request shapes of the workload mode (issue 18), as query strings:
    sizes from one small instance to a whole big host, required, forbidden and
    any-of traits, one, any-of and forbidden aggregates, granular groups with
    and without `isolate`, `same_subtree` over NUMA nodes, `root_required`,
    and answers of 1 to 50 candidates."""
    a0, a1, a2, a3 = aggregate_uuids(10, seed)[:4]
    small = "VCPU:1,MEMORY_MB:1024"
    return [
        ("small", f"resources={small}&limit=10"),
        ("tiny_one", "resources=VCPU:1,MEMORY_MB:512&limit=1"),
        ("medium", "resources=VCPU:4,MEMORY_MB:8192,DISK_GB:40&limit=10"),
        ("large", "resources=VCPU:16,MEMORY_MB:65536,DISK_GB:200&limit=5"),
        ("big", "resources=VCPU:40,MEMORY_MB:200000&limit=3"),
        ("disk_only", "resources=DISK_GB:100&limit=10"),
        ("avx2", f"resources=VCPU:2,MEMORY_MB:2048&required={TRAIT}&limit=10"),
        ("no_avx2", f"resources={small}&required=!{TRAIT}&limit=10"),
        ("any_trait", f"resources=VCPU:1&required=in:{TRAIT},{NUMA_TRAIT}&limit=10"),
        ("aggregate", f"resources={small}&member_of={a0}&limit=10"),
        ("any_aggregate", f"resources={small}&member_of=in:{a0},{a1}&limit=10"),
        ("not_aggregate", f"resources={small}&member_of=!{a2}&limit=10"),
        ("granular", f"resources1={small}&resources2=DISK_GB:10&group_policy=none&limit=10"),
        ("isolate_numa", "resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate&limit=10"),
        ("same_subtree", "resources_A=VCPU:1&resources_B=MEMORY_MB:1024&same_subtree=_A,_B"
                         "&group_policy=none&limit=10"),
        ("numa_group", f"resources1=VCPU:2,MEMORY_MB:2048&required1={NUMA_TRAIT}"
                       "&group_policy=none&limit=10"),
        ("root_avx2", f"resources=VCPU:1&root_required={TRAIT}&limit=10"),
        ("root_not_avx2", f"resources=VCPU:1,DISK_GB:10&root_required=!{TRAIT}&limit=10"),
        ("disk_and_group", "resources=DISK_GB:20&resources1=VCPU:2,MEMORY_MB:2048"
                           "&group_policy=none&limit=10"),
        ("wide_memory", "resources=VCPU:1,MEMORY_MB:65536&limit=10"),
        ("limit50", f"resources={small}&limit=50"),
        ("aggregate_no_avx2", f"resources=VCPU:2,MEMORY_MB:4096&member_of={a3}"
                              f"&required=!{TRAIT}&limit=10"),
    ]


# -- loading ------------------------------------------------------------------

def load_specs(db: Database, specs: Sequence[ProviderSpec], batch: int = 5000) -> None:
    """Bulk-insert `specs` into the store's tables in one transaction."""
    upgrade(db)
    now = utcnow()
    with db.write() as conn:
        rc_id = {n: int(i) for i, n in conn.execute(
            sa.select(resource_classes.c.id, resource_classes.c.name))}
        trait_id = {n: int(i) for i, n in conn.execute(sa.select(traits.c.id, traits.c.name))}
        agg_uuids = sorted({a for s in specs for a in s.aggregates})
        if agg_uuids:
            conn.execute(sa.insert(placement_aggregates), [{"uuid": u} for u in agg_uuids])
        agg_id = {u: int(i) for i, u in conn.execute(
            sa.select(placement_aggregates.c.id, placement_aggregates.c.uuid))}
        start = int(conn.execute(sa.select(sa.func.coalesce(
            sa.func.max(resource_providers.c.id), 0))).scalar_one()) + 1
        ids = {s.uuid: start + i for i, s in enumerate(specs)}
        root: dict[str, int] = {}
        for s in specs:  # parents come before children in a spec list
            root[s.uuid] = root[s.parent_uuid] if s.parent_uuid else ids[s.uuid]
        for lo in range(0, len(specs), batch):
            part = specs[lo: lo + batch]
            conn.execute(sa.insert(resource_providers), [{
                "id": ids[s.uuid], "uuid": s.uuid, "name": s.name, "generation": 1,
                "root_provider_id": root[s.uuid],
                "parent_provider_id": ids[s.parent_uuid] if s.parent_uuid else None,
                "created_at": now, "updated_at": now} for s in part])
            invs = [{"resource_provider_id": ids[s.uuid], "resource_class_id": rc_id[rc],
                     **inv, "created_at": now, "updated_at": now}
                    for s in part for rc, inv in s.inventories.items()]
            if invs:
                conn.execute(sa.insert(inventories), invs)
            trs = [{"resource_provider_id": ids[s.uuid], "trait_id": trait_id[t]}
                   for s in part for t in s.traits]
            if trs:
                conn.execute(sa.insert(resource_provider_traits), trs)
            ags = [{"resource_provider_id": ids[s.uuid], "aggregate_id": agg_id[a]}
                   for s in part for a in s.aggregates]
            if ags:
                conn.execute(sa.insert(resource_provider_aggregates), ags)
        changes.record(conn, "bulk_load", [None])


# -- measuring ----------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))] if s else float("nan")


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(pct(values, 50) * 1e3, 3), "p95": round(pct(values, 95) * 1e3, 3),
            "p99": round(pct(values, 99) * 1e3, 3), "n": len(values)}


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def engine_alone(url: str, queries: dict[str, str], reps: dict[str, int]) -> dict[str, Any]:
    engine = Engine(Database(url))
    t = time.perf_counter()
    engine.refresh()
    out: dict[str, Any] = {"load_s": round(time.perf_counter() - t, 3),
                           "providers": engine.index.size}
    for name, q in queries.items():
        req = parse_request(httpx.QueryParams(q).multi_items(), MAX_VERSION)
        engine.query(req)  # warm
        out[name] = {"with_freshness_check": summary_ms(timed(partial(engine.query, req),
                                                              reps[name])),
                     "compute_only": summary_ms(timed(partial(engine.query_snapshot, req),
                                                      reps[name])),
                     "candidates": len(engine.query_snapshot(req).allocation_requests)}
    engine.close()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`strato serve` on loopback, for the duration of a `with` block."""

    def __init__(self, db_url: str, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "strato.cli.main", "serve", "--db", db_url,
               "--port", str(self.port)]
        self._log = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log)

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self._log.close()

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)


def http_latencies(url: str, query: str, n: int, clients: int,
                   path: str = "/allocation_candidates") -> list[float]:
    def run(k: int) -> list[float]:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=300) as c:
            out = []
            for _ in range(k):
                t = time.perf_counter()
                r = c.get(f"{path}?{query}" if query else path)
                out.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
            return out

    per = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    if clients == 1:
        return run(n)
    with ThreadPoolExecutor(clients) as pool:
        return [x for part in pool.map(run, per) for x in part]


def over_http(url: str, queries: dict[str, str], reps: dict[str, int], clients: int
              ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, q in queries.items():
        http_latencies(url, q, 2, 1)  # warm
        out[name] = {"sequential": summary_ms(http_latencies(url, q, reps[name], 1)),
                     f"concurrent_{clients}": summary_ms(
                         http_latencies(url, q, reps[name], clients))}
    # The floor: the same server's cheapest route (`GET /`, the version
    # document) with the same client, taking turns with limit10 so that both
    # see the same machine (issue 18: candidates within 1.5x of it at 10,000
    # hosts, 3x at 100,000). Ten turns each: this machine's speed drifts
    # within a minute.
    floor: list[float] = []
    cands: list[float] = []
    turns = 10
    for _ in range(turns):
        floor += http_latencies(url, "", max(1, reps["limit10"] // turns), 1, path="/")
        cands += http_latencies(url, queries["limit10"], max(1, reps["limit10"] // turns), 1)
    out["floor"] = {"get_root": summary_ms(floor), "limit10": summary_ms(cands)}
    out["floor"]["ratio"] = (round(out["floor"]["limit10"]["p50"]
                                   / out["floor"]["get_root"]["p50"], 2)
                             if out["floor"]["get_root"]["p50"] else None)
    return out


# -- the workload: many shapes, claims and releases (issue 18) ----------------

# Allocations are written at 1.36 (no consumer type), as Nova's loop does.
WRITE_VERSION = {"openstack-api-version": "placement 1.36"}
CLAIM_TRIES = 3


@dataclass
class Workload:
    """What one run of the Nova-style loop did: GET candidates, PUT one of them."""

    gets: dict[str, list[float]] = field(default_factory=dict)  # shape -> warm latencies
    cold: dict[str, float] = field(default_factory=dict)  # shape -> its first request
    claims: list[float] = field(default_factory=list)
    placed: int = 0
    released: int = 0
    conflicts: int = 0
    empty: dict[str, int] = field(default_factory=dict)  # shape -> answers with nothing
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict[str, Any]:
        warm = [x for v in self.gets.values() for x in v]
        return {"placed": self.placed, "released": self.released,
                "conflicts": self.conflicts, "empty": dict(self.empty),
                "gets": len(warm) + len(self.cold), "seconds": round(self.seconds, 3),
                "placements_per_s": round(self.placed / self.seconds, 1) if self.seconds
                else 0.0,
                "get_warm": summary_ms(warm), "claim": summary_ms(self.claims),
                "get_cold": summary_ms(list(self.cold.values())),
                "per_shape_warm_p50_ms": {k: round(pct(v, 50) * 1e3, 3)
                                          for k, v in sorted(self.gets.items()) if v},
                "per_shape_cold_ms": {k: round(v * 1e3, 3)
                                      for k, v in sorted(self.cold.items())}}


def workload_run(url: str, draw: Sequence[tuple[str, str]], requests: int, clients: int,
                 tag: str) -> Workload:
    """`requests` rounds of Nova's loop over `clients` threads: a shape of `draw`
    at random, GET /allocation_candidates, PUT /allocations for one of the
    candidates (another on a conflict, up to CLAIM_TRIES); after a placement,
    one time in three, an earlier one of the thread's released, so that a third
    of what is placed is freed during the run. The first request of each shape
    in the run is kept apart (`cold`): the server's state kept per shape is
    not warm for it."""
    out = Workload()
    start = threading.Barrier(clients)

    def client(k: int, share: int) -> None:
        c = KeepAlive(url)
        rng = random.Random(f"{tag}-{k}")
        mine: list[str] = []
        try:
            start.wait()
            for _ in range(share):
                name, query = rng.choice(draw)
                t = time.perf_counter()
                status, body = c.get(f"/allocation_candidates?{query}")
                dt = time.perf_counter() - t
                if status != 200:
                    raise RuntimeError(f"{name}: GET answered {status}: {str(body)[:300]}")
                with out.lock:
                    if name in out.cold:
                        out.gets.setdefault(name, []).append(dt)
                    else:
                        out.cold[name] = dt
                found = body["allocation_requests"]
                if not found:
                    with out.lock:
                        out.empty[name] = out.empty.get(name, 0) + 1
                    continue
                for _ in range(CLAIM_TRIES):
                    consumer = str(uuidlib.uuid4())
                    payload = {"allocations": rng.choice(found)["allocations"],
                               "project_id": "bench", "user_id": "bench",
                               "consumer_generation": None}
                    t = time.perf_counter()
                    status, body = c.call("PUT", f"/allocations/{consumer}", payload,
                                          WRITE_VERSION)
                    dt = time.perf_counter() - t
                    if status == 204:
                        mine.append(consumer)
                        with out.lock:
                            out.placed += 1
                            out.claims.append(dt)
                        break
                    if status != 409:
                        raise RuntimeError(f"{name}: PUT answered {status}: {str(body)[:300]}")
                    with out.lock:
                        out.conflicts += 1
                if mine and rng.random() < 1 / 3:
                    gone = c.delete(f"/allocations/{mine.pop(rng.randrange(len(mine)))}")
                    if gone != 204:
                        raise RuntimeError(f"release answered {gone}")
                    with out.lock:
                        out.released += 1
        finally:
            c.close()

    shares = [requests // clients + (i < requests % clients) for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client, k, n) for k, n in enumerate(shares)]:
            f.result()
    out.seconds = time.perf_counter() - t0
    return out


def workload(url: str, seed: int, requests: int, client_counts: Sequence[int]
             ) -> dict[str, Any]:
    """The single shape (`small`, the timed `limit10`) and all 22 shapes drawn
    at random, the same loop, per client count, taking turns."""
    every = workload_shapes(seed)
    out: dict[str, Any] = {"shapes": len(every)}
    for clients in client_counts:
        n = requests if clients > 1 else requests // 2
        for mode, draw in (("single", every[:1]), ("mixed", every)):
            print(f"   workload {mode}, {clients} client(s), {n} requests",
                  file=sys.stderr, flush=True)
            out[f"{mode}_{clients}"] = workload_run(url, draw, n, clients,
                                                    f"{mode}-{clients}").summary()
        single = out[f"single_{clients}"]["placements_per_s"]
        out[f"ratio_{clients}"] = (round(out[f"mixed_{clients}"]["placements_per_s"]
                                         / single, 3) if single else None)
    return out


# -- the peer: real OpenStack Placement, same data, same requests ------------

# The cross-check asks both servers at Placement 16.0.0's newest microversion.
CROSS_HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
# Allocations are written at 1.36, a body both accept without a consumer type.
CROSS_WRITE = {"x-auth-token": "admin", "openstack-api-version": "placement 1.36"}


def unlimited(query: str) -> str:
    return "&".join(p for p in query.split("&") if not p.startswith("limit="))


def _answer(url: str, query: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, headers=CROSS_HEADERS, timeout=900) as c:
        r = c.get(f"/allocation_candidates?{query}")
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body


def _normalised(body: dict[str, Any]) -> tuple[set[Any], set[str], dict[str, Any]]:
    """(allocation requests as sets, hosts used, provider summaries), order-free."""
    summaries = body["provider_summaries"]
    allocs: set[Any] = set()
    hosts: set[str] = set()
    for ar in body["allocation_requests"]:
        items = frozenset((u, rc, n) for u, res in ar["allocations"].items()
                          for rc, n in res["resources"].items())
        mappings = frozenset((k, tuple(sorted(v))) for k, v in ar.get("mappings", {}).items())
        allocs.add((items, mappings))
        hosts |= {summaries[u]["root_provider_uuid"] for u in ar["allocations"]}
    norm = {u: {**s, "traits": sorted(s["traits"])} for u, s in summaries.items()}
    return allocs, hosts, norm


def seed_usage(urls: Sequence[str], specs: Sequence[ProviderSpec], hosts: int, seed: int
               ) -> int:
    """The same allocations, through PUT /allocations, on every server in `urls`,
    so the cross-check also covers usage: on `hosts` random roots half their
    memory (a big request no longer fits there) and on as many NUMA children
    all their VCPU (a nested host serves VCPU from its other child only)."""
    rng = random.Random(f"usage-{seed}")
    roots = [s for s in specs if s.parent_uuid is None and "MEMORY_MB" in s.inventories]
    numa = [s for s in specs if s.parent_uuid is not None and "VCPU" in s.inventories]
    plan: list[dict[str, dict[str, int]]] = []
    for s in rng.sample(roots, min(hosts, len(roots))):
        plan.append({s.uuid: {"MEMORY_MB": s.inventories["MEMORY_MB"]["total"] // 2}})
    for s in rng.sample(numa, min(hosts, len(numa))):
        inv = s.inventories["VCPU"]
        plan.append({s.uuid: {"VCPU": min(inv["max_unit"], int(
            (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]))}})
    for i, allocs in enumerate(plan):
        consumer = str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
        body = {"allocations": {u: {"resources": res} for u, res in allocs.items()},
                "project_id": "bench", "user_id": "bench", "consumer_generation": None}
        for url in urls:
            with httpx.Client(base_url=url, headers=CROSS_WRITE, timeout=120) as c:
                r = c.put(f"/allocations/{consumer}", json=body)
                if r.status_code != 204:
                    raise RuntimeError(f"{url}: allocation {i} refused: {r.text[:300]}")
    return len(plan)


def cross_check(strato_url: str, peer_url: str, queries: dict[str, str]) -> dict[str, Any]:
    """Every shape without its limit, asked of both servers: the same hosts, the
    same allocation requests (with mappings) and the same provider summaries?"""
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for name, q in queries.items():
        q = unlimited(q)
        if q in seen:  # limit10 without its limit is no_limit
            continue
        seen.add(q)
        ours, theirs = _normalised(_answer(strato_url, q)), _normalised(_answer(peer_url, q))
        diff_summaries = sorted(u for u in set(ours[2]) | set(theirs[2])
                                if ours[2].get(u) != theirs[2].get(u))
        out[name] = {
            "query": q,
            "strato_candidates": len(ours[0]), "placement_candidates": len(theirs[0]),
            "strato_hosts": len(ours[1]), "placement_hosts": len(theirs[1]),
            "same_hosts": ours[1] == theirs[1],
            "same_allocation_requests": ours[0] == theirs[0],
            "same_provider_summaries": not diff_summaries,
            # A few examples of each difference, to start a diagnosis from.
            "only_strato_hosts": sorted(ours[1] - theirs[1])[:5],
            "only_placement_hosts": sorted(theirs[1] - ours[1])[:5],
            "summary_differences": [{"uuid": u, "strato": ours[2].get(u),
                                     "placement": theirs[2].get(u)}
                                    for u in diff_summaries[:3]],
        }
    return out


def placement_side(specs: Sequence[ProviderSpec], queries: dict[str, str],
                   args: argparse.Namespace, strato_url: str) -> dict[str, Any]:
    """Real Placement on the same data and requests (see benchmarks/peer).

    Placement takes seconds per request at 10,000 hosts, so it gets far fewer
    requests than Strato (--peer-requests sequential, --peer-concurrent-requests
    over --clients clients); the table says how many.
    """
    from benchmarks.peer.placement import PlacementPeer, candidates_latency, ensure_peer_venv
    from benchmarks.peer.placement import verify as verify_peer

    ensure_peer_venv()
    out: dict[str, Any] = {"peer": "openstack-placement 16.0.0 (gunicorn 2 workers x 4 "
                                   "threads, SQLite WAL, noauth2)"}
    with PlacementPeer(specs=specs) as peer:
        out["bulk_load_s"] = round(peer.load_seconds, 2)
        verify_peer(peer.url, specs)
        for name in args.peer_shapes.split(","):
            print(f"   Placement {name}", file=sys.stderr, flush=True)
            # candidates_latency answers in milliseconds.
            seq = [ms / 1e3 for ms in candidates_latency(peer.url, queries[name],
                                                         args.peer_requests)]
            conc = [ms / 1e3 for ms in candidates_latency(
                peer.url, queries[name], args.peer_concurrent_requests, warmup=0,
                clients=args.clients)]
            out[name] = {"sequential": summary_ms(seq),
                         f"concurrent_{args.clients}": summary_ms(conc)}
        if len(specs) <= args.cross_check_max:
            print("   cross-check against Placement", file=sys.stderr, flush=True)
            # After both were timed on the same empty cloud: usage, on both.
            out["cross_check_allocations"] = seed_usage(
                [strato_url, peer.url], specs, args.cross_check_usage, args.seed)
            out["cross_check"] = cross_check(strato_url, peer.url,
                                             {**queries, **check_shapes(args.seed)})
        out["rss_mib"] = round(peer.rss_bytes() / 2**20, 1)
    return out


def comparison(result: dict[str, Any], clients: int) -> list[dict[str, Any]]:
    """Rows of the side-by-side table: Strato p50, Placement p50, their ratio."""
    rows = []
    peer = result.get("placement", {})
    for name, modes in peer.items():
        if not isinstance(modes, dict) or "sequential" not in modes:
            continue
        for mode in ("sequential", f"concurrent_{clients}"):
            ours, theirs = result["http"][name][mode], modes[mode]
            rows.append({"shape": name, "mode": mode, "strato_p50_ms": ours["p50"],
                         "strato_n": ours["n"], "placement_p50_ms": theirs["p50"],
                         "placement_n": theirs["n"],
                         "ratio": round(theirs["p50"] / ours["p50"], 1) if ours["p50"]
                         else None})
    return rows


def run_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    specs = make_specs(n, seed=args.seed, sharing=args.sharing)
    queries = shapes(args.seed)
    # The unlimited shape returns every host; fewer repetitions keep runs short.
    reps = {k: (max(5, args.requests // 10) if k == "no_limit" and n >= 10_000
                else args.requests) for k in queries}
    with tempfile.TemporaryDirectory(prefix="strato-bench-") as tmp:
        url = f"sqlite:///{tmp}/zone.db"
        t = time.perf_counter()
        load_specs(Database(url), specs)
        result: dict[str, Any] = {"hosts": n, "provider_rows": len(specs),
                                  "bulk_load_s": round(time.perf_counter() - t, 2)}
        modes = args.modes.split(",")
        if "shapes" in modes:
            result["engine"] = engine_alone(url, queries, reps)
        t = time.perf_counter()
        with Server(url, Path(tmp) / "server.log") as server:
            result["server_start_s"] = round(time.perf_counter() - t, 2)
            # Cold: the first request after start-up (the index is loaded before
            # the server answers; nothing kept for any request shape yet).
            with httpx.Client(base_url=server.url, headers=HEADERS, timeout=600) as c:
                t = time.perf_counter()
                assert c.get(f"/allocation_candidates?{queries['limit10']}").status_code == 200
                result["first_request_s"] = round(time.perf_counter() - t, 4)
            if "shapes" in modes:
                result["http"] = over_http(server.url, queries, reps, args.clients)
            if "workload" in modes:
                result["workload"] = workload(
                    server.url, args.seed, args.workload_requests,
                    [int(c) for c in args.workload_clients.split(",") if c])
            result["server_rss_mib"] = round(server.rss_bytes() / 2**20, 1)
            if args.peer:
                # Strato stays up (idle) for the cross-check against the peer.
                result["placement"] = placement_side(specs, queries, args, server.url)
                result["comparison"] = comparison(result, args.clients)
    return result


def print_table(results: list[dict[str, Any]], clients: int) -> None:
    head = (f"{'hosts':>7} {'shape':<10} {'engine p50':>10} {'pure p50':>9} "
            f"{'http p50':>9} {'p95':>8} {'p99':>8} {f'{clients}c p50':>8} {'p99':>8}")
    print(head)
    print("-" * len(head))
    for r in results:
        for name, e in r.get("engine", {}).items():
            if not isinstance(e, dict):
                continue
            h = r["http"][name]
            s, c = h["sequential"], h[f"concurrent_{clients}"]
            print(f"{r['hosts']:>7} {name:<10} {e['with_freshness_check']['p50']:>10.3f} "
                  f"{e['compute_only']['p50']:>9.3f} {s['p50']:>9.2f} {s['p95']:>8.2f} "
                  f"{s['p99']:>8.2f} {c['p50']:>8.2f} {c['p99']:>8.2f}")
        print(f"{r['hosts']:>7} server RSS {r['server_rss_mib']} MiB, "
              f"{r['provider_rows']} provider rows, server start {r['server_start_s']} s, "
              f"first request after start-up (cold) {r['first_request_s'] * 1e3:.1f} ms"
              + (f", index load in process {r['engine']['load_s']} s" if "engine" in r
                 else ""))
        f = r.get("http", {}).get("floor")
        if f:
            goal = 1.5 if r["hosts"] <= 10_000 else 3.0
            print(f"{r['hosts']:>7} limit10 p50 {f['limit10']['p50']:.2f} ms against the "
                  f"server's GET / p50 {f['get_root']['p50']:.2f} ms, taking turns: "
                  f"x{f['ratio']} (goal <= x{goal}: "
                  f"{'met' if f['ratio'] is not None and f['ratio'] <= goal else 'not met'})")
    print("(milliseconds; engine: Engine.query with its freshness check, pure: the "
          "candidate computation alone; http: sequential, then "
          f"{clients} concurrent clients)")
    for r in results:
        print_workload(r["hosts"], r.get("workload"))
    rows = [(r["hosts"], row) for r in results for row in r.get("comparison", [])]
    if rows:
        print()
        head = (f"{'hosts':>7} {'shape':<10} {'clients':>7} {'Strato p50':>11} {'(n)':>5} "
                f"{'Placement p50':>14} {'(n)':>4} {'ratio':>8}")
        print(head)
        print("-" * len(head))
        for hosts, row in rows:
            ncl = 1 if row["mode"] == "sequential" else clients
            print(f"{hosts:>7} {row['shape']:<10} {ncl:>7} {row['strato_p50_ms']:>11.2f} "
                  f"{row['strato_n']:>5} {row['placement_p50_ms']:>14.1f} "
                  f"{row['placement_n']:>4} {row['ratio']:>7}x")
        print("(milliseconds over HTTP, same data and requests; n: requests timed)")
    checks = [(r["hosts"], name, c) for r in results
              for name, c in r.get("placement", {}).get("cross_check", {}).items()]
    if checks:
        print()
        print("cross-check without limit (Strato vs Placement): candidates, hosts, same?")
        for hosts, name, c in checks:
            same = all((c["same_hosts"], c["same_allocation_requests"],
                        c["same_provider_summaries"]))
            print(f"{hosts:>7} {name:<10} {c['strato_candidates']:>6} vs "
                  f"{c['placement_candidates']:<6} hosts {c['strato_hosts']:>6} vs "
                  f"{c['placement_hosts']:<6} {'identical' if same else 'DIFFERENT'}"
                  + ("" if same else f" (hosts {c['same_hosts']}, allocation requests "
                     f"{c['same_allocation_requests']}, summaries "
                     f"{c['same_provider_summaries']})"))


def print_workload(hosts: int, w: dict[str, Any] | None) -> None:
    if not w:
        return
    print()
    print(f"workload: Nova's loop (GET /allocation_candidates, PUT /allocations for one "
          f"candidate, a third of placements released), {hosts} hosts; single: one shape, "
          f"mixed: {w['shapes']} shapes at random")
    head = (f"{'clients':>7} {'mode':<7} {'placed':>6} {'/s':>7} {'GET p50':>8} "
            f"{'p99':>7} {'PUT p50':>8} {'conflicts':>9} {'cold GET p50':>12} {'max':>7}")
    print(head)
    print("-" * len(head))
    counts = sorted({int(k.split("_")[1]) for k in w if k.startswith("single_")})
    for clients in counts:
        for mode in ("single", "mixed"):
            x = w[f"{mode}_{clients}"]
            cold = x["per_shape_cold_ms"].values()
            print(f"{clients:>7} {mode:<7} {x['placed']:>6} {x['placements_per_s']:>7.1f} "
                  f"{x['get_warm']['p50']:>8.2f} {x['get_warm']['p99']:>7.2f} "
                  f"{x['claim']['p50']:>8.2f} {x['conflicts']:>9} "
                  f"{x['get_cold']['p50']:>12.2f} {max(cold, default=0.0):>7.2f}")
    print("(milliseconds; cold: the first request of each shape in the run, kept apart "
          "from the warm figures)")
    for clients in counts:
        ratio = w[f"ratio_{clients}"]
        empty = w[f"mixed_{clients}"]["empty"]
        print(f"{hosts} hosts, {clients} client(s): {w['shapes']} shapes with releases at "
              f"{ratio:.0%} of one shape's placements/s (issue 18's goal 70%): "
              f"{'met' if ratio is not None and ratio >= 0.7 else 'MISSED'}"
              + (f"; shapes answered with nothing: {empty}" if empty else ""))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000",
                    help="comma-separated host counts (default: %(default)s)")
    ap.add_argument("--requests", type=int, default=200, help="requests per shape")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sharing", type=int, default=0, help="sharing DISK_GB pools to add")
    ap.add_argument("--peer", action="store_true",
                    help="also measure real OpenStack Placement (slow; own virtualenv)")
    ap.add_argument("--peer-requests", type=int, default=20,
                    help="sequential requests per shape to Placement (it is slow)")
    ap.add_argument("--peer-concurrent-requests", type=int, default=16,
                    help="requests per shape to Placement over --clients clients")
    ap.add_argument("--peer-shapes", default=",".join(shapes(1)),
                    help="shapes measured on Placement (default: %(default)s)")
    ap.add_argument("--cross-check-usage", type=int, default=50,
                    help="before the cross-check, allocate on this many hosts and as many "
                    "NUMA nodes, the same on both servers (default: %(default)s)")
    ap.add_argument("--cross-check-max", type=int, default=2000,
                    help="compare every shape without limit against Placement up to this "
                    "many provider rows (default: %(default)s)")
    ap.add_argument("--modes", default="shapes",
                    help="shapes (each issue-3 shape timed alone, engine and HTTP) and/or "
                    "workload (Nova's loop over 22 shapes drawn at random with claims "
                    "and releases, against one shape; issue 18)")
    ap.add_argument("--workload-requests", type=int, default=1000,
                    help="workload: rounds of the loop per run with several clients "
                    "(half with one)")
    ap.add_argument("--workload-clients", default="1,8",
                    help="workload: comma-separated client counts")
    ap.add_argument("--json", type=Path, default=None, help="where to write results")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = []
    for n in sizes:
        print(f"-- {n} hosts", file=sys.stderr, flush=True)
        results.append(run_size(n, args))
    print_table(results, args.clients)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.json or RESULTS / f"candidates-{stamp}.json"
    doc = {"when": stamp, "machine": {"cpus": os.cpu_count(),
                                      "python": sys.version.split()[0]},
           "argv": sys.argv[1:], "results": results}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
