"""The zone tree under test: seven real `strato serve` processes.

```
                     root            pool: DISK_GB (aggregate AGG_ROOT)
                   /      \\
               mid1        mid2      mid1 pool: IPV4_ADDRESS (aggregate AGG_MID)
              /    \\      /    \\
          cell1  cell2  cell3  cell4   three hosts each, site/room/rack/host
                  ^ in its own network namespace (a real partition)
```

The two pools offer different classes on purpose: a zone splits a request
only for classes that no child offers, so a DISK_GB request is split at the
root (compute in cell1-3, whose hosts are in AGG_ROOT) and an IPV4_ADDRESS
request is delegated to mid1 and split there (cell1-2 are in AGG_MID).

Processes are only ever signalled by the pid we started (SIGCONT before any
stop, so a paused server can exit); `close()` runs on every path.

Every zone keeps its store in a SQLite file of the work directory, unless it
is named in `Cluster.postgres`: then it gets a PostgreSQL database of its own,
created fresh for the run (a unique name: `strato_chaos_<pid>_<tag>_<zone>`)
and dropped by `close()`, on every path. The namespaced cell reaches the
server through its Unix socket (a filesystem path, not in the network
namespace), so a partition cuts its links to other zones, never to its own
database, as a database beside a cut-off cell would stay.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from strato.process import free_port
from tests.chaos.netns import Netns, NetnsUnavailable, Relay

TOKEN = "admin"
JOIN_TOKEN = "chaos-join"
HEADERS = {"x-auth-token": TOKEN, "openstack-api-version": "placement 1.39"}
LEVELS = ("site", "room", "rack", "host")
# libfaketime (Debian: apt-get install libfaketime), for the clock nemesis.
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
HOST_INVENTORY = {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 16384}}
# The pools are small on purpose: their exhaustion (a split that must undo
# its held part) is part of every run.
ROOT_POOL = {"DISK_GB": {"total": 800}}
MID_POOL = {"IPV4_ADDRESS": {"total": 32}}
HOSTS_PER_CELL = 3
# Timings short enough that a fault heals within a test run.
TIMING = ["--summary-interval", "0.3", "--child-timeout", "1.0"]
HOLD_TTL = 5.0
ZONE_NAMES = ("root", "mid1", "mid2", "cell1", "cell2", "cell3", "cell4")
# Where the PostgreSQL zones' databases are made (trust auth on loopback), and
# the server's Unix socket directory for a zone in the network namespace.
PG_URL = os.environ.get("STRATO_CHAOS_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
PG_SOCKET_DIR = os.environ.get("STRATO_CHAOS_PG_SOCKET", "/var/run/postgresql")
DEFAULT_HOLD_TTL = 30.0  # the server's default when it has no --hold-ttl flag


def client(url: str, timeout: float = 10.0) -> httpx.Client:
    return httpx.Client(base_url=url, headers=HEADERS, timeout=timeout)


@functools.cache
def serve_flags() -> frozenset[str]:
    """Flags this build of `strato serve` knows (the zone protocol is being
    rewritten: newer flags are used when present, not assumed)."""
    out = subprocess.run([sys.executable, "-m", "strato.cli.main", "serve", "--help"],
                         capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "COLUMNS": "300"}).stdout
    return frozenset(w.strip("│ ,") for w in out.split() if w.startswith("--"))


@dataclass
class Zone:
    """One `strato serve` process; restartable with the same port and database."""

    name: str
    path: str  # zone path as answers spell it: root/mid1/cell1
    workdir: Path
    bind: str = "127.0.0.1"
    reach: str = "127.0.0.1"  # the address others call it at
    parent: Zone | None = None
    location_prefix: str | None = None
    netns: Netns | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    # libfaketime's offset for the next start ("+20s", "-15s"): its wall clock
    # wrong, the monotonic one right. None: the true time.
    clock_skew: str | None = None
    # Its store: None for a SQLite file in the work directory, else a
    # PostgreSQL database URL (see `PgDatabases`).
    db_url: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.reach}:{self.port}"

    def url_for_child(self, child: Zone) -> str:
        """The parent's address as the child can reach it (from inside a netns,
        the host side of its veth)."""
        host = child.netns.host_addr if child.netns else self.reach
        return f"http://{host}:{self.port}"

    def command(self) -> list[str]:
        db = self.db_url or f"sqlite:///{self.workdir / (self.name + '.db')}"
        cmd = [sys.executable, "-m", "strato.cli.main", "serve", "--db", db,
               "--host", self.bind, "--port", str(self.port), "--zone", self.name,
               "--auth-token", TOKEN, "--advertise-url", self.url, *TIMING]
        if "--hold-ttl" in serve_flags():
            cmd += ["--hold-ttl", str(HOLD_TTL)]
        # Zone links with scoped credentials where the server has them: children
        # register with a token that can do nothing else, and parents call
        # with a link token, never the admin one.
        scoped = "--link-token" in serve_flags()
        if scoped:
            cmd += ["--registration-token", JOIN_TOKEN, "--link-token", f"link-{self.name}"]
        if self.parent is not None:
            cmd += ["--parent", self.parent.url_for_child(self),
                    "--parent-token", JOIN_TOKEN if scoped else TOKEN]
        if self.location_prefix:
            cmd += ["--location-prefix", self.location_prefix]
        return (self.netns.exec_prefix() if self.netns else []) + cmd

    def start(self, timeout: float = 90.0) -> Zone:
        log = open(self.workdir / f"{self.name}.log", "ab")  # noqa: SIM115
        try:
            env = None
            if self.clock_skew is not None:
                env = {**os.environ, "LD_PRELOAD": str(FAKETIME_LIB),
                       "FAKETIME": self.clock_skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                       "FAKETIME_NO_CACHE": "1"}
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, env=env)
        finally:
            log.close()  # the child has its own descriptor
        self.paused = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zone {self.name} exited with {self.proc.returncode}; "
                                   f"see {self.workdir / (self.name + '.log')}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/", headers=HEADERS, timeout=1.0).status_code == 200:
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"zone {self.name} did not start in time")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9: no clean shutdown, as in a crash."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass(frozen=True)
class Host:
    uuid: str
    zone: str
    location: str


class PgDatabases:
    """The PostgreSQL databases of one run: created empty, dropped at the end
    (`WITH (FORCE)`: a zone killed or paused may still hold connections)."""

    def __init__(self, base: str = PG_URL, socket_dir: str = PG_SOCKET_DIR) -> None:
        self.base = sa.engine.make_url(base)
        self.socket_dir = socket_dir
        self.tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.names: list[str] = []

    def _admin(self) -> sa.engine.Engine:
        return sa.create_engine(self.base.set(database="postgres"),
                                isolation_level="AUTOCOMMIT")

    def create(self, zone: str, *, via_socket: bool = False) -> str:
        """A fresh database for `zone`; its URL (by the Unix socket when
        `via_socket`, for a zone whose loopback is not the server's)."""
        name = f"strato_chaos_{self.tag}_{zone}"
        engine = self._admin()
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            engine.dispose()
        self.names.append(name)
        b = self.base
        url = sa.engine.URL.create(
            b.drivername, username=b.username, password=b.password, database=name,
            # URL.set() keeps a field given None: the socket form is built anew.
            host=None if via_socket else b.host, port=None if via_socket else b.port,
            query={"host": self.socket_dir} if via_socket else b.query)
        return url.render_as_string(hide_password=False)

    def drop(self) -> None:
        if not self.names:
            return
        engine = self._admin()
        try:
            with engine.connect() as conn:
                for name in list(self.names):
                    try:
                        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                        self.names.remove(name)
                    except sa.exc.SQLAlchemyError as exc:
                        print(f"could not drop database {name}: {exc}", flush=True)
        finally:
            engine.dispose()


@dataclass
class Cluster:
    workdir: Path
    use_netns: bool = True
    # Zones whose store is a fresh PostgreSQL database (names from ZONE_NAMES).
    postgres: frozenset[str] = frozenset()
    pg: PgDatabases | None = None
    zones: dict[str, Zone] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)  # provider uuid -> zone name
    netns: Netns | None = None
    netns_note: str = ""
    relay: Relay | None = None
    agg_root: str = field(default_factory=lambda: str(uuid.uuid4()))
    agg_mid: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def root(self) -> Zone:
        return self.zones["root"]

    @property
    def cells(self) -> list[str]:
        return [n for n in self.zones if n.startswith("cell")]

    @property
    def partitioned_cell(self) -> str:
        return "cell2"

    def hold_ttl(self) -> float:
        return HOLD_TTL if "--hold-ttl" in serve_flags() else DEFAULT_HOLD_TTL

    def owners(self) -> dict[str, str]:
        """provider uuid -> the zone whose own store holds it."""
        return {**{u: h.zone for u, h in self.hosts.items()}, **self.pools}

    def ancestors(self, name: str) -> list[str]:
        """`name` and the zones above it."""
        out = []
        z: Zone | None = self.zones[name]
        while z is not None:
            out.append(z.name)
            z = z.parent
        return out

    def start(self) -> Cluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.use_netns:
            try:
                self.netns = Netns(0).create()
            except NetnsUnavailable as exc:
                self.netns_note = (f"ip netns not permitted ({exc}); the partition of "
                                   f"{self.partitioned_cell} falls back to SIGSTOP")
                print(self.netns_note, flush=True)
        root = Zone("root", "root", self.workdir)
        self._add([root])
        mids = []
        for m, site in (("mid1", "s1"), ("mid2", "s2")):
            mids.append(Zone(m, f"root/{m}", self.workdir, parent=root,
                             location_prefix=site))
        self._add(mids)
        if self.netns is not None:
            # mid1 is the parent of the namespaced cell, which calls it at the
            # host side of the veth: a relay there, the server on loopback.
            mid1 = self.zones["mid1"]
            self.relay = Relay(self.netns.host_addr, mid1.port, mid1.port).start()
        cells = []
        for i, (m, room) in enumerate((("mid1", "room1"), ("mid1", "room2"),
                                       ("mid2", "room1"), ("mid2", "room2")), start=1):
            name = f"cell{i}"
            mid = self.zones[m]
            z = Zone(name, f"root/{m}/{name}", self.workdir, parent=mid,
                     location_prefix=f"{mid.location_prefix}/{room}")
            if name == self.partitioned_cell and self.netns:
                z.netns = self.netns
                z.bind = z.reach = self.netns.inner_addr
            cells.append(z)
        self._add(cells)
        self._populate()
        self.wait_linked()

    def _add(self, level: list[Zone]) -> None:
        # One level at a time, its zones at once: start-up is mostly imports,
        # and the machine is shared.
        for z in level:
            self.zones[z.name] = z
            if z.name in self.postgres:
                if self.pg is None:
                    self.pg = PgDatabases()
                z.db_url = self.pg.create(z.name, via_socket=z.netns is not None)
        with ThreadPoolExecutor(len(level)) as pool:
            for f in [pool.submit(z.start) for z in level]:
                f.result()

    def _populate(self) -> None:
        for name in self.cells:
            z = self.zones[name]
            aggs = [self.agg_root] if name != "cell4" else []
            if name in ("cell1", "cell2"):
                aggs.append(self.agg_mid)
            with client(z.url) as c:
                for h in range(HOSTS_PER_CELL):
                    rack = "rack1" if h < 2 else "rack2"
                    loc = f"{z.location_prefix}/{rack}/{name}-h{h}"
                    rp = _provider(c, f"{name}-h{h}", HOST_INVENTORY, aggs=aggs)
                    r = c.put(f"/strato/v1/providers/{rp}/meta",
                              json={"location": loc, "tags": []})
                    r.raise_for_status()
                    self.hosts[rp] = Host(rp, name, loc)
        for zname, inv, agg in (("root", ROOT_POOL, self.agg_root),
                                ("mid1", MID_POOL, self.agg_mid)):
            with client(self.zones[zname].url) as c:
                rp = _provider(c, f"{zname}-pool", inv, aggs=[agg],
                               traits=["MISC_SHARES_VIA_AGGREGATE"])
                self.pools[rp] = zname

    def wait_linked(self, timeout: float = 30.0) -> None:
        """Every zone registered with its parent, healthy, its summary counted."""
        deadline = time.monotonic() + timeout
        want_vcpu = len(self.cells) * HOSTS_PER_CELL * HOST_INVENTORY["VCPU"]["total"]
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, KeyError), client(self.root.url) as c:
                s = c.get("/strato/v1/summary?fresh=1").json()
                if s["classes"]["VCPU"]["capacity"] >= want_vcpu and all(
                        k["healthy"] for k in s["children"]):
                    return
            time.sleep(0.3)
        raise RuntimeError("the zone tree did not link up in time")

    def close(self) -> None:
        """Stop every process we started, then remove the namespace and drop
        the PostgreSQL databases."""
        for z in self.zones.values():
            with contextlib.suppress(Exception):
                z.stop()
        if self.relay is not None:
            self.relay.stop()
        if self.netns is not None:
            self.netns.remove()
        if self.pg is not None:
            try:
                self.pg.drop()
            except Exception as exc:  # the rest of the cleanup has run
                print(f"could not drop the PostgreSQL databases {self.pg.names}: {exc}",
                      flush=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _provider(c: httpx.Client, name: str, inventories: dict[str, Any], *,
              aggs: list[str] | None = None, traits: list[str] | None = None) -> str:
    r = c.post("/resource_providers", json={"name": name})
    r.raise_for_status()
    rp = r.json()
    r = c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": rp["generation"], "inventories": inventories})
    r.raise_for_status()
    gen = r.json()["resource_provider_generation"]
    if traits:
        r = c.put(f"/resource_providers/{rp['uuid']}/traits",
                  json={"traits": traits, "resource_provider_generation": gen})
        r.raise_for_status()
        gen = r.json()["resource_provider_generation"]
    if aggs:
        r = c.put(f"/resource_providers/{rp['uuid']}/aggregates",
                  json={"aggregates": aggs, "resource_provider_generation": gen})
        r.raise_for_status()
    return str(rp["uuid"])
