"""Connections and transactions for SQLite (embedded default) and PostgreSQL.

Two kinds of transaction:

* ``read()``: a plain snapshot for answering GETs;
* ``write()``: takes the write lock up front. On SQLite that is
  ``BEGIN IMMEDIATE`` (one writer at a time, no lock upgrades that deadlock);
  on PostgreSQL writers lock the provider rows they touch with
  ``SELECT ... FOR UPDATE`` in id order (see ``lock_providers``), so claims on
  different providers proceed in parallel and claims on the same provider
  queue rather than fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from strato import trace
from strato.observe import NOBODY, Observer

_WRITE = "strato_write"
# PostgreSQL advisory lock key every Strato server of a database holds (shared)
# while it runs ("STRATO" in ASCII); see `Database.claim_alone`.
SERVER_LOCK = 0x535452415430


def default_sqlite_url(data_dir: str | os.PathLike[str] | None = None) -> str:
    base = Path(data_dir) if data_dir else _default_data_dir()
    base.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{base / 'strato.db'}"


def _default_data_dir() -> Path:
    env = os.environ.get("STRATO_DATA_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return Path(xdg) / "strato"


class Database:
    """One zone's database: an engine plus read/write transaction helpers."""

    def __init__(self, url: str, *, sqlite_synchronous: str = "FULL", echo: bool = False):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.observer: Observer = NOBODY
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": 60, "check_same_thread": False}
            if ":memory:" in url or url in ("sqlite://", "sqlite:///"):
                kwargs["poolclass"] = sa.pool.StaticPool
        else:
            kwargs["pool_size"] = 20
            kwargs["max_overflow"] = 20
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = sa.create_engine(url, **kwargs)
        # Commits wait for the disk (SQLite's FULL): a lazy write opts out.
        self.fsyncs = self.is_sqlite and sqlite_synchronous.upper() == "FULL"
        self._lazy = _LazySync(self) if self.fsyncs else None
        # How large the event loop's turns are while the disk is slow (see _Pace).
        self._pace = _Pace()
        # synchronous NORMAL or OFF: no syncs to make, but the event loop's
        # commits must not checkpoint either (see `_inline_conn`).
        self._checkpointer = _Checkpointer(self) if self.is_sqlite and not self.fsyncs else None
        if self.is_sqlite:
            self._setup_sqlite(sqlite_synchronous)
        # Serialises SQLite writers inside this process so that they queue on a
        # cheap lock instead of spinning on SQLITE_BUSY.
        self._sqlite_write_lock = threading.Lock()
        self._batcher = _Batcher(self)
        # A batch is between its first statement and its post-commit hooks.
        self._publishing = 0
        self._published = threading.Condition()
        self._pool: ThreadPoolExecutor | None = None  # submit() on PostgreSQL
        self._inline: Connection | None = None  # write_now()'s (SQLite, under the lock)
        self._turn: _Turn | None = None  # written_here()'s open transaction
        # Threads blocked on the write lock: no new turn takes it before them.
        self._lock_waiters = 0
        self._lock_waiters_lock = threading.Lock()
        self._pool_lock = threading.Lock()
        # PostgreSQL: the connection holding this server's advisory lock, and
        # whether it holds it exclusively (see `claim_alone`).
        self._alone: tuple[Connection, bool] | None = None

    def _setup_sqlite(self, synchronous: str) -> None:
        @sa.event.listens_for(self.engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own
            # transaction handling would defer it and break IMMEDIATE).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()

        @sa.event.listens_for(self.engine, "begin")
        def _on_begin(conn: Connection) -> None:
            if conn.get_execution_options().get(_WRITE):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("BEGIN")

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def write(self, *, lazy: bool = False) -> Iterator[Connection]:
        """A write transaction. `lazy`: its commit does not wait for the disk
        (see `_LazySync`): it survives the process dying, and the machine
        dying after the next sync (within LAZY_SYNC_S), not before."""
        with trace.span("store.write", lazy=lazy), self._write(lazy=lazy) as conn:
            yield conn

    @contextmanager
    def _write(self, *, lazy: bool = False) -> Iterator[Connection]:
        if self.is_sqlite:
            self._settle_turn()
            self._lock_waiting(+1)
            try:
                self._sqlite_write_lock.acquire()
            finally:
                self._lock_waiting(-1)
            with _held(self._sqlite_write_lock), self.engine.connect() as conn:
                conn.execution_options(**{_WRITE: True})
                relax = lazy and self._lazy is not None
                if relax:
                    _synchronous(conn, "NORMAL")
                try:
                    with self._transaction(conn):
                        yield conn
                finally:
                    if relax:
                        self._lazy.wrote()  # type: ignore[union-attr]
                        try:
                            _synchronous(conn, "FULL")
                        except Exception:
                            # Never back in the pool without its durability.
                            conn.invalidate()
        else:
            with self.engine.connect() as conn, self._transaction(conn):
                if lazy:
                    # PostgreSQL's own form of the same: its WAL writer flushes
                    # within 3 x wal_writer_delay.
                    conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
                yield conn

    @contextmanager
    def _transaction(self, conn: Connection) -> Iterator[Connection]:
        """`conn.begin()`'s transaction, its commit timed for the observer."""
        trans = conn.begin()
        try:
            yield conn
        except BaseException:
            if trans.is_active:
                trans.rollback()
            raise
        start = time.perf_counter()
        trans.commit()
        self.observer.committed(time.perf_counter() - start)

    def batched(self, job: Callable[[Connection], T],
                after: Callable[[T], None] | None = None) -> T:
        """Run `job` in a write transaction, grouped with concurrent callers' jobs.

        Group commit: on SQLite every commit is an fsync, so concurrent claims
        share one transaction, each job inside its own savepoint (a job that
        raises is rolled back alone and its caller gets the exception). On
        PostgreSQL, which groups commits itself, this is a plain write().

        `after(result)` runs as soon as the job's work is committed (in the
        thread that committed it, before the caller wakes), never otherwise.
        """
        job = trace.bind("store.job", job)
        if not self.is_sqlite:
            with self.write() as conn:
                result = job(conn)
            _after(after, result)
            return result
        return self._batcher.run(job, after)

    def submit(self, job: Callable[[Connection], T],
               after: Callable[[T], None] | None = None, *, lazy: bool = False) -> Future[T]:
        """`batched()` without waiting: the job runs in this database's writer
        thread (grouped with whatever else is waiting) and the future holds its
        result or exception once committed, `after` done. An event loop,
        which must not block on the commit, awaits `written` instead."""
        job = trace.bind("store.job", job)
        if not self.is_sqlite:
            # PostgreSQL groups commits itself: a plain write in a pool thread.
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(8, thread_name_prefix="strato-write")
                if lazy:
                    return self._pool.submit(self._lazy_write, job, after)
                return self._pool.submit(self.batched, job, after)
        return self._batcher.submit(job, after, lazy=lazy)

    async def written(self, job: Callable[[Connection], T],
                      after: Callable[[T], None] | None = None, *, lazy: bool = False) -> T:
        """`submit`, awaited from an event loop: the job's result once
        committed, `after` done."""
        if not self.is_sqlite:
            return await asyncio.wrap_future(self.submit(job, after, lazy=lazy))
        return await self._batcher.submit_awaited(trace.bind("store.job", job), after,
                                                  lazy=lazy)

    async def written_here(self, job: Callable[[Connection], T],
                           after: Callable[[T], None] | None = None) -> T:
        """`written`, with the job run at once on the calling event loop when
        that costs no wait (SQLite, nobody else writing in this process, no
        other process holding the database's lock); otherwise as `written`.

        Concurrent requests' jobs share one transaction (a turn), each in its
        own savepoint: a job that raises is rolled back alone, at once, and its
        caller gets the exception. The turn commits, without waiting for the
        disk, once as many jobs joined as requests were lately at work at
        once, or after GATHER_S (as the writer thread gathers); `after` hooks
        then run on the loop, and each caller is answered once the commit is
        on the disk (one fsync in the syncer thread for everyone waiting).

        No thread on the write's path: the writer thread, between its
        statements, waits for the GIL while the loop plans the next requests,
        and the loop waits for its commits; here the loop plans and writes,
        and only the fsync is elsewhere."""
        turn = self._turn_here()
        if turn is None:
            return await self.written(job, after)
        cur = turn.cursor
        cur.execute("SAVEPOINT strato_job")
        try:
            with trace.span("store.job"):
                result = job(turn.conn)
        except BaseException:
            cur.execute("ROLLBACK TO strato_job")
            cur.execute("RELEASE strato_job")
            if turn.jobs:
                # What the others of the turn wrote is not in the caller's
                # view until their hooks run: a retry now would see the same
                # (a claim that lost to them would lose again).
                settled = turn.loop.create_future()
                turn.settled.append(settled)
                await settled
            raise
        cur.execute("RELEASE strato_job")
        fut: asyncio.Future[T] = turn.loop.create_future()
        turn.jobs.append((after, result, fut))
        wanted = self._batcher.wanted()
        if len(turn.jobs) >= self._pace.size(wanted) and not turn.ending:
            # As many as were lately at work at once (or half of them: the
            # disk is slow): commit on the next turn.
            turn.ending = True
            turn.wanted = wanted
            turn.loop.call_soon(self._end_turn, turn)
        return await fut

    def _turn_here(self) -> _Turn | None:
        """The calling loop's open turn, or a new one: None if that would wait."""
        turn = self._turn
        if turn is not None:
            return turn if turn.thread == threading.get_ident() else None
        if not self.is_sqlite or self._batcher.busy() or self._lock_waiters:
            return None
        if not self._sqlite_write_lock.acquire(blocking=False):
            return None
        try:
            conn = self._inline_conn()
            conn.execution_options(**{_WRITE: True})
            try:
                trans = conn.begin()
            except sa.exc.OperationalError as exc:
                if not _busy(exc.orig):
                    raise
                conn.rollback()
                conn.execution_options(**{_WRITE: False})
                self._sqlite_write_lock.release()
                return None  # another process writes: nothing was done
            driver = conn.connection.dbapi_connection
            assert driver is not None
            cursor = driver.cursor()
        except BaseException:
            self._sqlite_write_lock.release()
            raise
        loop = asyncio.get_running_loop()
        turn = self._turn = _Turn(loop, threading.get_ident(), conn, trans, cursor,
                                  started=time.perf_counter())
        # Those lately at work at once are waited for this long at most (as
        # the writer thread's gathering).
        turn.timer = loop.call_later(_Batcher.GATHER_S, self._end_turn, turn)
        return turn

    def _inline_conn(self) -> Connection:
        """With the write lock held: the connection written on in place."""
        conn = self._inline
        if conn is None:
            conn = self._inline = self.engine.connect()
            driver = conn.connection.driver_connection
            assert driver is not None
            # Another process's lock means a wait: leave it to the writer.
            driver.execute("PRAGMA busy_timeout=0")
            # Only commits that do not wait for the disk are made here.
            driver.execute("PRAGMA synchronous=NORMAL")
            if self._lazy is not None or self._checkpointer is not None:
                # A checkpoint copies pages to the database file and syncs
                # it: not on an event loop (SQLite's automatic one runs in the
                # commit that crosses 1,000 WAL pages: a 5 ms stall of every
                # request the loop serves). The syncer thread makes them, or
                # with synchronous NORMAL the checkpointer thread.
                driver.execute("PRAGMA wal_autocheckpoint=0")
        return conn

    def _lock_waiting(self, delta: int) -> None:
        with self._lock_waiters_lock:
            self._lock_waiters += delta

    def checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database file, as far as
        readers allow, without waiting for anyone (SQLite PASSIVE; nothing
        elsewhere). The syncer thread calls it after its syncs: the event
        loop's own commits never checkpoint."""
        if not self.is_sqlite:
            return
        with self.engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _end_turn(self, turn: _Turn) -> None:
        """Commit a turn's transaction; its callers are answered once durable."""
        if self._turn is not turn:
            return  # ended already (a write of the loop's own thread)
        self._turn = None
        if turn.timer is not None:
            turn.timer.cancel()
        if turn.wanted:
            self._pace.gathered(time.perf_counter() - turn.started, len(turn.jobs),
                                turn.wanted)
        error: BaseException | None = None
        self.publishing(True)
        try:
            try:
                turn.cursor.close()
                start = time.perf_counter()
                turn.trans.commit()
                self.observer.committed(time.perf_counter() - start)
            except BaseException as exc:
                error = exc
                _roll_back(turn)
            finally:
                turn.conn.execution_options(**{_WRITE: False})
                self._sqlite_write_lock.release()
            if error is None:
                self._wrote_inline()
                for after, result, _ in turn.jobs:
                    _after(after, result)
        finally:
            self.publishing(False)
            for settled in turn.settled:
                if not settled.done():
                    settled.set_result(None)
        waiting = None if error is not None else self.durable_soon(self.lazy_mark())
        if waiting is None:
            _answer_turn(turn, error)
        else:
            waiting.add_done_callback(lambda w: _answer_turn(turn, w.exception()))

    def _settle_turn(self) -> None:
        """Before this thread waits for the write lock: a turn of its own
        running loop is ended (committed) first, or the wait would never end;
        a turn of a loop running elsewhere is committed by that loop at once,
        not at the end of its gathering; a turn whose loop is gone is rolled
        back (nobody was answered)."""
        turn = self._turn
        if turn is None:
            return
        alive = turn.loop.is_running() and not turn.loop.is_closed()
        if alive:
            if turn.thread == threading.get_ident():
                self._end_turn(turn)
            else:
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    turn.loop.call_soon_threadsafe(self._end_turn, turn)
            return
        self._turn = None
        if turn.timer is not None:
            turn.timer.cancel()
        with contextlib.suppress(Exception):
            turn.cursor.close()
        _roll_back(turn)
        turn.conn.execution_options(**{_WRITE: False})
        self._sqlite_write_lock.release()

    @contextmanager
    def expecting(self) -> Iterator[None]:
        """Around a request that will `submit` a write: the writer thread
        groups the writes of requests at work at once (see `_Batcher`)."""
        self._batcher.enter()
        try:
            yield
        finally:
            self._batcher.leave()

    def _lazy_write(self, job: Callable[[Connection], T],
                    after: Callable[[T], None] | None) -> T:
        with self.write(lazy=True) as conn:
            result = job(conn)
        _after(after, result)
        return result

    def write_now(self, job: Callable[[Connection], T], *, lazy: bool = False
                  ) -> tuple[bool, T | None]:
        """(True, its result) after running a small write `job` at once, in the
        calling thread, when that costs no wait: SQLite, a commit that does not
        wait for the disk (`lazy`, or synchronous NORMAL: an fsync on an event
        loop would stall every request it serves), nobody else writing in
        this process and no job queued for the writer (that one would be
        grouped with it), and no other process holding the database's lock.
        Otherwise (False, None), having done nothing: submit it instead.

        For an event loop with one request at a time, the writer thread's
        hand-off costs more than the write (a ledger row: ~100 µs here, against
        ~250 µs submitted). Under concurrency the queue is seldom empty, and
        the group commit takes over."""
        if not self.is_sqlite or (self.fsyncs and not lazy) or self._batcher.busy():
            return False, None
        with self._inline_driver() as inline:
            if inline is None:
                return False, None
            # The transaction is the driver's own (SQLAlchemy's begin and
            # commit cost more than the ledger's statements): `job` must use
            # the connection's cursor (`store/raw.py`), as the ledger does.
            conn, driver = inline
            try:
                driver.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _busy(exc):
                    return False, None  # another process writes: nothing was done
                raise
            try:
                with trace.span("store.write_now"):
                    result = job(conn)
                    start = time.perf_counter()
                    driver.execute("COMMIT")
                    self.observer.committed(time.perf_counter() - start)
            except BaseException:
                if driver.in_transaction:
                    driver.execute("ROLLBACK")
                raise
            self._wrote_inline()
            return True, result

    @contextmanager
    def _inline_driver(self) -> Iterator[tuple[Connection, Any] | None]:
        """The inline connection and its driver's, under the write lock; None
        if another holds the lock (a wait)."""
        if not self._sqlite_write_lock.acquire(blocking=False):
            yield None
            return
        try:
            conn = self._inline_conn()
            driver = conn.connection.driver_connection
            assert driver is not None
            yield conn, driver
        finally:
            self._sqlite_write_lock.release()

    def read_now(self, job: Callable[[Connection], T]) -> tuple[bool, T | None]:
        """(True, its result) after running a small read `job` at once, in the
        calling thread, on the connection `write_now` uses, when nobody else
        holds it (SQLite only; WAL readers never wait for a writer). Otherwise
        (False, None): read elsewhere. `job` must use the connection's cursor
        (`store/raw.py`): each statement is its own snapshot."""
        if not self.is_sqlite or self._turn is not None:
            return False, None
        with self._inline_driver() as inline:
            if inline is None or inline[1].in_transaction:
                return False, None
            try:
                return True, job(inline[0])
            except sqlite3.OperationalError as exc:
                if _busy(exc):
                    return False, None
                raise

    def _wrote_inline(self) -> None:
        """After a commit on the inline connection (which never checkpoints)."""
        if self._lazy is not None:
            self._lazy.wrote()
        elif self._checkpointer is not None:
            self._checkpointer.wrote()

    def publishing(self, start: bool) -> None:
        with self._published:
            self._publishing += 1 if start else -1
            if not self._publishing:
                self._published.notify_all()

    def is_publishing(self) -> bool:
        """A group commit is under way: its commit may be visible before the
        post-commit hooks that tell this process what it wrote have run."""
        return self._publishing > 0

    def wait_published(self, timeout: float) -> None:
        """Until no group commit is between its statements and its hooks."""
        with self._published:
            self._published.wait_for(lambda: not self._publishing, timeout)

    def lazy_mark(self) -> int:
        """How many lazy commits this database has made (SQLite with FULL;
        0 otherwise): `durable(mark)` waits for the disk to have them."""
        return 0 if self._lazy is None else self._lazy.written

    def durable(self, mark: int) -> None:
        """Block until the first `mark` lazy commits are on the disk: a lazy
        commit then `durable` is a FULL commit whose data others may read
        before its fsync ends (SQLite WAL; nothing to do otherwise)."""
        if self._lazy is not None and mark:
            self._lazy.durable(mark)

    def durable_soon(self, mark: int) -> asyncio.Future[None] | None:
        """`durable(mark)` for an event loop: None if the first `mark` lazy
        commits are on the disk already, else a future of the running loop
        that one syncer thread resolves (or fails with the OSError) once they
        are, for every waiter at once: no worker thread held per waiter."""
        if self._lazy is None or not mark:
            return None
        return self._lazy.durable_soon(mark)

    def sync(self) -> None:
        """Make every lazy commit so far durable (SQLite: fsync the WAL)."""
        if self._lazy is not None:
            self._lazy.sync()

    def claim_alone(self) -> bool:
        """Whether this process is the only server of this database (a request
        the ledger shows still placing was then left by a process that is
        gone). SQLite: yes (`strato serve` holds the file's lock). PostgreSQL:
        every server holds a shared advisory lock on its own connection for
        its life, released by the database when that process dies however it
        dies; one that can take it exclusively first is alone. Call once at
        start-up, then `end_alone` once the start-up has used the answer."""
        if self.is_sqlite:
            return True
        if self._alone is None:
            conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            try:
                alone = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"),
                                          {"k": SERVER_LOCK}).scalar())
                # Waits while another server is starting (it holds it exclusively).
                conn.execute(sa.text("SELECT pg_advisory_lock_shared(:k)"), {"k": SERVER_LOCK})
            except BaseException:
                conn.close()
                raise
            self._alone = (conn, alone)
        return self._alone[1]

    def keep_server_lock(self) -> None:
        """PostgreSQL: check that the connection holding this server's shared
        advisory lock is alive, and take the lock again on a new one when it
        is not (the database restarted or failed over, an idle timeout, a
        firewall): until then a server starting on this database would think
        itself alone and undo this one's requests. Called every recovery
        round. (A connection pooler in transaction mode, PgBouncer's, cannot
        hold session locks: point zones at PostgreSQL itself.)"""
        if self.is_sqlite or self._alone is None:
            return
        conn = self._alone[0]
        try:
            conn.execute(sa.text("SELECT 1"))
            return
        except Exception:
            with suppress(Exception):
                conn.close()
        log.warning("the connection holding this server's lock on its database was lost; "
                    "taking the lock again")
        self._alone = None
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            conn.execute(sa.text("SELECT pg_advisory_lock_shared(:k)"), {"k": SERVER_LOCK})
        except BaseException:
            conn.close()
            raise
        self._alone = (conn, False)

    def end_alone(self) -> None:
        """Let other servers of this database start (keeps the shared lock)."""
        if self._alone is not None and self._alone[1]:
            conn, _ = self._alone
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": SERVER_LOCK})
            self._alone = (conn, False)

    def dispose(self) -> None:
        if self._alone is not None:
            conn, self._alone = self._alone[0], None
            with suppress(Exception):
                conn.close()
        if self._lazy is not None:
            self._lazy.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._batcher.close()
        self._settle_turn()
        with self._sqlite_write_lock:
            inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        self.engine.dispose()


