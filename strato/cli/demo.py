"""`strato demo`: a zone tree of seven real processes on loopback, a mixed workload,
a readable result.

    global            shared disk pool (DISK_GB, aggregate A)
    ├── dfw           location dfw
    │   ├── dfw-c1    dfw/room1
    │   └── dfw-c2    dfw/room2, every host tagged hipaa
    └── ord           location ord
        ├── ord-c1    ord/room1
        └── ord-c2    ord/room2, every host tagged hipaa   (killed half way)

Each zone is a `strato serve` process with its own SQLite file; children
register with their parent (`--parent`). The cells' hosts (VCPU, MEMORY_MB,
locations site/room/rack/host, 10% AVX2, all in aggregate A) are bulk-loaded
through the store before the processes start, a few per cell through the HTTP
API after: the API path is measured and reported, and it is too slow on two
cores for the whole fleet within the demo's minute. Clients then schedule at
the root only. Every process started here is stopped at the end, whatever happens.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from strato.cli import consoles
from strato.cli.tree import render
from strato.model import errors
from strato.process import ServerProcess, free_port
from strato.sim.invariants import Violation, check_databases
from strato.store import changes
from strato.store.db import Database
from strato.store.migrate import upgrade
from strato.store.resource_classes import ids_by_name as class_ids
from strato.store.schema import (
    allocations,
    inventories,
    placement_aggregates,
    provider_meta,
    provisional_claims,
    resource_provider_aggregates,
    resource_provider_traits,
    resource_providers,
)
from strato.store.traits import ids_by_name as trait_ids
from strato.store.util import utcnow

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
AVX2 = "HW_CPU_X86_AVX2"
SHARES = "MISC_SHARES_VIA_AGGREGATE"
RACK_SIZE = 20
# The status recorded when the root did not answer at all (a transport error).
NO_ANSWER = 599


@dataclass(frozen=True, slots=True)
class ZoneDef:
    name: str
    parent: str | None = None
    prefix: str | None = None
    tags: tuple[str, ...] = ()


TREE: tuple[ZoneDef, ...] = (
    ZoneDef("global"),
    ZoneDef("dfw", "global", "dfw"),
    ZoneDef("ord", "global", "ord"),
    ZoneDef("dfw-c1", "dfw", "dfw/room1"),
    ZoneDef("dfw-c2", "dfw", "dfw/room2", ("hipaa",)),
    ZoneDef("ord-c1", "ord", "ord/room1"),
    ZoneDef("ord-c2", "ord", "ord/room2", ("hipaa",)),
)
KILLED = "ord-c2"


def cells(zones: Sequence[ZoneDef] = TREE) -> list[ZoneDef]:
    """Zones nobody names as parent: the ones that own the hosts."""
    parents = {z.parent for z in zones}
    return [z for z in zones if z.name not in parents]


# -- the fleet --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Host:
    uuid: str
    name: str
    location: str
    vcpu: int
    memory_mb: int
    avx2: bool


def plan_hosts(cell: ZoneDef, n: int, rng: random.Random) -> list[Host]:
    """`n` hosts in racks of 20 under the cell's prefix: dfw/room1/rack07/host12."""
    prefix = cell.prefix or cell.name
    return [Host(str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                 f"{cell.name}-r{i // RACK_SIZE:02d}-h{i % RACK_SIZE:02d}",
                 f"{prefix}/rack{i // RACK_SIZE:02d}/host{i % RACK_SIZE:02d}",
                 rng.choice([32, 48, 64]), rng.choice([131072, 262144]), i % 10 == 0)
            for i in range(n)]


def migrated_template(path: Path) -> Path:
    """One migrated empty database, copied for every zone (migrating is the slow part)."""
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    db.dispose()
    return path


