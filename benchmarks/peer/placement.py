"""Real OpenStack Placement as a benchmark peer.

    python -m benchmarks.peer.placement --providers 1000

Placement is installed from PyPI into its own virtualenv (`ensure_peer_venv`),
so it never becomes a dependency of Strato; this module runs in Strato's
virtualenv and drives the peer through subprocesses and HTTP only.

- `ensure_peer_venv()`: `.venv-placement/` with openstack-placement, gunicorn
  and psycopg2 (Placement's driver for PostgreSQL).
- `PlacementPeer`: placement.conf (noauth2; SQLite in the temporary directory,
  or with `db="postgresql"` a fresh database on the local PostgreSQL server,
  dropped at close: Placement's usual deployment) in a temporary directory,
  schema through `placement-manage db sync`, standard traits and resource
  classes synced with Placement's own start-up code, then gunicorn on
  127.0.0.1:<free port>; stopped on exit.
- `bulk_load(peer.target, specs)`: writes providers, inventories, traits and
  aggregates straight into Placement's tables (the HTTP API is far too
  slow for 10,000+ providers); `verify()` then checks them through the API.
- `candidates_latency()` and `nova_claims()`: the two measurements the
  comparison needs (GET /allocation_candidates, and GET-then-PUT claims with
  retry on 409, the way Nova's scheduler claims).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from benchmarks.spec import ProviderSpec, make_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = ".venv-placement"
REQUIREMENTS = ("openstack-placement==16.0.0", "gunicorn==27.0.1", "psycopg2-binary==2.9.10")
"""Pinned: the issue's reference figures were taken with Placement 16.0.0."""
STAMP = ".strato-peer-stamp"
MICROVERSION = "1.36"
ADMIN_HEADERS = {"X-Auth-Token": "admin", "OpenStack-API-Version": f"placement {MICROVERSION}"}


class PeerError(RuntimeError):
    """The peer could not be installed, started, loaded or verified."""