T = TypeVar("T")
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # primary result codes


@contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    """Release an acquired `lock` on the way out."""
    try:
        yield
    finally:
        lock.release()


def _busy(exc: BaseException | None) -> bool:
    """A SQLite error that says another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)


def release_memory(conn: Connection) -> None:
    """After a one-off read of a whole table set on `conn` (an index's full
    load): on SQLite, drop this connection's page cache (up to 2 MiB, kept as
    long as the connection sits in the pool: a 10,000-host zone's whole
    file). Cheap: this connection only."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA shrink_memory")


def trim_heap() -> None:
    """Give the C allocator's free pages back to the system (glibc's
    `malloc_trim`; elsewhere nothing): what a full load's rows left resident
    after they were freed. It walks the whole heap, holding the allocator's
    locks (tens of milliseconds on a large one), so it is called once, when a
    zone starts, before it serves: never on a request's path."""
    _malloc_trim()


_LIBC: Any = None  # the C library, once looked up (False: no malloc_trim here)


def _malloc_trim() -> None:
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - glibc only: elsewhere, nothing to do
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


# A lazy commit is on disk at most this long after it was made (unless the
# machine dies first); see _LazySync.
LAZY_SYNC_S = 0.1


def _synchronous(conn: Connection, mode: str) -> None:
    """Set a SQLite connection's synchronous mode, outside any transaction
    (on the driver: SQLAlchemy would begin one for the statement)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    driver.execute(f"PRAGMA synchronous={mode}")


class _LazySync:
    """Makes lazy commits durable soon after, off every caller's path.

    A lazy commit (PRAGMA synchronous=NORMAL in WAL mode) is in the WAL file
    but not forced to the disk: a process that dies keeps it (the kernel has
    it), a machine that dies may lose it. This thread fsyncs the WAL file
    LAZY_SYNC_S after a lazy commit, as PostgreSQL's WAL writer does for its
    synchronous_commit=off transactions, so the window is bounded. A later
    durable (FULL) commit syncs the WAL too, with every lazy frame before it.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        # One lock; a condition per kind of waiter, so that a commit wakes
        # nobody it need not (a thread woken for nothing costs the event loop
        # the GIL): callers of durable() (an fsync ended), the syncer thread
        # (a first lazy commit since the last sync) and the event loops'
        # waker (a waiter came).
        lock = threading.Lock()
        self._cv = threading.Condition(lock)
        self._dirty_cv = threading.Condition(lock)
        self._waiters_cv = threading.Condition(lock)
        self._dirty = False
        self._closed = False
        self._thread: threading.Thread | None = None
        # Lazy commits made so far, and how many of them are known durable.
        self.written = 0
        self._synced = 0
        self._syncing = False
        # Event loops' waiters (durable_soon): (mark, loop, future).
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._waker: threading.Thread | None = None

    def wrote(self) -> None:
        with self._cv:
            was_dirty, self._dirty = self._dirty, True
            self.written += 1
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="strato-lazy-sync")
                self._thread.start()
            if not was_dirty:
                self._dirty_cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._dirty and not self._closed:
                    self._dirty_cv.wait()
                if self._closed:
                    return
            # libfaketime's sleep, its clock set back mid-way, raises EINVAL:
            # this thread must not die of it (the syncs would stop).
            with contextlib.suppress(OSError):
                time.sleep(LAZY_SYNC_S)
            self.sync()
            _checkpoint_logged(self._db)

    def sync(self) -> None:
        with self._cv:
            if not self._dirty:
                return
            self._dirty = False
            target = self.written
        try:
            self.durable(target)
        except OSError:
            log.exception("could not sync %s-wal", self._db.engine.url.database)

    def durable(self, mark: int) -> None:
        """Until the first `mark` lazy commits are on the disk. Group commit:
        a caller that finds an fsync under way waits for it, and then syncs
        again only if that one began before its commit. Raises OSError if
        the disk refuses (nothing is then known durable)."""
        with self._cv:
            while self._synced < mark:
                if not self._syncing:
                    self._syncing = True
                    target = self.written
                    break
                self._cv.wait()
            else:
                return
        ok = False
        try:
            ok = self._fsync()
        finally:
            with self._cv:
                self._syncing = False
                if ok:
                    self._synced = max(self._synced, target)
                self._cv.notify_all()

    def durable_soon(self, mark: int) -> asyncio.Future[None] | None:
        with self._cv:
            if self._synced >= mark:
                return None
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((mark, loop, fut))
            if self._waker is None:
                self._waker = threading.Thread(target=self._wake_loop, daemon=True,
                                               name="strato-durable")
                self._waker.start()
            self._waiters_cv.notify()
        return fut

    def _wake_loop(self) -> None:
        """Sync for the event loops' waiters, a group at a time."""
        while True:
            with self._cv:
                while not self._waiters:
                    if self._closed:
                        self._waker = None
                        return
                    self._waiters_cv.wait()
                waiting, self._waiters = self._waiters, []
            error: OSError | None = None
            try:
                self.durable(max(mark for mark, _, _ in waiting))
            except OSError as exc:
                error = exc
            except Exception as exc:  # never leave a waiter hanging
                log.exception("syncing %s-wal failed", self._db.engine.url.database)
                error = OSError(f"could not sync the database: {exc}")
            for _, loop, fut in waiting:
                # A closed loop (RuntimeError): nobody waits any more.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, fut, error)

    def _fsync(self) -> bool:
        path = self._db.engine.url.database
        if not path or path == ":memory:":
            return True
        try:
            fd = os.open(f"{path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return True  # checkpointed and removed: the data is in the database file
        try:
            start = time.perf_counter()
            os.fsync(fd)
            took = time.perf_counter() - start
        finally:
            os.close(fd)
        self._db._pace.synced(took)
        self._db.observer.synced(took)
        return True

    def close(self) -> None:
        self.sync()
        with self._cv:
            self._closed = True
            for cv in (self._cv, self._dirty_cv, self._waiters_cv):
                cv.notify_all()
            thread, self._thread = self._thread, None
            waker = self._waker
        for t in (thread, waker):
            if t is not None and t is not threading.current_thread():
                t.join(5)


class _Checkpointer:
    """Checkpoints a SQLite database whose commits do not wait for the disk
    (synchronous NORMAL or OFF), off every caller's path. The inline
    connection's commits (the event loop's) never checkpoint: SQLite's
    automatic checkpoint runs inside the commit that crosses 1,000 WAL pages
    and stalls the loop for milliseconds. This thread checkpoints instead,
    about as often: after EVERY commits, or CHECKPOINT_S after the first
    commit since the last checkpoint, whichever comes first (each checkpoint
    syncs the WAL and the database file: not one per commit). The other
    connections keep SQLite's automatic checkpoint (they are never an event
    loop's)."""

    EVERY = 200
    CHECKPOINT_S = 1.0

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cv = threading.Condition()
        self._commits = 0  # since the last checkpoint
        self._closed = False
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        with self._cv:
            self._commits += 1
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="strato-checkpoint")
                self._thread.start()
            if self._commits == 1 or self._commits == self.EVERY:
                self._cv.notify()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._commits and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                due = time.monotonic() + self.CHECKPOINT_S
                while (self._commits < self.EVERY and not self._closed
                       and (left := due - time.monotonic()) > 0):
                    self._cv.wait(left)
                if self._closed:
                    return
                self._commits = 0
            _checkpoint_logged(self._db)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        _checkpoint_logged(self._db)  # what the last commits left in the WAL