def bulk_load(db: Database, hosts: Sequence[Host], aggregate: str) -> None:
    """Write `hosts` straight into a zone's store in one transaction, as the API would
    leave them (inventories, traits, aggregate, location), and log one change so
    that a running engine would reload."""
    now = utcnow()
    with db.write() as conn:
        rc = class_ids(conn, ["VCPU", "MEMORY_MB"])
        avx2 = trait_ids(conn, [AVX2])[AVX2]
        agg_id = conn.execute(sa.select(placement_aggregates.c.id).where(
            placement_aggregates.c.uuid == aggregate)).scalar()
        if agg_id is None:
            agg_id = conn.execute(sa.insert(placement_aggregates).values(uuid=aggregate)
                                  .returning(placement_aggregates.c.id)).scalar_one()
        first = int(conn.execute(sa.select(sa.func.coalesce(
            sa.func.max(resource_providers.c.id), 0))).scalar_one()) + 1
        rps, invs, traits, aggs, meta = [], [], [], [], []
        for pid, h in enumerate(hosts, start=first):
            rps.append({"id": pid, "uuid": h.uuid, "name": h.name, "generation": 1,
                        "root_provider_id": pid, "parent_provider_id": None,
                        "created_at": now, "updated_at": now})
            for name, total, ratio in (("VCPU", h.vcpu, 4.0), ("MEMORY_MB", h.memory_mb, 1.0)):
                invs.append({"resource_provider_id": pid, "resource_class_id": rc[name],
                             "total": total, "reserved": 0, "min_unit": 1, "max_unit": total,
                             "step_size": 1, "allocation_ratio": ratio, "created_at": now,
                             "updated_at": now})
            if h.avx2:
                traits.append({"resource_provider_id": pid, "trait_id": avx2})
            aggs.append({"resource_provider_id": pid, "aggregate_id": agg_id})
            meta.append({"resource_provider_id": pid, "location": h.location, "tags": "[]",
                         "heartbeat": False, "updated_at": now})
        for table, rows in ((resource_providers, rps), (inventories, invs),
                            (resource_provider_traits, traits),
                            (resource_provider_aggregates, aggs), (provider_meta, meta)):
            if rows:
                conn.execute(sa.insert(table), rows)
        changes.record(conn, "bulk_load", [None])


def _ok(resp: httpx.Response, *codes: int) -> dict[str, Any]:
    if resp.status_code not in codes:
        raise RuntimeError(f"{resp.request.method} {resp.request.url.path}: "
                           f"{resp.status_code} {resp.text[:300]}")
    return dict(resp.json()) if resp.content else {}


def register_via_api(client: httpx.Client, host: Host, aggregate: str) -> None:
    """One host the way an operator or agent would: five calls."""
    rp = _ok(client.post("/resource_providers", json={"name": host.name, "uuid": host.uuid}),
             200)
    gen = _ok(client.put(f"/resource_providers/{host.uuid}/inventories", json={
        "resource_provider_generation": rp["generation"], "inventories": {
            "VCPU": {"total": host.vcpu, "allocation_ratio": 4.0},
            "MEMORY_MB": {"total": host.memory_mb}}}), 200)["resource_provider_generation"]
    if host.avx2:
        gen = _ok(client.put(f"/resource_providers/{host.uuid}/traits", json={
            "traits": [AVX2], "resource_provider_generation": gen}),
            200)["resource_provider_generation"]
    _ok(client.put(f"/resource_providers/{host.uuid}/aggregates", json={
        "aggregates": [aggregate], "resource_provider_generation": gen}), 200)
    _ok(client.put(f"/strato/v1/providers/{host.uuid}/meta",
                   json={"location": host.location, "tags": []}), 200)


def create_shared_pool(client: httpx.Client, aggregate: str, disk_gb: int) -> str:
    """The root's disk pool: shares DISK_GB with every provider of `aggregate`."""
    rp = _ok(client.post("/resource_providers", json={"name": "global-shared-disk"}), 200)
    gen = _ok(client.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": rp["generation"],
        "inventories": {"DISK_GB": {"total": disk_gb}}}), 200)["resource_provider_generation"]
    gen = _ok(client.put(f"/resource_providers/{rp['uuid']}/traits", json={
        "traits": [SHARES], "resource_provider_generation": gen}),
        200)["resource_provider_generation"]
    _ok(client.put(f"/resource_providers/{rp['uuid']}/aggregates", json={
        "aggregates": [aggregate], "resource_provider_generation": gen}), 200)
    return str(rp["uuid"])


# -- the processes ----------------------------------------------------------------------