def _log(msg: str) -> None:
    print(f"[placement-peer] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- venv


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


def peer_venv_ready(path: str | Path = DEFAULT_VENV) -> bool:
    """True when the venv at `path` was fully installed with today's requirements."""
    stamp = _resolve(path) / STAMP
    return stamp.is_file() and stamp.read_text().split() == list(REQUIREMENTS)


def ensure_peer_venv(path: str | Path = DEFAULT_VENV) -> Path:
    """Create (once) a separate virtualenv holding Placement and gunicorn; return its path.

    Relative paths are taken from the repository root. A stamp file written
    after a successful install makes later calls return at once.
    """
    venv = _resolve(path)
    if peer_venv_ready(venv):
        return venv
    py = venv / "bin" / "python"
    if not py.exists():
        _log(f"creating virtualenv {venv}")
        # From Strato's venv too, `-m venv` builds on the base interpreter.
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _log(f"installing {' '.join(REQUIREMENTS)} (a minute or two, once)")
    t = time.perf_counter()
    proc = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check",
                           "-q", *REQUIREMENTS], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PeerError(f"pip install failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    (venv / STAMP).write_text("\n".join(REQUIREMENTS) + "\n")
    _log(f"peer virtualenv ready in {time.perf_counter() - t:.0f} s")
    return venv


# --------------------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Runs inside the peer venv: Placement's own start-up step that inserts the
# standard traits (os-traits) and resource classes (os-resource-classes, whose
# ids are their index in that library), so bulk_load can look them up by name.
_SYNC_ATTRIBUTES = """
import sys
from oslo_config import cfg
from placement import conf, db_api, deploy
c = cfg.ConfigOpts()
conf.register_opts(c)
c([], project="placement", default_config_files=[sys.argv[1]])
db_api.configure(c)
deploy.update_database(c)
"""


class PlacementPeer:
    """OpenStack Placement served by gunicorn on 127.0.0.1, as a context manager.

    Workers: 2 gunicorn processes (one per core of this machine: Placement's
    allocation-candidate work is CPU-bound Python, so threads inside one
    process cannot use the second core) with 4 threads each (gthread), so 8
    concurrent clients are all in service at once instead of queueing in the
    listen backlog. The SQLite file is switched to WAL so readers are not
    blocked by the claims' writes (that only helps the peer).

    If `specs` are given they are bulk-loaded before the server starts;
    `bulk_load(peer.target, ...)` also works while it runs (Placement reads
    the database on every request and refreshes its name caches on a miss).
    """

    def __init__(self, *, venv: str | Path = DEFAULT_VENV, workdir: str | Path | None = None,
                 workers: int = 2, threads: int = 4, specs: Sequence[ProviderSpec] | None = None,
                 wal: bool = True, startup_timeout: float = 60.0, db: str = "sqlite",
                 pg_url: str | None = None) -> None:
        if db not in ("sqlite", "postgresql"):
            raise PeerError(f"db: {db!r} (sqlite or postgresql)")
        self.venv = _resolve(venv)
        self.db = db
        # PostgreSQL: a fresh database on this server for each peer, dropped
        # at close (trust auth on loopback, as on the development machine).
        self.pg_url = pg_url or os.environ.get("STRATO_PEER_PG_URL",
                                               "postgresql://postgres@127.0.0.1:5432/postgres")
        self.pg_db = f"strato_peer_{uuid.uuid4().hex[:12]}" if db == "postgresql" else None
        self.workers = workers
        self.threads = threads
        self.specs = specs
        self.wal = wal
        self.startup_timeout = startup_timeout
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._workdir = Path(workdir) if workdir is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self.port = 0
        self.load_seconds = 0.0

    # paths ---------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise PeerError("peer not prepared")
        return self._workdir

    @property
    def db_path(self) -> Path:
        return self.workdir / "placement.sqlite"

    @property
    def target(self) -> str:
        """Where Placement's tables are, for `bulk_load`: the SQLite file's path
        or the PostgreSQL database's URL."""
        if self.pg_db is None:
            return str(self.db_path)
        return _pg_database(self.pg_url, self.pg_db)

    @property
    def description(self) -> str:
        storage = "PostgreSQL" if self.pg_db else "SQLite (WAL)" if self.wal else "SQLite"
        return f"gunicorn, {self.workers} workers x {self.threads} threads, {storage}"

    @property
    def conf_path(self) -> Path:
        return self.workdir / "placement.conf"

    @property
    def log_path(self) -> Path:
        return self.workdir / "placement.log"

    @property
    def url(self) -> str:
        if not self.port:
            raise PeerError("peer not started")
        return f"http://127.0.0.1:{self.port}"

    def _bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    # lifecycle -----------------------------------------------------------
    def prepare(self) -> None:
        """Config file, schema, standard traits and classes; no server yet."""
        if not peer_venv_ready(self.venv):
            raise PeerError(f"no peer venv at {self.venv}: call ensure_peer_venv() first")
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="strato-placement-")
            self._workdir = Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "log_options = False\n"
            "[api]\n"
            "auth_strategy = noauth2\n"
            "[placement_database]\n"
            f"connection = {self._connection()}\n"
            "sync_on_startup = False\n"
        )
        if self.pg_db is not None:
            _pg_admin(self.pg_url, f'CREATE DATABASE "{self.pg_db}"')
        env = self._env()
        for cmd in ([self._bin("placement-manage"), "--config-file", str(self.conf_path),
                     "db", "sync"],
                    [self._bin("python"), "-c", _SYNC_ATTRIBUTES, str(self.conf_path)]):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  cwd=self.workdir)
            if proc.returncode != 0:
                raise PeerError(f"{cmd[0]} failed:\n{proc.stderr[-4000:]}")
        if self.wal and self.pg_db is None:
            with sqlite3.connect(self.db_path) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
        if self.specs is not None:
            t = time.perf_counter()
            bulk_load(self.target, self.specs)
            self.load_seconds = time.perf_counter() - t

    def start(self) -> None:
        self.port = free_port()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [self._bin("gunicorn"), "--workers", str(self.workers),
               "--worker-class", "gthread", "--threads", str(self.threads),
               "--bind", f"127.0.0.1:{self.port}", "--timeout", "900",
               "--graceful-timeout", "5", "--no-control-socket",
               "placement.wsgi.api:application"]
        # Own process group, so stop() can reach the workers by the master's id.
        self._proc = subprocess.Popen(cmd, env=self._env(), cwd=self.workdir,
                                      stdout=self._log_file, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise PeerError(f"placement exited with {self._proc.returncode}:\n"
                                + self.log_path.read_text(errors="replace")[-4000:])
            try:
                if httpx.get(self.url + "/", timeout=2).status_code == 200:
                    # A second answer, likely from the other worker, so both have booted.
                    httpx.get(self.url + "/", timeout=30)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise PeerError(f"placement did not answer within {self.startup_timeout} s; "
                        f"see {self.log_path}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()  # gunicorn master: graceful stop of its workers
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if proc is not None and proc.poll() is not None:
            # Stragglers in the group we created (workers outliving their master).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _connection(self) -> str:
        """Placement's [placement_database] connection (its own venv's driver)."""
        if self.pg_db is None:
            return f"sqlite:///{self.db_path}"
        url = _pg_database(self.pg_url, self.pg_db)
        return "postgresql+psycopg2://" + url.split("://", 1)[1]

    def close(self) -> None:
        self.stop()
        if self.pg_db is not None:
            with contextlib.suppress(Exception):
                _pg_admin(self.pg_url, f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)')
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def rss_bytes(self) -> int:
        """Resident memory of the gunicorn master and its workers."""
        import psutil

        if self._proc is None:
            return 0
        try:
            root = psutil.Process(self._proc.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return 0

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        env["OS_PLACEMENT_CONFIG_DIR"] = str(self.workdir)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def __enter__(self) -> PlacementPeer:
        try:
            self.prepare()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# --------------------------------------------------------------------------- bulk load


@dataclass(frozen=True)
class LoadStats:
    providers: int
    inventories: int
    traits: int
    aggregates: int
    seconds: float


def _now() -> str:
    # The text form SQLAlchemy stores for DATETIME columns on SQLite.
    return datetime.now(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


def _pg_database(url: str, name: str) -> str:
    """`url` (a PostgreSQL server's URL) with its database replaced by `name`."""
    base = url.split("?", 1)[0]
    return base.rsplit("/", 1)[0] + "/" + name


def _pg_admin(url: str, statement: str) -> None:
    """One statement outside a transaction (CREATE/DROP DATABASE) on `url`."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


class _Db:
    """The DB-API connection `bulk_load` writes through: SQLite (`?` parameters)
    or PostgreSQL (psycopg, `%s`); the statements are written for both."""

    def __init__(self, target: str) -> None:
        self.pg = target.startswith("postgresql://")
        if self.pg:
            import psycopg

            self.raw: Any = psycopg.connect(target, autocommit=True)
        else:
            self.raw = sqlite3.connect(target, isolation_level=None)

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.pg else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(self._sql(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.pg:
            with self.raw.cursor() as cur:
                cur.executemany(self._sql(sql), rows)
        else:
            self.raw.executemany(sql, rows)

    def begin(self) -> None:
        if not self.pg:
            self.execute("PRAGMA synchronous=OFF")
        self.execute("BEGIN" if self.pg else "BEGIN IMMEDIATE")

    @property
    def in_transaction(self) -> bool:
        if self.pg:
            import psycopg

            return bool(self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)
        return bool(self.raw.in_transaction)

    def close(self) -> None:
        self.raw.close()


def _ids(conn: _Db, table: str) -> dict[str, int]:
    return {name: int(i) for i, name in conn.execute(f"SELECT id, name FROM {table}")}


def _ensure_custom(conn: _Db, table: str, known: dict[str, int],
                   names: Iterable[str], now: Any, first_id: int | None) -> None:
    """Insert CUSTOM_* names missing from `table`; a missing standard name is an error."""
    missing = sorted(set(names) - known.keys())
    bad = [n for n in missing if not n.startswith("CUSTOM_")]
    if bad:
        raise PeerError(f"{table} has no {bad[:5]}: standard names are synced by Placement "
                        "at start-up (PlacementPeer.prepare does it); check the spelling")
    for name in missing:
        if first_id is None:
            row = conn.execute(f"INSERT INTO {table} (created_at, name) VALUES (?, ?) "
                               "RETURNING id", (now, name)).fetchone()
            known[name] = int(row[0])
        else:
            # Custom resource classes get ids from 10000 up, as Placement assigns them.
            top = conn.execute(f"SELECT MAX(id) FROM {table}").fetchone()[0] or 0
            new_id = max(first_id, int(top) + 1)
            conn.execute(f"INSERT INTO {table} (id, created_at, name) VALUES (?, ?, ?)",
                         (new_id, now, name))
            known[name] = new_id


def bulk_load(target: str | Path, providers: Sequence[ProviderSpec]) -> LoadStats:
    """Insert `providers` straight into Placement's database, in one transaction.

    `target`: the SQLite file's path, or a `postgresql://` URL (`PlacementPeer.target`).
    Tables written, as Placement's models define them: resource_providers
    (root_provider_id and parent_provider_id as integer ids), inventories,
    resource_provider_traits, placement_aggregates and
    resource_provider_aggregates. Standard traits and resource classes must
    already be there (Placement inserts them at start-up); CUSTOM_* ones are
    added. Parents may be earlier in `providers` or already in the database.
    """
    t = time.perf_counter()
    conn = _Db(str(target))
    # SQLite: the text form SQLAlchemy stores for DATETIME columns.
    now: Any = (datetime.now(UTC).replace(tzinfo=None) if conn.pg else _now())
    try:
        conn.begin()
        classes = _ids(conn, "resource_classes")
        traits = _ids(conn, "traits")
        if not classes or not traits:
            raise PeerError("resource_classes/traits are empty: run PlacementPeer.prepare() "
                            "(or start Placement once) before bulk_load")
        _ensure_custom(conn, "resource_classes", classes,
                       (rc for p in providers for rc in p.inventories), now, 10000)
        _ensure_custom(conn, "traits", traits, (tr for p in providers for tr in p.traits),
                       now, None)

        agg_uuids = sorted({a for p in providers for a in p.aggregates})
        conn.executemany("INSERT INTO placement_aggregates (created_at, uuid) "
                         "VALUES (?, ?) ON CONFLICT DO NOTHING", [(now, a) for a in agg_uuids])
        aggs = {u: int(i) for i, u in conn.execute("SELECT id, uuid FROM placement_aggregates")}

        start = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM resource_providers")
                    .fetchone()[0]) + 1
        ids = {p.uuid: start + k for k, p in enumerate(providers)}
        if len(ids) != len(providers):
            raise PeerError("duplicate provider uuids in specs")
        parents = {p.uuid: p.parent_uuid for p in providers}
        roots: dict[str, int] = {}
        existing_parents = {p.parent_uuid for p in providers
                            if p.parent_uuid and p.parent_uuid not in ids}
        existing: dict[str, tuple[int, int]] = {}
        for u in existing_parents:
            row = conn.execute("SELECT id, root_provider_id FROM resource_providers "
                               "WHERE uuid = ?", (u,)).fetchone()
            if row is None:
                raise PeerError(f"parent {u} is neither in the specs nor in the database")
            existing[u] = (int(row[0]), int(row[1]))

        def root_of(u: str) -> int:
            chain = []
            while u not in roots:
                if u in existing:
                    roots[u] = existing[u][1]
                    break
                parent = parents[u]
                if parent is None:
                    roots[u] = ids[u]
                    break
                chain.append(u)
                if len(chain) > len(providers):
                    raise PeerError("cycle in parent_uuid")
                u = parent
            for c in chain:
                roots[c] = roots[u]
            return roots[chain[0]] if chain else roots[u]

        def id_of(u: str) -> int:
            return ids[u] if u in ids else existing[u][0]

        rp_rows: list[tuple[Any, ...]] = []
        inv_rows: list[tuple[Any, ...]] = []
        trait_rows: list[tuple[str, int, int]] = []
        agg_rows: list[tuple[str, int, int]] = []
        for p in providers:
            pid = ids[p.uuid]
            rp_rows.append((now, pid, p.uuid, p.name, 1 if p.inventories else 0, root_of(p.uuid),
                            id_of(p.parent_uuid) if p.parent_uuid else None))
            for rc, inv in p.inventories.items():
                total = int(inv["total"])
                inv_rows.append((now, pid, classes[rc], total, int(inv.get("reserved", 0)),
                                 int(inv.get("min_unit", 1)), int(inv.get("max_unit", total)),
                                 int(inv.get("step_size", 1)),
                                 float(inv.get("allocation_ratio", 1.0))))
            trait_rows.extend((now, traits[tr], pid) for tr in dict.fromkeys(p.traits))
            agg_rows.extend((now, pid, aggs[a]) for a in dict.fromkeys(p.aggregates))
        conn.executemany("INSERT INTO resource_providers (created_at, id, uuid, name, "
                         "generation, root_provider_id, parent_provider_id) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?)", rp_rows)
        conn.executemany("INSERT INTO inventories (created_at, resource_provider_id, "
                         "resource_class_id, total, reserved, min_unit, max_unit, step_size, "
                         "allocation_ratio) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", inv_rows)
        conn.executemany("INSERT INTO resource_provider_traits (created_at, trait_id, "
                         "resource_provider_id) VALUES (?, ?, ?)", trait_rows)
        conn.executemany("INSERT INTO resource_provider_aggregates (created_at, "
                         "resource_provider_id, aggregate_id) VALUES (?, ?, ?)", agg_rows)
        if conn.pg:
            # Ids were given here: the sequence goes past them, for Placement's own inserts.
            conn.execute("SELECT setval(pg_get_serial_sequence('resource_providers', 'id'), "
                         "(SELECT MAX(id) FROM resource_providers))")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return LoadStats(len(rp_rows), len(inv_rows), len(trait_rows), len(agg_rows),
                     time.perf_counter() - t)


def verify(url: str, providers: Sequence[ProviderSpec], *, samples: int = 6,
           seed: int = 0) -> None:
    """Check through Placement's API that the loaded data is what the specs say.

    Provider count, then for a sample (always including a child provider and
    a provider with traits when there is one): inventories, traits,
    aggregates, parent and root. Raises PeerError on the first mismatch.
    """
    if not providers:
        return
    rng = random.Random(seed)
    with httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=120) as c:
        r = c.get("/resource_providers")
        r.raise_for_status()
        listed = {rp["uuid"] for rp in r.json()["resource_providers"]}
        missing = [p.uuid for p in providers if p.uuid not in listed]
        if missing:
            raise PeerError(f"{len(missing)} providers missing from GET /resource_providers, "
                            f"e.g. {missing[:3]}")
        picks = rng.sample(list(providers), min(samples, len(providers)))
        picks += [next(p for p in providers if pred(p))
                  for pred in (lambda p: p.parent_uuid is not None, lambda p: bool(p.traits),
                               lambda p: bool(p.aggregates))
                  if any(pred(p) for p in providers)]
        by_uuid = {p.uuid: p for p in providers}
        for p in picks:
            rp = c.get(f"/resource_providers/{p.uuid}").json()
            root = p.uuid
            while by_uuid.get(root) and by_uuid[root].parent_uuid:
                root = by_uuid[root].parent_uuid or root
            if (rp["name"], rp["parent_provider_uuid"]) != (p.name, p.parent_uuid) or (
                    root in by_uuid and rp["root_provider_uuid"] != root):
                raise PeerError(f"provider {p.uuid}: got {rp}")
            inv = c.get(f"/resource_providers/{p.uuid}/inventories").json()["inventories"]
            for rc, want in p.inventories.items():
                got = inv.get(rc)
                if got is None or any(got[k] != v for k, v in want.items()):
                    raise PeerError(f"provider {p.uuid} {rc}: want {want}, got {got}")
            if set(inv) != set(p.inventories):
                raise PeerError(f"provider {p.uuid}: classes {sorted(inv)}")
            tr = c.get(f"/resource_providers/{p.uuid}/traits").json()["traits"]
            if set(tr) != set(p.traits):
                raise PeerError(f"provider {p.uuid}: traits {tr}, want {p.traits}")
            ag = c.get(f"/resource_providers/{p.uuid}/aggregates").json()["aggregates"]
            if set(ag) != set(p.aggregates):
                raise PeerError(f"provider {p.uuid}: aggregates {ag}, want {p.aggregates}")


# --------------------------------------------------------------------------- measurements


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def candidates_latency(url: str, query: str, n: int = 20, *, warmup: int = 1,
                       clients: int = 1) -> list[float]:
    """Milliseconds of `n` GET /allocation_candidates?<query> (after `warmup` calls),
    split over `clients` concurrent clients. Every answer must be 200."""
    with httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=900) as c:
        for _ in range(warmup):
            c.get(f"/allocation_candidates?{query}").raise_for_status()

    def run(k: int) -> list[float]:
        out = []
        with httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=900) as c:
            for _ in range(k):
                t = time.perf_counter()
                r = c.get(f"/allocation_candidates?{query}")
                out.append((time.perf_counter() - t) * 1000)
                r.raise_for_status()
        return out

    shares = [n // clients + (i < n % clients) for i in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        return [ms for part in pool.map(run, shares) for ms in part]


@dataclass
class ClaimStats:
    placements: int = 0
    failures: int = 0
    retries: int = 0
    server_errors: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.placements / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {"placements": self.placements, "failures": self.failures,
                "retries": self.retries, "server_errors": self.server_errors,
                "seconds": round(self.seconds, 3),
                "placements_per_s": round(self.per_second, 3),
                "p50_ms": round(pct(self.latencies_ms, 0.5), 2),
                "p99_ms": round(pct(self.latencies_ms, 0.99), 2)}


def nova_claims(url: str, resources: str, count: int, *, clients: int = 1, limit: int = 10,
                max_attempts: int = 10, project_id: str = "bench",
                user_id: str = "bench") -> ClaimStats:
    """Claim `count` new consumers the way Nova's scheduler does.

    Per placement: GET /allocation_candidates?resources=...&limit=..., then
    PUT /allocations/{new consumer} with the first candidate's allocation
    request (microversion 1.36 body, consumer_generation null). When the claim
    fails, try the next candidate (Nova's alternates), and GET again when the
    list is used up, up to `max_attempts` PUTs. A failure is a 409 (counted in
    `retries`) or, with concurrent clients on SQLite, a 500 "database is
    locked" (counted in `server_errors`; Nova also moves on to the next host).
    Latency covers the whole placement, GETs included.
    """
    stats = ClaimStats()
    lock = threading.Lock()

    def one(c: httpx.Client) -> tuple[bool, int, int]:
        conflicts = errors = 0
        while conflicts + errors < max_attempts:
            r = c.get("/allocation_candidates", params={"resources": resources,
                                                        "limit": str(limit)})
            r.raise_for_status()
            reqs = r.json()["allocation_requests"]
            if not reqs:
                return False, conflicts, errors
            for req in reqs:
                body = {"allocations": req["allocations"], "project_id": project_id,
                        "user_id": user_id, "consumer_generation": None}
                put = c.put(f"/allocations/{uuid.uuid4()}", json=body)
                if put.status_code == 204:
                    return True, conflicts, errors
                if put.status_code == 409:
                    conflicts += 1
                elif put.status_code >= 500 and "database is locked" in put.text:
                    errors += 1
                else:
                    raise PeerError(f"PUT /allocations: {put.status_code} {put.text[:500]}")
                if conflicts + errors >= max_attempts:
                    break
        return False, conflicts, errors

    def run(k: int) -> None:
        with httpx.Client(base_url=url, headers=ADMIN_HEADERS, timeout=900) as c:
            for _ in range(k):
                t = time.perf_counter()
                ok, conflicts, errors = one(c)
                ms = (time.perf_counter() - t) * 1000
                with lock:
                    stats.placements += ok
                    stats.failures += not ok
                    stats.retries += conflicts
                    stats.server_errors += errors
                    stats.latencies_ms.append(ms)

    shares = [count // clients + (i < count % clients) for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, shares))
    stats.seconds = time.perf_counter() - t0
    return stats


# --------------------------------------------------------------------------- smoke command


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.peer.placement",
                                 description="Real OpenStack Placement, loaded and measured.")
    ap.add_argument("--providers", type=int, default=1000, help="compute hosts (roots)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--venv", default=DEFAULT_VENV)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--requests", type=int, default=20, help="candidate GETs to time")
    ap.add_argument("--query", default="resources=VCPU:1,MEMORY_MB:1024&limit=10")
    ap.add_argument("--claims", type=int, default=20, help="placements to claim")
    ap.add_argument("--candidate-clients", type=int, default=1,
                    help="concurrent clients for the candidate GETs")
    ap.add_argument("--clients", default="1",
                    help="concurrent claiming clients; a comma list runs each in turn")
    ap.add_argument("--claim-resources", default="VCPU:1,MEMORY_MB:1024")
    ap.add_argument("--claim-limit", type=int, default=10,
                    help="limit on each claim's candidate GET (Nova's default is 1000)")
    ap.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite",
                    help="Placement's database: SQLite, or a fresh database on the local "
                    "PostgreSQL server (STRATO_PEER_PG_URL)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    ensure_peer_venv(args.venv)
    specs = make_specs(args.providers, args.seed)
    result: dict[str, Any] = {"peer": "openstack-placement 16.0.0", "hosts": args.providers,
                              "providers": len(specs), "workers": args.workers,
                              "threads": args.threads, "db": args.db}
    with PlacementPeer(venv=args.venv, workers=args.workers, threads=args.threads,
                       db=args.db) as peer:
        t = time.perf_counter()
        stats = bulk_load(peer.target, specs)
        result["load_s"] = round(time.perf_counter() - t, 3)
        _log(f"loaded {stats.providers} providers, {stats.inventories} inventories, "
             f"{stats.traits} traits, {stats.aggregates} aggregate links in "
             f"{result['load_s']} s")
        t = time.perf_counter()
        verify(peer.url, specs)
        _log(f"verified through the API in {time.perf_counter() - t:.1f} s")
        lat = candidates_latency(peer.url, args.query, args.requests,
                                 clients=args.candidate_clients)
        result["candidates"] = {"query": args.query, "n": len(lat),
                                "clients": args.candidate_clients,
                                "p50_ms": round(statistics.median(lat), 2),
                                "p95_ms": round(pct(lat, 0.95), 2)}
        result["claims"] = []
        for clients in (int(c) for c in str(args.clients).split(",")):
            claims = nova_claims(peer.url, args.claim_resources, args.claims, clients=clients,
                                 limit=args.claim_limit)
            result["claims"].append({"resources": args.claim_resources, "clients": clients,
                                     "limit": args.claim_limit, **claims.summary()})
        result["rss_mb"] = round(peer.rss_bytes() / 2**20, 1)
    print(f"Placement 16.0.0, {len(specs)} providers ({args.providers} hosts), "
          f"bulk load {result['load_s']} s")
    print(f"GET /allocation_candidates?{args.query}: p50 {result['candidates']['p50_ms']} ms, "
          f"p95 {result['candidates']['p95_ms']} ms over {len(lat)} requests, "
          f"{args.candidate_clients} client(s)")
    for c in result["claims"]:
        print(f"Nova-style claims, {c['clients']} client(s): {c['placements_per_s']:.2f} "
              f"placements/s, p50 {c['p50_ms']} ms, {c['placements']} placed, "
              f"{c['failures']} failed, {c['retries']} retries after 409, "
              f"{c['server_errors']} retries after 500 (SQLite locked)")
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