def _checkpoint_logged(db: Database) -> None:
    """`db.checkpoint()` for a background thread: a failure is logged, not raised."""
    try:
        db.checkpoint()
    except Exception:
        log.exception("could not checkpoint %s", db.engine.url.database)


def _resolve(fut: asyncio.Future[None], error: OSError | None) -> None:
    if fut.done():
        return  # its waiter was cancelled
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


log = logging.getLogger("strato.store")


def _after(hook: Callable[[Any], None] | None, result: Any) -> None:
    """A post-commit hook: what it does is an optimisation, so it may not fail the job."""
    if hook is None:
        return
    try:
        hook(result)
    except Exception:
        log.exception("post-commit hook failed")


@dataclass(slots=True)
class _Turn:
    """One event loop turn's write transaction (`Database.written_here`)."""
    loop: asyncio.AbstractEventLoop
    thread: int
    conn: Connection
    trans: Any
    cursor: Any
    # Each job's post-commit hook, result, and its caller's future.
    jobs: list[tuple[Callable[[Any], None] | None, Any, asyncio.Future[Any]]] = field(
        default_factory=list)
    ending: bool = False  # its commit is on the loop's next turn
    # Callers whose job failed, waiting for the others' hooks to have run.
    settled: list[asyncio.Future[None]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    # When its first job began, and the turn size it was committed at (0: it
    # was not full: its gathering timed out, or a writer ended it).
    started: float = 0.0
    wanted: int = 0


def _roll_back(turn: _Turn) -> None:
    """A turn's transaction, rolled back: SQLite keeps a transaction whose
    COMMIT failed (a deferred constraint) open, holding the lock."""
    with contextlib.suppress(Exception):
        turn.trans.rollback()
    with contextlib.suppress(Exception):
        turn.conn.rollback()
    driver = turn.conn.connection.dbapi_connection
    if driver is not None and getattr(driver, "in_transaction", False):
        driver.rollback()


def _answer_turn(turn: _Turn, error: BaseException | None) -> None:
    for _, result, fut in turn.jobs:
        if fut.done():
            continue  # its caller stopped waiting: the job stands all the same
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)