@dataclass
class ZoneProcesses:
    """One `strato serve` per zone, ports chosen up front so that children know
    their parent's URL before it answers (they retry registering until it does)."""

    root_dir: Path
    zones: Sequence[ZoneDef] = TREE
    summary_interval: float = 1.0
    child_timeout: float = 2.0
    procs: dict[str, ServerProcess] = field(default_factory=dict)
    _cpu_of_dead: float = 0.0

    def __post_init__(self) -> None:
        ports = {z.name: free_port() for z in self.zones}
        for z in self.zones:
            args = ["--zone", z.name, "--summary-interval", str(self.summary_interval),
                    "--child-timeout", str(self.child_timeout)]
            if z.parent is not None:
                args += ["--parent", f"http://127.0.0.1:{ports[z.parent]}"]
            if z.prefix:
                args += ["--location-prefix", z.prefix]
            for t in z.tags:
                args += ["--tag", t]
            self.procs[z.name] = ServerProcess(f"sqlite:///{self.db_path(z.name)}",
                                               port=ports[z.name], extra=args,
                                               log_path=self.root_dir / f"{z.name}.log")

    def db_path(self, name: str) -> Path:
        return self.root_dir / f"{name}.db"

    def url(self, name: str) -> str:
        return self.procs[name].url

    def start(self) -> None:
        """Level by level, each level's zones at once: a child then registers on its
        first try instead of backing off while its parent is still importing."""
        depth: dict[str, int] = {}
        for z in self.zones:  # parents come before their children in `zones`
            depth[z.name] = 0 if z.parent is None else depth[z.parent] + 1
        for level in sorted(set(depth.values())):
            wave = [self.procs[n] for n, d in depth.items() if d == level]
            with ThreadPoolExecutor(len(wave)) as pool:
                for f in [pool.submit(p.start, 60.0) for p in wave]:
                    f.result()

    def wait_linked(self, timeout: float = 30.0) -> None:
        """Until every parent lists its children, healthy, with a summary."""
        want: dict[str, set[str]] = defaultdict(set)
        for z in self.zones:
            if z.parent is not None:
                want[z.parent].add(z.name)
        deadline = time.monotonic() + timeout
        with httpx.Client(headers=HEADERS, timeout=5) as c:
            for parent, kids in want.items():
                while True:
                    got = _ok(c.get(self.url(parent) + "/strato/v1/children"), 200)["children"]
                    ready = {k["name"] for k in got
                             if k["health"]["healthy"] and k["summary"] is not None}
                    if kids <= ready:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"zone {parent} still misses children "
                                           f"{sorted(kids - ready)} after {timeout:g}s")
                    time.sleep(0.1)

    def kill(self, name: str) -> None:
        self._cpu_of_dead += _cpu(self.procs[name])
        self.procs[name].kill()

    def cpu_seconds(self) -> float:
        """CPU (user + system) the zone processes used so far: on a shared machine,
        a fairer measure of cost than wall time."""
        return self._cpu_of_dead + sum(_cpu(p) for p in self.procs.values()
                                       if p.proc is not None and p.proc.poll() is None)

    def stop(self) -> None:
        # Signal everyone first so that the seven shutdowns overlap.
        for p in self.procs.values():
            if p.proc is not None and p.proc.poll() is None:
                p.proc.terminate()
        for p in self.procs.values():
            p.stop()


def _cpu(p: ServerProcess) -> float:
    try:
        fields = Path(f"/proc/{p.proc.pid if p.proc else 0}/stat").read_text().split()
    except OSError:  # gone, or not Linux
        return 0.0
    # utime and stime; the command name (field 2) has no spaces for python.
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


# -- the workload -----------------------------------------------------------------------

FLAVORS: dict[str, dict[str, int]] = {
    "small": {"VCPU": 2, "MEMORY_MB": 4096},
    "medium": {"VCPU": 4, "MEMORY_MB": 8192},
    "large": {"VCPU": 16, "MEMORY_MB": 65536},
}
# kind -> share of the requests. "hipaa-ord" can only land in the cell killed half
# way, and "oversized" fits no host: both show how a refusal is explained.
MIX: dict[str, float] = {"plain": 0.30, "best": 0.15, "hipaa": 0.13, "anti-affinity": 0.10,
                         "avx2": 0.10, "shared-disk": 0.12, "hipaa-ord": 0.06,
                         "oversized": 0.04}


def request_body(kind: str, rng: random.Random) -> dict[str, Any]:
    flavor = FLAVORS[rng.choice(["small"] * 5 + ["medium"] * 3 + ["large"])]
    group: dict[str, Any] = {"resources": dict(flavor)}
    body: dict[str, Any] = {"consumers": [str(uuid.uuid4())], "project_id": "demo",
                            "user_id": "demo", "groups": [group]}
    if kind == "best":
        body["mode"] = "best"
    elif kind == "hipaa":
        body["constraints"] = [{"type": "tags", "required": ["hipaa"]}]
    elif kind == "hipaa-ord":
        body["constraints"] = [{"type": "tags", "required": ["hipaa"]},
                               {"type": "location", "pattern": "ord/*"}]
    elif kind == "anti-affinity":
        body["consumers"] = [str(uuid.uuid4()) for _ in range(3)]
        body["group"] = f"web-{uuid.uuid4().hex[:8]}"
        body["constraints"] = [{"type": "anti_affinity", "level": "rack"}]
    elif kind == "avx2":
        group["required"] = [AVX2]
    elif kind == "shared-disk":
        # Compute in a cell, disk from the root's pool: no cell has DISK_GB.
        group["resources"]["DISK_GB"] = 100
    elif kind == "oversized":
        group["resources"] = {"VCPU": 1024, "MEMORY_MB": 4096}
    return body


@dataclass(slots=True)
class Result:
    kind: str
    status: int
    latency_ms: float
    consumers: list[str]
    zones: list[str] = field(default_factory=list)
    retries: int = 0  # claims the zones lost to concurrent writers and redid
    client_retries: int = 0  # whole requests this client sent again
    reason: str = ""
    after_kill: bool = False
    code: str = ""  # the error code of a refusal

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def pending(self) -> bool:
        """Decided across zones, not confirmed by all: recovery settles it."""
        return self.code == errors.OUTCOME_PENDING


def explained(body: Any) -> str:
    """The one line that says why (the 409 body's explain summary, else its detail)."""
    if not isinstance(body, dict):
        return str(body)[:200]
    summary = (body.get("explain") or {}).get("summary")
    if summary:
        return str(summary)
    errs = body.get("errors") or [{}]
    return str(errs[0].get("detail", ""))[:300]


def send(client: httpx.Client, kind: str, body: dict[str, Any]) -> Result:
    """POST /strato/v1/schedule at the root. A 409 concurrent_update (the zones lost
    every race) claimed nothing, so it is sent again as is; anything else is final
    (the root never dies here, and resending after a 5xx could double-place)."""
    start = time.perf_counter()
    client_retries = 0
    answer: Any = None
    while True:
        try:
            r = client.post("/strato/v1/schedule", json=body)
        except httpx.HTTPError as exc:
            status, answer = NO_ANSWER, {"errors": [{"detail": f"{type(exc).__name__}: {exc}"}]}
        else:
            status, answer = r.status_code, (r.json() if r.content else None)
        lost_race = status == 409 and isinstance(answer, dict) and (
            answer.get("errors") or [{}])[0].get("code") == "placement.concurrent_update"
        if lost_race and client_retries < 3:
            client_retries += 1
            continue
        break
    ms = (time.perf_counter() - start) * 1000
    res = Result(kind, status, ms, list(body["consumers"]), client_retries=client_retries)
    if status == 200 and isinstance(answer, dict):
        res.zones = [str(p["zone"]) for p in answer["placements"]]
        res.retries = int(answer.get("retries", 0))
    else:
        res.reason = explained(answer)
        if isinstance(answer, dict):
            res.code = str((answer.get("errors") or [{}])[0].get("code", ""))
    return res