@dataclass(slots=True)
class _Slot:
    job: Callable[[Connection], Any]
    after: Callable[[Any], None] | None = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    future: Future[Any] | None = None  # submitted, not waited for by a thread
    lazy: bool = False  # its commit need not wait for the disk
    awaited: asyncio.Future[Any] | None = None  # `Database.written`: its loop's future

    def finish(self) -> None:
        self.done = True
        # A caller that stopped waiting (its task was cancelled) cancelled the
        # future; the job ran all the same, and nobody wants its result.
        if self.future is not None and not self.future.cancelled():
            try:
                if self.error is not None:
                    self.future.set_exception(self.error)
                else:
                    self.future.set_result(self.result)
            except InvalidStateError:
                pass  # cancelled meanwhile


class _Pace:
    """Whether the event loop's turns (`Database.written_here`) commit in halves.

    A turn gathers the jobs of as many requests as were lately at work at
    once, and then they all wait for one fsync. Their clients wait for those
    answers before they send more, so the loop has nothing to do meanwhile.
    Where an fsync is short next to the time the loop takes to gather a
    turn, that idle time is small, and fewer, larger commits cost the least.
    Where the disk is slow (a network block device, or a busy host: 1-2 ms an
    fsync), the loop would stand idle that long on every turn: a turn that
    commits once half of the requests joined lets one half's fsync run while
    the loop serves the other half. Halves cost more commits and more
    hand-offs between the syncing thread and the loop, so turns are split
    only while an fsync takes more than SPLIT_ABOVE of a full turn's
    gathering, and are whole again below JOIN_BELOW (apart, so that the
    change each makes to what is measured does not flip it back).

    Measured here (`benchmarks.schedule --slow-disk-ms`, 8 clients, the
    claim's rate as a share of the dry run's): turns always in halves cost
    ~10% on this machine's 0.4 ms fsyncs; this pace against turns always
    whole, runs taking turns: own disk 58-59% and 56-61%, each fsync 1 ms
    slower 52-54% and 47-54%, 2 ms slower 49-53% and 36-42%."""

    SPLIT_ABOVE = 0.35
    JOIN_BELOW = 0.2
    WEIGHT = 0.1  # of each new sample in the moving averages
    MIN_SPLIT = 4  # a turn of fewer requests is never split

    __slots__ = ("job_s", "split", "sync_s")

    def __init__(self) -> None:
        self.job_s = 0.0  # the loop's time per job while gathering a turn
        self.sync_s = 0.0  # an fsync's time
        self.split = False

    def size(self, wanted: int) -> int:
        """A turn's size: `wanted` (the requests lately at work at once), or
        half of it while the disk is slow."""
        return (wanted + 1) // 2 if self.split and wanted >= self.MIN_SPLIT else wanted

    def synced(self, seconds: float) -> None:
        """An fsync took `seconds` (the syncing threads; a float's store is
        atomic, and a lost sample does not matter)."""
        self.sync_s = _moved_average(self.sync_s, seconds, self.WEIGHT)

    def gathered(self, seconds: float, jobs: int, wanted: int) -> None:
        """A turn gathered its `jobs` in `seconds` (from its first job's start)
        and committed at its size; `wanted`: the requests at work at once."""
        if jobs < 2:
            return
        self.job_s = _moved_average(self.job_s, seconds / (jobs - 1), self.WEIGHT)
        full = self.job_s * wanted
        split = self.sync_s > (self.JOIN_BELOW if self.split else self.SPLIT_ABOVE) * full
        if split != self.split:
            log.debug("turns %s: an fsync takes %.2f ms, a full turn's gathering %.2f ms",
                      "split in halves" if split else "whole again", self.sync_s * 1e3,
                      full * 1e3)
            self.split = split