def run_workload(client: httpx.Client, plan: Sequence[tuple[str, dict[str, Any]]],
                 clients: int, half_way: Callable[[], None]) -> tuple[list[Result], float]:
    """`clients` threads work through `plan`; `half_way` runs (in this thread) once
    half the requests have answered. Daemon threads, so Ctrl-C is not held up."""
    results: list[Result] = []
    lock = threading.Lock()
    half, stop = threading.Event(), threading.Event()
    next_index = 0
    killed = False

    def worker() -> None:
        nonlocal next_index
        while not stop.is_set():
            with lock:
                i = next_index
                next_index += 1
            if i >= len(plan):
                return
            with lock:
                # Sent after the kill: a request in flight when the cell died
                # may have been placed there, and counts with the first half.
                after = killed
            res = send(client, *plan[i])
            with lock:
                res.after_kill = after
                results.append(res)
                if len(results) >= len(plan) // 2:
                    half.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    t0 = time.perf_counter()
    try:
        for t in threads:
            t.start()
        while not half.wait(0.2):
            if not any(t.is_alive() for t in threads):
                break
        half_way()
        with lock:
            killed = True
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    finally:
        stop.set()
    return results, time.perf_counter() - t0


# -- the report -------------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def tree_view(zp: ZoneProcesses, hosts: dict[str, int], pool: str) -> Tree:
    nodes: dict[str, Tree] = {}
    root = Tree("[bold]zone tree[/] (seven processes, one SQLite file each)")
    for z in zp.zones:
        p = zp.procs[z.name]
        bits = [f"[bold]{z.name}[/]", zp.url(z.name), f"pid {p.proc.pid if p.proc else '-'}"]
        if z.prefix:
            bits.append(f"location {z.prefix}")
        if z.tags:
            bits.append("tags " + ",".join(z.tags))
        if z.name in hosts:
            bits.append(f"{hosts[z.name]} hosts")
        if z.parent is None:
            bits.append(f"shared disk pool {pool[:8]}")
        parent = root if z.parent is None else nodes[z.parent]
        nodes[z.name] = parent.add("  ".join(bits))
    return root


def workload_table(results: Sequence[Result], skipped: dict[str, str]) -> Table:
    t = Table(title="Requests at the root, by kind")
    for col in ("kind", "requests", "placed", "rejected", "p50 ms", "p99 ms", "retries"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for kind in MIX:
        mine = [r for r in results if r.kind == kind]
        lat = [r.latency_ms for r in mine]
        if kind in skipped and not mine:
            t.add_row(kind, "0", "-", "-", "-", "-", f"skipped: {skipped[kind]}")
            continue
        t.add_row(kind, str(len(mine)), str(sum(r.ok for r in mine)),
                  str(sum(not r.ok for r in mine)), f"{pct(lat, 0.5):.1f}",
                  f"{pct(lat, 0.99):.1f}",
                  str(sum(r.retries + r.client_retries for r in mine)))
    lat = [r.latency_ms for r in results]
    t.add_row("[bold]all", str(len(results)), str(sum(r.ok for r in results)),
              str(sum(not r.ok for r in results)), f"{pct(lat, 0.5):.1f}",
              f"{pct(lat, 0.99):.1f}",
              str(sum(r.retries + r.client_retries for r in results)))
    return t


def zones_table(results: Sequence[Result]) -> Table:
    t = Table(title=f"Instances placed per zone (zone path); {KILLED} killed half way")
    for col in ("zone path", "first half", "second half", "total"):
        t.add_column(col, justify="left" if col == "zone path" else "right")
    before: Counter[str] = Counter()
    after: Counter[str] = Counter()
    for r in results:
        (after if r.after_kill else before).update(r.zones)
    for z in sorted(before.keys() | after.keys()):
        t.add_row(z, str(before[z]), str(after[z]), str(before[z] + after[z]))
    return t


def refusal(r: Result) -> str:
    """`409 strato.no_valid_placement`: the HTTP status and error code of a refusal."""
    if r.status == NO_ANSWER:
        return "no answer"
    return f"{r.status} {r.code}".strip()


def rejections_table(results: Sequence[Result]) -> Table:
    t = Table(title="Rejected requests and why (the error body's code and explain)")
    for col in ("before kill", "after kill", "kind", "status", "reason"):
        t.add_column(col, justify="right" if "kill" in col else "left",
                     overflow="fold" if col == "reason" else "ellipsis",
                     no_wrap=col == "status")
    grouped: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        if not r.ok:
            grouped[(r.kind, refusal(r), r.reason)][r.after_kill] += 1
    for (kind, status, reason), (before, after) in sorted(grouped.items(),
                                                          key=lambda kv: -sum(kv[1]))[:8]:
        t.add_row(str(before), str(after), kind, status, reason)
    return t


def children_table(client: httpx.Client, zp: ZoneProcesses, parent: str) -> Table:
    got = _ok(client.get(zp.url(parent) + "/strato/v1/children"), 200)["children"]
    t = Table(title=f"GET /strato/v1/children at {parent}")
    for col in ("child", "healthy", "failures", "last error", "next probe in s", "in doubt"):
        t.add_column(col)
    for k in got:
        h = k["health"]
        t.add_row(k["name"], "[green]yes" if h["healthy"] else "[red]no", str(h["failures"]),
                  str(h["last_error"] or ""), str(h["next_probe_in"] or ""),
                  str(k.get("in_doubt", 0)))
    return t


def in_doubt_at(client: httpx.Client, zp: ZoneProcesses, parent: str, child: str) -> int:
    got = _ok(client.get(zp.url(parent) + "/strato/v1/children"), 200)["children"]
    return sum(int(k.get("in_doubt", 0)) for k in got if k["name"] == child)


def restart_and_settle(client: httpx.Client, zp: ZoneProcesses, parent: str,
                       console: Console, timeout: float = 60.0) -> None:
    """Start the killed cell again on its own database: it registers with its
    parent, which then cancels there every claim whose answer the kill lost."""
    doubt = in_doubt_at(client, zp, parent, KILLED)
    t0 = time.perf_counter()
    zp.procs[KILLED].start(60.0)
    deadline = time.monotonic() + timeout
    while in_doubt_at(client, zp, parent, KILLED) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = in_doubt_at(client, zp, parent, KILLED)
    proc = zp.procs[KILLED].proc
    console.print(
        f"restarted {KILLED} on its own database (pid {proc.pid if proc else '-'}): it "
        f"registered again with {parent}, "
        f"which cancelled there the {doubt} request(s) whose answers the kill had lost "
        f"(committed in {KILLED}, placed elsewhere since) in {time.perf_counter() - t0:.1f}s"
        + (f"; [red]{left} still in doubt[/]" if left else ""))


def settle_pending(zp: ZoneProcesses, consumers: set[str], timeout: float = 60.0
                   ) -> set[str]:
    """Wait until recovery has completed or undone every placement answered
    `strato.outcome_pending` (no provisional claim left for its consumers in any
    zone); return those that ended placed (they hold allocations)."""
    if not consumers:
        return set()
    dbs = [Database(f"sqlite:///{zp.db_path(z.name)}") for z in zp.zones]
    try:
        deadline = time.monotonic() + timeout
        while True:
            held = set()
            for db in dbs:
                with db.read() as conn:
                    held |= set(conn.execute(sa.select(provisional_claims.c.consumer_uuid)
                                             .where(provisional_claims.c.consumer_uuid
                                                    .in_(sorted(consumers)))).scalars())
            if not held or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        placed: set[str] = set()
        for db in dbs:
            with db.read() as conn:
                placed |= set(conn.execute(sa.select(allocations.c.consumer_id)
                                           .where(allocations.c.consumer_id
                                                  .in_(sorted(consumers)))).scalars())
        return placed
    finally:
        for db in dbs:
            db.dispose()


def invariants(zp: ZoneProcesses, live: set[str]) -> list[Violation]:
    names = [z.name for z in zp.zones]
    dbs = [Database(f"sqlite:///{zp.db_path(n)}") for n in names]
    try:
        return check_databases(dbs, names, live)
    finally:
        for db in dbs:
            db.dispose()


# -- the demo ---------------------------------------------------------------------------

@dataclass
class Options:
    providers: int = 2000
    requests: int = 500
    clients: int = 8
    api_sample: int = 10  # hosts per cell registered through the HTTP API
    seed: int = 7
    keep: bool = False


@dataclass(frozen=True, slots=True)
class Built:
    hosts: dict[str, int]  # cell -> hosts
    shared_pool: str  # the root's sharing provider


def build(zp: ZoneProcesses, opts: Options, console: Console) -> Built:
    """Bulk-load the cells, start the tree, register a sample through the API,
    create the root's shared disk pool."""
    rng = random.Random(opts.seed)
    leaves = cells(zp.zones)
    per_cell = max(1, opts.providers // len(leaves))
    sample = min(opts.api_sample, per_cell // 2)
    aggregate = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    fleet = {c.name: plan_hosts(c, per_cell, rng) for c in leaves}
    t0 = time.perf_counter()
    template = migrated_template(zp.root_dir / "_template.db")
    for z in zp.zones:
        shutil.copyfile(template, zp.db_path(z.name))
    for c in leaves:
        db = Database(f"sqlite:///{zp.db_path(c.name)}")
        bulk_load(db, fleet[c.name][sample:], aggregate)
        db.dispose()
    console.print(f"bulk-loaded {(per_cell - sample) * len(leaves):,} hosts into "
                  f"{len(leaves)} cell databases through the store in "
                  f"{time.perf_counter() - t0:.1f}s (before starting the processes)")
    t0 = time.perf_counter()
    zp.start()
    zp.wait_linked()
    console.print(f"started {len(zp.procs)} zone processes; children registered with their "
                  f"parents in {time.perf_counter() - t0:.1f}s ({zp.cpu_seconds():.1f} CPU-s; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    t0 = time.perf_counter()

    def register(c: ZoneDef) -> None:
        with httpx.Client(base_url=zp.url(c.name), headers=HEADERS, timeout=30) as client:
            for h in fleet[c.name][:sample]:
                register_via_api(client, h, aggregate)

    with ThreadPoolExecutor(len(leaves)) as pool:
        list(pool.map(register, leaves))
    took = time.perf_counter() - t0
    n = sample * len(leaves)
    if n:
        rate = n / took
        console.print(f"registered {n} hosts through the HTTP API ({len(leaves)} cells "
                      f"concurrently) in {took:.1f}s: {rate:.0f} hosts/s, so "
                      f"{per_cell * len(leaves):,} would take ~{per_cell * len(leaves) / rate:.0f}"
                      "s; hence the bulk load")
    with httpx.Client(base_url=zp.url(zp.zones[0].name), headers=HEADERS,
                      timeout=30) as client:
        shared = create_shared_pool(client, aggregate, disk_gb=100 * opts.requests + 10000)
    return Built({name: len(hs) for name, hs in fleet.items()}, shared)


def probe_shared(client: httpx.Client, rng: random.Random) -> tuple[Result, str | None]:
    """One shared-disk request before the clock starts: a 409 or 400 means this
    build cannot yet place across zones, and the kind is skipped."""
    res = send(client, "shared-disk", request_body("shared-disk", rng))
    if res.status in (400, 409):
        return res, f"the root answered {res.status} ({res.reason[:120]})"
    return res, None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(providers: int = 2000, requests: int = 500, keep: bool = False,
             clients: int = 8, seed: int = 7) -> int:
    opts = Options(providers=providers, requests=requests, clients=clients, seed=seed,
                   keep=keep)
    console = consoles.console()
    started = time.perf_counter()
    root_dir = Path(tempfile.mkdtemp(prefix="strato-demo-"))
    zp = ZoneProcesses(root_dir)
    root = zp.zones[0].name
    failed = False
    console.rule("[bold]Strato demo[/]: a zone tree of seven processes on loopback")
    if threading.current_thread() is threading.main_thread():
        # A plain `kill` of the demo must stop the zones too, as Ctrl-C does.
        signal.signal(signal.SIGTERM, _interrupt)
        # And Ctrl-C must, even where the demo was started with SIGINT ignored
        # (a background job of a shell without job control: Python then keeps
        # the ignore, and the demo ran on, its zones orphaned once killed).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        built = build(zp, opts, console)
        console.print(tree_view(zp, built.hosts, built.shared_pool))
        rng = random.Random(opts.seed + 1)
        kinds, weights = list(MIX), list(MIX.values())
        with httpx.Client(base_url=zp.url(root), headers=HEADERS, timeout=30,
                          limits=httpx.Limits(max_connections=2 * opts.clients)) as client:
            probe, why_not = probe_shared(client, rng)
            skipped = {"shared-disk": why_not} if why_not else {}
            if why_not:
                console.print(f"[yellow]shared-disk requests skipped[/]: {why_not}. They "
                              "need cross-zone shared pools (issue 5, item 4).")
                kinds.remove("shared-disk")
                weights.pop(list(MIX).index("shared-disk"))
            plan = [(k, request_body(k, rng))
                    for k in rng.choices(kinds, weights, k=opts.requests - 1)]
            console.print(f"{len(plan) + 1} requests from {opts.clients} concurrent clients "
                          f"at the root; SIGKILL {KILLED} half way")
            cpu0 = zp.cpu_seconds()
            def kill() -> None:
                pid = zp.procs[KILLED].proc
                zp.kill(KILLED)
                console.print(f"[red]SIGKILL {KILLED}[/] (pid {pid.pid if pid else '-'}) "
                              f"after {len(plan) // 2} answers; the workload goes on")

            results, elapsed = run_workload(client, plan, opts.clients, kill)
            cpu = zp.cpu_seconds() - cpu0
            results = ([] if why_not else [probe]) + results
            placed = sum(len(r.zones) for r in results)
            console.rule("results")
            console.print(workload_table(results, skipped))
            console.print(zones_table(results))
            console.print(rejections_table(results))
            lat = [r.latency_ms for r in results]
            console.print(f"[bold]{placed} instances placed[/] in {elapsed:.1f}s: "
                          f"{placed / elapsed:.0f} placements/s, "
                          f"{len(results) / elapsed:.0f} requests/s; latency p50 "
                          f"{pct(lat, 0.5):.1f} ms, p99 {pct(lat, 0.99):.1f} ms; "
                          f"{sum(r.retries for r in results)} claims retried in the zones, "
                          f"{sum(r.client_retries for r in results)} requests resent; "
                          f"the zones used {cpu:.1f} CPU-s ({1000 * cpu / len(results):.0f} "
                          f"CPU-ms per request; load average {os.getloadavg()[0]:.1f} on "
                          f"{os.cpu_count()} cores)")
            killed_parent = next(z.parent for z in zp.zones if z.name == KILLED)
            assert killed_parent is not None
            console.print(children_table(client, zp, killed_parent))
            restart_and_settle(client, zp, killed_parent, console)
        live = {c for r in results if r.ok for c in r.consumers}
        pending = {c for r in results if r.pending for c in r.consumers}
        if pending:
            settled = settle_pending(zp, pending)
            console.print(f"{len(pending)} consumer(s) answered {errors.OUTCOME_PENDING} "
                          f"(decided across zones while {KILLED} was down): recovery "
                          f"placed {len(settled)} and undid {len(pending - settled)}")
            live |= settled
        found = invariants(zp, live)
        if found:
            failed = True
            console.print(f"[red bold]invariants violated[/] across the seven databases "
                          f"({len(found)}):")
            for v in found[:10]:
                console.print(f"  {v.kind}: {v.detail}")
        else:
            console.print(f"[green bold]invariants hold[/] across the seven databases: no "
                          f"provider over capacity, no consumer allocated twice, every "
                          f"placed consumer ({len(live)}) holds its allocations and nothing "
                          "else does")
        root_url = zp.url(zp.zones[0].name)
        try:
            view, _ = render(root_url, HEADERS.get("x-auth-token", "admin"))
            console.print("the tree now (strato tree --url " + root_url + "):")
            console.print(view)
        except Exception as exc:  # a view, not a check: say so and go on
            console.print(f"[yellow]strato tree could not be shown[/]: {escape(str(exc))}")
        console.print("every zone serves a web view at /ui (any user name, the token as "
                      "password), /docs, /healthz, /readyz and /metrics (Prometheus): "
                      "after `strato serve`, open http://127.0.0.1:8780/ui and "
                      "http://127.0.0.1:8780/metrics (the demo's zones stop now)")
        return 1 if failed else 0
    except Exception as exc:  # the demo must explain, not dump a traceback
        why = str(exc) or type(exc).__name__  # (an httpx timeout says nothing)
        console.print(f"[red]demo failed:[/] {escape(why)}; zone logs in {root_dir}")
        opts.keep = True
        return 1
    finally:
        zp.stop()
        console.print(f"stopped every zone process; demo took {time.perf_counter() - started:.0f}s"
                      + (f"; data kept in {root_dir}" if opts.keep else ""))
        if not opts.keep:
            shutil.rmtree(root_dir, ignore_errors=True)