def _moved_average(average: float, sample: float, weight: float) -> float:
    return sample if average == 0.0 else average + weight * (sample - average)


class _Batcher:
    """Group commit. Threads that wait (`run`) play leader/follower: whoever
    finds no batch running runs all waiting jobs. Jobs submitted without
    waiting (`submit`, from an event loop) are run by a writer thread of the
    batcher's own, started on first use, unless a leader takes them first.

    The writer gathers: with N requests recently at work at once (`enter`,
    `leave`: callers that will submit a job), it waits up to GATHER_S for N
    jobs before it commits. Each client waits for its commit before it sends
    its next request, so concurrent clients' jobs come in waves: committing
    the first of a wave alone costs a transaction (an fsync) per job, and the
    writer then takes the GIL from the event loop a statement at a time while
    the loop plans the rest. One request at a time never waits."""

    # Bound the time a batch holds the write lock.
    MAX_BATCH = 64
    # The longest a queued job waits for others to join its batch, and how
    # long the number of requests at work at once is remembered.
    GATHER_S = 0.005
    PEAK_WINDOW_S = 0.1

    def __init__(self, db: Database) -> None:
        self._db = db
        self._cv = threading.Condition()
        self._pending: list[_Slot] = []
        self._running = False
        self._writer: threading.Thread | None = None
        self._closed = False
        # Requests at work now, and the most at once in this window and the last.
        self._inside = 0
        self._peaks = [0, 0]
        self._window = 0.0

    def enter(self) -> None:
        """A request that will submit a job has started."""
        with self._cv:
            self._inside += 1
            self._peak()

    def leave(self) -> None:
        with self._cv:
            self._inside -= 1

    def _peak(self) -> int:
        """With the cv held: the most requests at work at once, lately."""
        now = time.monotonic()
        if now - self._window > self.PEAK_WINDOW_S:
            recent = self._peaks[1] if now - self._window < 2 * self.PEAK_WINDOW_S else 0
            self._peaks = [recent, 0]
            self._window = now
        self._peaks[1] = max(self._peaks[1], self._inside)
        return max(self._peaks)

    def submit(self, job: Callable[[Connection], T],
               after: Callable[[T], None] | None = None, *, lazy: bool = False
               ) -> Future[T]:
        fut: Future[T] = Future()
        self._queue(_Slot(job, after, future=fut, lazy=lazy))
        return fut

    def submit_awaited(self, job: Callable[[Connection], T],
                       after: Callable[[T], None] | None = None, *, lazy: bool = False
                       ) -> asyncio.Future[T]:
        """`submit` from an event loop: a future of that loop, which the writer
        resolves with every other of the batch in one call (one wake-up of the
        loop per batch, not one per job)."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue(_Slot(job, after, lazy=lazy, awaited=fut))
        return fut

    def _queue(self, slot: _Slot) -> None:
        with self._cv:
            if self._closed:
                raise RuntimeError("database disposed")
            self._pending.append(slot)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                                name="strato-writer")
                self._writer.start()
            self._cv.notify_all()

    def wanted(self) -> int:
        """How many jobs a batch gathers now (the most requests lately at
        work at once, within MAX_BATCH)."""
        with self._cv:
            return min(self.MAX_BATCH, self._peak())

    def busy(self) -> bool:
        """A batch is running or jobs wait for one."""
        return self._running or bool(self._pending)

    def close(self) -> None:
        """Stop the writer thread once what was submitted is done (a later
        submit starts a new one)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            writer = self._writer
        if writer is not None and writer is not threading.current_thread():
            writer.join(30)
        with self._cv:
            self._closed = False
            if self._writer is writer:
                self._writer = None

    def _take(self) -> list[_Slot]:
        """Become the leader (the cv held, no batch running): the next batch."""
        self._running = True
        batch, self._pending = (self._pending[: self.MAX_BATCH],
                                self._pending[self.MAX_BATCH:])
        return batch

    def _lead(self, batch: list[_Slot]) -> None:
        try:
            self._execute(batch)
        finally:
            with self._cv:
                self._running = False
                self._cv.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cv:
                while self._running or not self._pending:
                    if self._closed and not self._pending:
                        return
                    self._cv.wait()
                self._gather(min(self.MAX_BATCH, self._peak()))
                if self._running or not self._pending:
                    continue  # a waiting thread led them meanwhile
                batch = self._take()
            self._lead(batch)

    def _gather(self, want: int) -> None:
        """With the cv held: wait until `want` jobs are queued, GATHER_S has
        passed, the batcher closes or a waiting thread leads the queue."""
        end = time.monotonic() + self.GATHER_S
        while len(self._pending) < want and not self._closed and not self._running:
            left = end - time.monotonic()
            if left <= 0:
                return
            self._cv.wait(left)

    def run(self, job: Callable[[Connection], T],
            after: Callable[[T], None] | None = None) -> T:
        slot = _Slot(job, after)
        with self._cv:
            self._pending.append(slot)
        while not slot.done:
            with self._cv:
                while self._running and not slot.done:
                    self._cv.wait()
                if slot.done:
                    break
                batch = self._take()
            self._lead(batch)
        if slot.error is not None:
            raise slot.error
        result: T = slot.result
        return result

    def _execute(self, batch: list[_Slot]) -> None:
        self._db.publishing(True)
        try:
            self._run_batch(batch)
        finally:
            self._db.publishing(False)
            _wake(batch)

    def _run_batch(self, batch: list[_Slot]) -> None:
        # The commit waits for the disk unless every job in it may be lazy.
        lazy = all(s.lazy for s in batch)
        if len(batch) == 1:
            # Alone: no savepoint; a failing job rolls the transaction back.
            s = batch[0]
            try:
                with self._db.write(lazy=lazy) as conn:
                    s.result = s.job(conn)
            except Exception as exc:
                s.error = exc
            else:
                _after(s.after, s.result)
            s.finish()
            return
        try:
            with self._db.write(lazy=lazy) as conn:
                for s in batch:
                    try:
                        with _savepoint(conn):
                            s.result = s.job(conn)
                    except Exception as exc:  # this job only; the others go on
                        s.error = exc
        except Exception as exc:  # the commit itself failed: nobody's job stands
            for s in batch:
                if s.error is None:
                    s.error = exc
        else:
            for s in batch:
                if s.error is None:
                    _after(s.after, s.result)
        for s in batch:
            s.finish()


def _wake(batch: list[_Slot]) -> None:
    """Resolve the batch's awaited futures: one call into each loop for all of
    them. One wake-up per job would hand the GIL to the loop at the first,
    and the writer would then wait for it back before it could tell the next
    (the loop answering the first request meanwhile)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Slot]] = {}
    for s in batch:
        if s.awaited is not None:
            by_loop.setdefault(s.awaited.get_loop(), []).append(s)
    for loop, slots in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
            loop.call_soon_threadsafe(_resolve_slots, slots)


def _resolve_slots(slots: list[_Slot]) -> None:
    for s in slots:
        fut = s.awaited
        if fut is None or fut.done():
            continue  # its caller stopped waiting: the job ran all the same
        if not s.done:
            fut.set_exception(RuntimeError("the writer failed before this job was done"))
        elif s.error is not None:
            fut.set_exception(s.error)
        else:
            fut.set_result(s.result)


@contextmanager
def _savepoint(conn: Connection) -> Iterator[None]:
    """A savepoint on the DBAPI connection (SQLite): SQLAlchemy's begin_nested
    compiles and tracks one per job, a fifth of a batched claim's CPU."""
    cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cur.execute("SAVEPOINT strato_job")
        try:
            yield
        except BaseException:
            cur.execute("ROLLBACK TO strato_job")
            cur.execute("RELEASE strato_job")
            raise
        cur.execute("RELEASE strato_job")
    finally:
        cur.close()


def lock_providers(conn: Connection, provider_ids: list[int]) -> None:
    """Take row locks on providers (PostgreSQL) in id order, so writers never deadlock.

    On SQLite the whole write transaction already holds the database lock.
    """
    if not provider_ids or conn.dialect.name == "sqlite":
        return
    from strato.store.schema import resource_providers as rp

    conn.execute(
        sa.select(rp.c.id)
        .where(rp.c.id.in_(sorted(set(provider_ids))))
        .order_by(rp.c.id)
        .with_for_update()
    ).all()
