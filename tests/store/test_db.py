"""store.db: group commit for threads that wait (batched) and for an event loop
that does not (submit, run by the writer thread)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.observe import Observer
from strato.store.db import Database, _Batcher, _Pace
from strato.store.raw import Raw

ROWS = sa.table("t", sa.column("k", sa.Integer))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with d.write() as conn:
        conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    yield d
    d.dispose()


def insert(k: int) -> Callable[[Connection], int]:
    def job(conn: Connection) -> int:
        if k < 0:
            raise ValueError(f"job {k} fails")
        conn.execute(sa.insert(ROWS).values(k=k))
        return k
    return job


def stored(db: Database) -> set[int]:
    with db.read() as conn:
        return set(conn.execute(sa.select(ROWS.c.k)).scalars())


def test_waiting_threads_and_submitted_jobs_share_the_batcher(db: Database) -> None:
    after: list[int] = []
    lock = threading.Lock()

    def hook(k: int) -> None:
        with lock:
            after.append(k)

    errors: list[BaseException] = []

    def thread(base: int) -> None:
        for i in range(20):
            k = base + i if i != 7 else -(base + i)
            try:
                db.batched(insert(k), hook)
            except ValueError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=thread, args=(1000 * (t + 1),)) for t in range(4)]
    for t in threads:
        t.start()
    futures = [db.submit(insert(k), hook) for k in range(1, 41)]
    futures.append(db.submit(insert(-1), hook))
    for t in threads:
        t.join()
    assert [f.result(10) for f in futures[:-1]] == list(range(1, 41))
    with pytest.raises(ValueError, match="job -1 fails"):
        futures[-1].result(10)
    want = set(range(1, 41)) | {1000 * (t + 1) + i for t in range(4) for i in range(20) if i != 7}
    assert stored(db) == want
    # Hooks ran for the committed jobs only; failed jobs raised to their callers.
    assert sorted(after) == sorted(want)
    assert len(errors) == 4


def test_an_event_loop_awaits_the_commit(db: Database) -> None:
    async def main() -> list[int]:
        return list(await asyncio.gather(*(asyncio.wrap_future(db.submit(insert(k)))
                                           for k in range(50))))
    assert asyncio.run(main()) == list(range(50))
    assert stored(db) == set(range(50))


def test_awaited_jobs_of_a_batch_are_answered_together(db: Database) -> None:
    """`written`: each caller gets its own job's result or error, the loop is
    woken once per batch (not once per job), and a caller that stops waiting
    leaves its job done and the others answered."""
    commits = _Commits()
    db.observer = commits
    wakes = 0

    async def main() -> tuple[list[int | BaseException], int]:
        nonlocal wakes
        loop = asyncio.get_running_loop()
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal wakes
            wakes += 1
            return threadsafe(*args, **kwargs)
        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        with db.expecting():  # the writer gathers what the loop submits
            tasks = [asyncio.create_task(db.written(insert(k))) for k in (*range(20), -3)]
            gone = asyncio.create_task(db.written(insert(77)))
            await asyncio.sleep(0)
            gone.cancel()
            got = list(await asyncio.gather(*tasks, return_exceptions=True))
        return got, commits.count

    got, commit_count = asyncio.run(main())
    assert got[:20] == list(range(20))
    assert isinstance(got[20], ValueError) and "job -3 fails" in str(got[20])
    assert stored(db) == set(range(20)) | {77}
    assert wakes == commit_count < 22


def test_dispose_finishes_what_was_submitted_and_a_later_submit_starts_again(
        db: Database) -> None:
    futures = [db.submit(insert(k)) for k in range(10)]
    db.dispose()
    assert all(f.done() for f in futures)
    assert db.submit(insert(99)).result(10) == 99
    assert stored(db) == set(range(10)) | {99}


class _Commits(Observer):
    def __init__(self) -> None:
        self.count = 0

    def committed(self, seconds: float) -> None:
        self.count += 1


def test_the_writer_gathers_the_jobs_of_requests_at_work_at_once(db: Database) -> None:
    """Group commit that waits for the wave: three requests at work at once
    submit their jobs a few milliseconds apart (each planning in turn on one
    event loop); the writer commits them together, not the first one alone.
    Once that is forgotten, a request at work alone never waits for company."""
    commits = _Commits()
    db.observer = commits
    wanted: list[int] = []
    gather = db._batcher._gather

    def counted(want: int) -> None:
        wanted.append(want)
        gather(want)
    db._batcher._gather = counted  # type: ignore[method-assign]

    async def request(k: int, start: asyncio.Event, delay: float) -> int:
        with db.expecting():
            await start.wait()
            await asyncio.sleep(delay)  # the others plan meanwhile
            return await asyncio.wrap_future(db.submit(insert(k)))

    async def wave() -> list[int]:
        start = asyncio.Event()
        gap = _Batcher.GATHER_S / 5
        tasks = [asyncio.create_task(request(k, start, k * gap)) for k in range(3)]
        await asyncio.sleep(0)  # all three are at work
        start.set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(wave()) == [0, 1, 2]
    assert commits.count == 1
    assert wanted == [3]
    assert stored(db) == {0, 1, 2}

    time.sleep(2.5 * _Batcher.PEAK_WINDOW_S)
    commits.count = 0
    wanted.clear()

    async def alone() -> int:
        start = asyncio.Event()
        start.set()
        return await request(10, start, 0)
    assert asyncio.run(alone()) == 10
    assert (commits.count, wanted) == (1, [1])  # no one to wait for


def test_a_gathering_writer_lets_a_waiting_thread_lead_and_a_close_end_it(
        db: Database) -> None:
    """The writer waiting for more jobs never holds up a thread that runs a
    batch itself (`batched`: it takes the queue, with the submitted job in
    it), nor a dispose."""
    commits = _Commits()
    db.observer = commits
    db._batcher.enter()
    db._batcher.enter()  # two requests at work: the writer waits for two jobs
    try:
        first = db.submit(insert(1))
        time.sleep(_Batcher.GATHER_S / 5)  # the writer is gathering
        assert db.batched(insert(2)) == 2
        assert first.done() and first.result() == 1
        assert commits.count == 1
        lone = db.submit(insert(3))
        db.dispose()
        assert lone.result(0) == 3
    finally:
        db._batcher.leave()
        db._batcher.leave()
    assert stored(db) == {1, 2, 3}


def test_a_job_the_database_refuses_rolls_back_alone(db: Database) -> None:
    """A statement error inside one job of a batch (a duplicate key here) undoes
    that job's writes only; the batch's other jobs commit."""
    def dup(conn: Connection) -> int:
        conn.execute(sa.insert(ROWS).values(k=500))
        conn.execute(sa.insert(ROWS).values(k=7))  # already there: IntegrityError
        return 0

    db.batched(insert(7))
    # Hold the writer on a first job so that the next three form one batch.
    with db._sqlite_write_lock:
        first = db.submit(insert(3))
        while not db._batcher._running:
            time.sleep(0.001)
        futures = [db.submit(insert(1)), db.submit(dup), db.submit(insert(2))]
    assert first.result(10) == 3
    assert futures[0].result(10) == 1 and futures[2].result(10) == 2
    with pytest.raises(sa.exc.IntegrityError):
        futures[1].result(10)
    assert stored(db) == {1, 2, 3, 7}


def test_submit_answers_on_either_backend(database: Database) -> None:
    """On PostgreSQL (which groups commits itself) submit is a plain write in a
    pool thread; on SQLite the writer thread's batch. Same answers."""
    with database.write() as conn:
        conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    futures = [database.submit(insert(k)) for k in range(20)]
    failed = database.submit(insert(-5))
    assert [f.result(30) for f in futures] == list(range(20))
    with pytest.raises(ValueError, match="job -5 fails"):
        failed.result(30)
    assert stored(database) == set(range(20))


def raw_insert(k: int) -> Callable[[Connection], int]:
    """A job on the connection's cursor only, as `write_now` needs."""
    def job(conn: Connection) -> int:
        if k < 0:
            raise ValueError(f"job {k} fails")
        raw = Raw(conn)
        try:
            raw.run("INSERT INTO t (k) VALUES (?)", (k,))
        finally:
            raw.close()
        return k
    return job


def test_write_now_runs_a_small_job_at_once_when_nobody_writes(db: Database) -> None:
    assert db.write_now(raw_insert(1), lazy=True) == (True, 1)
    assert db.write_now(raw_insert(2), lazy=True) == (True, 2)
    assert stored(db) == {1, 2}
    with pytest.raises(ValueError):
        db.write_now(raw_insert(-1), lazy=True)
    assert db.write_now(raw_insert(3), lazy=True) == (True, 3)  # the failed one rolled back
    assert stored(db) == {1, 2, 3}
    # The batcher still works beside it.
    assert asyncio.run(_awaited(db, insert(4))) == 4
    assert stored(db) == {1, 2, 3, 4}


async def _awaited(db: Database, job: Callable[[Connection], int]) -> int:
    return await asyncio.wrap_future(db.submit(job))


def test_write_now_never_waits_for_another_writer(db: Database, tmp_path: Path) -> None:
    # Another process holds the database's write lock: no wait, nothing done.
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    t0 = time.perf_counter()
    assert db.write_now(raw_insert(1), lazy=True) == (False, None)
    assert time.perf_counter() - t0 < 1.0
    other.execute("ROLLBACK")
    other.close()
    # This process's own writer is busy: left to the group commit.
    with db._sqlite_write_lock:
        assert db.write_now(raw_insert(1), lazy=True) == (False, None)
    assert stored(db) == set()
    assert db.write_now(raw_insert(1), lazy=True) == (True, 1)


def raw_keys(conn: Connection) -> set[int]:
    raw = Raw(conn)
    try:
        return {int(r[0]) for r in raw.all("SELECT k FROM t")}
    finally:
        raw.close()


def test_read_now_reads_at_once_unless_the_connection_is_busy(db: Database,
                                                             tmp_path: Path) -> None:
    assert db.read_now(raw_keys) == (True, set())
    db.write_now(raw_insert(1), lazy=True)
    assert db.read_now(raw_keys) == (True, {1})
    # Another process writing does not stop a read (WAL), nor hide what was
    # committed before.
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t (k) VALUES (2)")
    assert db.read_now(raw_keys) == (True, {1})
    other.execute("COMMIT")
    other.close()
    assert db.read_now(raw_keys) == (True, {1, 2})
    # The connection in use by this process's writer: read elsewhere.
    with db._sqlite_write_lock:
        assert db.read_now(raw_keys) == (False, None)


def synchronous_seen(conn: Connection) -> int:
    """The synchronous mode the job's transaction commits with (2 FULL, 1 NORMAL)."""
    raw = Raw(conn)
    try:
        raw.cur.execute("PRAGMA synchronous")
        return int(raw.cur.fetchone()[0])
    finally:
        raw.close()


def test_a_durable_write_is_never_made_on_the_callers_thread(db: Database) -> None:
    """An fsync on an event loop would stall every request it serves: a write
    that waits for the disk goes to the writer thread."""
    assert db.fsyncs
    assert db.write_now(raw_insert(1)) == (False, None)
    assert stored(db) == set()


def test_lazy_and_durable_commits(db: Database) -> None:
    async def run() -> list[int]:
        futs = [db.submit(synchronous_seen, lazy=True), db.submit(synchronous_seen)]
        return [await asyncio.wrap_future(f) for f in futs]
    seen = asyncio.run(run())
    # Alone, the lazy one commits without the fsync; batched with a durable
    # job, the batch waits for the disk: either way the durable one does.
    assert seen[1] == 2 and seen[0] in (1, 2)
    assert asyncio.run(_awaited(db, synchronous_seen)) == 2
    with db.write(lazy=True) as conn:
        assert synchronous_seen(conn) == 1
    with db.write() as conn:  # the connection went back to FULL
        assert synchronous_seen(conn) == 2
    assert db.write_now(synchronous_seen, lazy=True) == (True, 1)


def test_lazy_commits_are_synced_soon_after(db: Database) -> None:
    from strato.store.db import LAZY_SYNC_S
    with db.write(lazy=True) as conn:
        conn.exec_driver_sql("INSERT INTO t (k) VALUES (7)")
    assert db._lazy is not None and db._lazy._dirty
    deadline = time.monotonic() + 10 * LAZY_SYNC_S + 1
    while db._lazy._dirty and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not db._lazy._dirty


def test_a_lazy_commit_survives_the_process_being_killed(tmp_path: Path) -> None:
    """What `--ledger-commit async` keeps: kill -9 right after the commit."""
    path = tmp_path / "kill.sqlite"
    code = f"""
import os, signal
from strato.store.db import Database
db = Database("sqlite:///{path}")
with db.write() as conn:
    conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
with db.write(lazy=True) as conn:
    conn.exec_driver_sql("INSERT INTO t (k) VALUES (42)")
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == -9
    con = sqlite3.connect(path)
    assert con.execute("SELECT k FROM t").fetchall() == [(42,)]
    con.close()


def _slow_counted_fsyncs(db: Database) -> list[int]:
    """The lazy commit count at each fsync of `db`'s WAL from now on, each
    fsync made slow (20 ms) so that waiters pile up behind it."""
    lazy = db._lazy
    assert lazy is not None
    fsyncs: list[int] = []
    real = lazy._fsync

    def counted() -> bool:
        fsyncs.append(lazy.written)
        time.sleep(0.02)
        return real()
    lazy._fsync = counted  # type: ignore[method-assign]
    return fsyncs


def test_durable_waits_for_the_disk_once_for_many_callers(db: Database) -> None:
    """A lazy commit then `durable(mark)` is a FULL commit (the ledger's path
    with --ledger-commit sync): each caller returns only once an fsync that
    began after its commit has ended, and callers that wait together share
    fsyncs (group commit)."""
    fsyncs = _slow_counted_fsyncs(db)
    assert db.lazy_mark() == 0
    db.durable(0)  # nothing written: nothing to wait for
    assert fsyncs == []
    marks: list[int] = []
    lock = threading.Lock()

    def one(k: int) -> None:
        done, _ = db.write_now(raw_insert(k), lazy=True)
        if not done:  # another thread's inline write held the lock
            with db.write(lazy=True) as conn:
                raw_insert(k)(conn)
        mark = db.lazy_mark()
        db.durable(mark)
        with lock:
            marks.append(mark)
            # The fsync that let this caller go began after its commit.
            assert any(f >= mark for f in fsyncs)
    threads = [threading.Thread(target=one, args=(k,)) for k in range(1, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(stored(db)) == list(range(1, 13)) and len(marks) == 12
    assert len(fsyncs) < 12, fsyncs
    before = len(fsyncs)
    db.durable(max(marks))  # already on the disk: no second fsync
    assert len(fsyncs) == before


def test_an_event_loop_waits_for_the_disk_without_a_thread_per_waiter(db: Database) -> None:
    """`durable_soon`: many requests of one event loop wait for the fsync of
    their lazy commits together, on one syncer thread, each told only after an
    fsync that began after its commit; nothing to wait for gives None; a disk
    that refuses fails every waiter of that fsync."""
    lazy = db._lazy
    assert lazy is not None
    real_fsync = lazy._fsync
    fsyncs = _slow_counted_fsyncs(db)
    assert db.durable_soon(0) is None

    async def one(k: int) -> int:
        assert db.write_now(raw_insert(k), lazy=True)[0]
        mark = db.lazy_mark()
        waiting = db.durable_soon(mark)
        assert waiting is not None
        await waiting
        assert any(f >= mark for f in fsyncs)
        return mark

    async def many() -> list[int]:
        return await asyncio.gather(*(one(k) for k in range(1, 21)))
    before = threading.active_count()
    marks = asyncio.run(many())
    assert sorted(stored(db)) == list(range(1, 21)) and len(marks) == 20
    assert len(fsyncs) < 20, fsyncs
    assert threading.active_count() <= before + 2  # the syncer (and lazy-sync) only
    assert db.durable_soon(max(marks)) is None  # on the disk already

    def broken() -> bool:
        raise OSError(5, "Input/output error")
    lazy._fsync = broken  # type: ignore[method-assign]

    async def wait_for(k: int) -> None:
        assert db.write_now(raw_insert(k), lazy=True)[0]
        waiting = db.durable_soon(db.lazy_mark())
        assert waiting is not None
        await waiting
    with pytest.raises(OSError):
        asyncio.run(wait_for(99))

    def bug() -> bool:
        raise ValueError("not a disk error")
    lazy._fsync = bug  # type: ignore[method-assign]
    with pytest.raises(OSError, match="not a disk error"):
        asyncio.run(wait_for(100))
    # The syncer thread lived through both: the next waiter is served.
    lazy._fsync = real_fsync  # type: ignore[method-assign]
    asyncio.run(wait_for(101))


# -- written_here: an event loop's own writes, one transaction per wave ------------


async def _wave(db: Database, jobs: list[Callable[[Connection], int]],
                after: Callable[[int], None] | None = None) -> list[int | BaseException]:
    """Requests at work at once (each inside `expecting`, as the scheduler's
    are), each writing its job on the loop once all have started."""
    started = asyncio.Event()

    async def one(job: Callable[[Connection], int]) -> int:
        with db.expecting():
            await started.wait()
            return await db.written_here(job, after)
    tasks = [asyncio.create_task(one(j)) for j in jobs]
    await asyncio.sleep(0)
    started.set()
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def test_a_wave_of_loop_writes_shares_one_commit_and_is_answered_once_durable(
        db: Database) -> None:
    """`written_here`: the jobs of requests at work at once run on the loop's
    thread, in one transaction; a job that fails is rolled back alone; the
    post-commit hooks run on the loop after the commit; every caller is
    answered only once an fsync that began after the commit has ended; no
    writer thread is involved."""
    commits = _Commits()
    db.observer = commits
    fsyncs = _slow_counted_fsyncs(db)
    threads: set[int] = set()
    hooked: list[int] = []

    def job(k: int) -> Callable[[Connection], int]:
        inner = insert(k)

        def run(conn: Connection) -> int:
            threads.add(threading.get_ident())
            return inner(conn)
        return run

    def hook(k: int) -> None:
        threads.add(threading.get_ident())
        hooked.append(k)
        assert k in stored(db)  # committed before its hook runs

    async def main() -> list[int | BaseException]:
        got = await _wave(db, [job(k) for k in (1, 2, -3, 4, 5)], hook)
        # Answered after an fsync that covers the commit.
        assert fsyncs and max(fsyncs) >= db.lazy_mark() >= 1
        return got

    got = asyncio.run(main())
    assert got[:2] == [1, 2] and got[3:] == [4, 5]
    assert isinstance(got[2], ValueError)
    assert stored(db) == {1, 2, 4, 5}
    assert sorted(hooked) == [1, 2, 4, 5]
    assert commits.count == 1
    assert threads == {threading.get_ident()}  # asyncio.run's loop runs here
    assert db._batcher._writer is None


def test_turns_commit_in_halves_while_an_fsync_is_long_next_to_gathering_one() -> None:
    """_Pace: a turn commits once as many jobs joined as requests were lately
    at work at once; half of them while an fsync takes more than SPLIT_ABOVE
    of a full turn's gathering (the loop would stand idle for it), whole again
    below JOIN_BELOW, and unchanged between the two."""
    pace = _Pace()
    assert pace.size(8) == 8

    def turns(fsync_s: float, n: int = 40) -> None:
        for _ in range(n):  # a turn of 8 gathers in 4.2 ms: 0.6 ms a job
            pace.synced(fsync_s)
            size = pace.size(8)
            pace.gathered(0.0006 * (size - 1), size, 8)

    turns(0.0003)  # this machine's disk: 0.3 ms against 4.8 ms of gathering
    assert pace.size(8) == 8
    turns(0.002)  # a slow disk: 2 ms
    assert (pace.size(8), pace.size(9), pace.size(4), pace.size(3)) == (4, 5, 2, 3)
    turns(0.0013)  # between the two bounds: as it was
    assert pace.size(8) == 4
    turns(0.0003)
    assert pace.size(8) == 8
    turns(0.0013)
    assert pace.size(8) == 8
    pace.gathered(0.001, 1, 8)  # a turn of one job says nothing of the pace
    assert pace.job_s == pytest.approx(0.0006)


def test_a_slow_disk_has_the_loops_turns_commit_in_halves(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """With fsyncs long next to the loop's gathering of a turn, requests at
    work at once are committed in two turns: the first half's fsync runs while
    the loop serves the second. The fsync's
    time is what the syncing thread measures (and reports to the observer)."""
    real_fsync = os.fsync
    synced: list[float] = []

    def slow_fsync(fd: int) -> None:
        time.sleep(0.01)
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", slow_fsync)
    # A slow hour here must not end a turn by its gathering timer instead.
    monkeypatch.setattr(_Batcher, "GATHER_S", 0.1)

    class Seen(_Commits):
        def synced(self, seconds: float) -> None:
            synced.append(seconds)
    commits = Seen()
    db.observer = commits

    async def spread(base: int) -> list[int]:
        """Eight requests at work at once, each planning 0.4 ms on the loop
        (blocking it) before its write, one loop iteration after another."""
        started = asyncio.Event()

        async def one(k: int) -> int:
            with db.expecting():
                await started.wait()
                for _ in range(k):
                    await asyncio.sleep(0)
                time.sleep(0.0004)
                got: int = await db.written_here(insert(base + k))
                return got
        tasks = [asyncio.create_task(one(k)) for k in range(8)]
        await asyncio.sleep(0)
        started.set()
        return list(await asyncio.gather(*tasks))

    async def main() -> list[int]:
        counts = []
        for wave in range(3):
            commits.count = 0
            assert await spread(10 * wave) == [10 * wave + k for k in range(8)]
            counts.append(commits.count)
        return counts
    counts = asyncio.run(main())
    assert counts[0] == 1 and counts[-1] == 2, counts
    assert stored(db) == {10 * w + k for w in range(3) for k in range(8)}
    assert synced and min(synced) >= 0.01


def test_a_loop_write_that_would_wait_goes_to_the_writer_thread(
        db: Database, tmp_path: Path) -> None:
    """Another process holds the database's lock, or this process's writer
    thread is at work: the job is not run on the loop (that would block it)
    but submitted, and answered once the lock is free."""
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None,
                            check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.2, lambda: other.execute("ROLLBACK")).start()

    async def main() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        ticker = loop.create_task(tick())
        t0 = time.perf_counter()
        got = await db.written_here(insert(1))
        ticker.cancel()
        assert ticks >= 5  # the loop went on meanwhile
        return got, time.perf_counter() - t0

    got, waited = asyncio.run(main())
    other.close()
    assert got == 1 and waited >= 0.15
    assert db._batcher._writer is not None
    assert stored(db) == {1}


def test_a_blocking_write_on_the_loops_thread_ends_its_open_turn_first(
        db: Database) -> None:
    """A turn holds the write lock until it commits: a plain `write()` made
    on the loop's own thread meanwhile commits the turn first instead of
    waiting for it forever; a turn whose loop has gone is rolled back."""
    async def main() -> int:
        with db.expecting(), db.expecting():  # two at work: the turn waits for a second
            waiting = asyncio.create_task(db.written_here(insert(1)))
            await asyncio.sleep(0)
            assert db._turn is not None
            with db.write() as conn:  # would deadlock without ending the turn
                conn.execute(sa.insert(ROWS).values(k=2))
            assert db._turn is None
            return await waiting

    assert asyncio.run(main()) == 1
    assert stored(db) == {1, 2}

    # A loop that stops with a turn open (its timer never ran): rolled back.
    loop = asyncio.new_event_loop()

    async def left_open() -> None:
        with db.expecting(), db.expecting():
            task = asyncio.create_task(db.written_here(insert(3)))
            await asyncio.sleep(0)
            task.cancel()
    loop.run_until_complete(left_open())
    loop.close()
    assert db._turn is not None
    with db.write() as conn:
        conn.execute(sa.insert(ROWS).values(k=4))
    assert stored(db) == {1, 2, 4}


def test_a_turn_whose_commit_fails_fails_every_job_and_frees_the_lock(
        tmp_path: Path) -> None:
    """A deferred constraint fails at the commit: every job of the turn gets
    the error, no hook runs, nothing is stored, and the next write works."""
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        with db.write() as conn:
            conn.exec_driver_sql("CREATE TABLE p (k INTEGER PRIMARY KEY)")
            conn.exec_driver_sql(
                "CREATE TABLE t (k INTEGER PRIMARY KEY, p INTEGER REFERENCES p (k) "
                "DEFERRABLE INITIALLY DEFERRED)")
        hooked: list[int] = []

        def job(k: int, parent: int) -> Callable[[Connection], int]:
            def run(conn: Connection) -> int:
                conn.exec_driver_sql(f"INSERT INTO t (k, p) VALUES ({k}, {parent})")
                return k
            return run
        got = asyncio.run(_wave(db, [job(1, 0), job(2, 99), job(3, 0)], hooked.append))
        assert all(isinstance(g, sa.exc.IntegrityError) for g in got), got
        assert hooked == []
        with db.write() as conn:
            conn.exec_driver_sql("INSERT INTO p (k) VALUES (0)")
        assert asyncio.run(_wave(db, [job(1, 0)], hooked.append)) == [1]
        assert hooked == [1]
    finally:
        db.dispose()


def test_a_job_that_fails_in_a_turn_is_answered_once_the_others_hooks_ran(
        db: Database) -> None:
    """A claim that lost to another of its turn (capacity moved) is retried
    on a view that has the other's write: its caller hears of the failure
    only after the turn's post-commit hooks ran."""
    hooked: list[int] = []
    seen: list[list[int]] = []

    async def main() -> None:
        started = asyncio.Event()

        async def one(k: int) -> None:
            with db.expecting():
                await started.wait()
                try:
                    await db.written_here(insert(k), hooked.append)
                except ValueError:
                    seen.append(list(hooked))
        tasks = [asyncio.create_task(one(k)) for k in (1, -2)]
        await asyncio.sleep(0)
        started.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert seen == [[1]]


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_the_loops_own_commits_are_checkpointed_by_another_thread(
        tmp_path: Path, synchronous: str) -> None:
    """A checkpoint writes the database file and syncs it: never on the
    thread that commits in place (an event loop); the syncer thread (FULL)
    or the checkpointer (NORMAL: no syncs, but SQLite's automatic checkpoint
    would stall the loop for milliseconds) copies what those commits left in
    the WAL."""
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}", sqlite_synchronous=synchronous)
    with db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    try:
        _checkpointed_elsewhere(db)
    finally:
        db.dispose()


def _checkpointed_elsewhere(db: Database) -> None:
    main = Path(str(db.engine.url.database))
    before = main.stat().st_size
    threads: list[int] = []
    real = db.checkpoint

    def counted() -> None:
        threads.append(threading.get_ident())
        real()
    db.checkpoint = counted  # type: ignore[method-assign]
    for k in range(3000):  # past SQLite's automatic checkpoint (1,000 pages)
        assert db.write_now(raw_insert(k), lazy=True)[0]
    inline = db._inline
    assert inline is not None
    driver = inline.connection.driver_connection
    assert driver is not None
    assert driver.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    deadline = time.monotonic() + 5
    while main.stat().st_size == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert main.stat().st_size > before
    assert threads and threading.get_ident() not in threads
    assert len(stored(db)) == 3000


def test_a_thread_that_waits_for_the_lock_has_the_loops_turn_committed_at_once(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn gathering for requests that may not come holds the write lock:
    a thread that needs it (the writer, a worker's write) has the loop commit
    the turn now rather than at the end of the gathering."""
    monkeypatch.setattr(_Batcher, "GATHER_S", 5.0)
    opened = threading.Event()
    got: list[int] = []

    async def main() -> None:
        with db.expecting(), db.expecting():  # two at work: the turn waits for a second
            waiting = asyncio.create_task(db.written_here(insert(1)))
            await asyncio.sleep(0)
            assert db._turn is not None
            opened.set()
            got.append(await waiting)
    loop_thread = threading.Thread(target=asyncio.run, args=(main(),))
    loop_thread.start()
    assert opened.wait(5)
    t0 = time.perf_counter()
    with db.write() as conn:
        conn.execute(sa.insert(ROWS).values(k=2))
    assert time.perf_counter() - t0 < 2.0
    loop_thread.join(10)
    assert got == [1]
    assert stored(db) == {1, 2}


def test_no_new_turn_takes_the_lock_before_a_thread_that_waits_for_it(
        db: Database) -> None:
    """A thread blocked on the write lock is not overtaken by the loop's next
    turn (a lock has no queue): while one waits, the loop's jobs go to the
    writer thread, which queues behind it."""
    db._lock_waiting(+1)
    try:
        assert asyncio.run(db.written_here(insert(1))) == 1
        assert db._batcher._writer is not None
    finally:
        db._lock_waiting(-1)
    assert db._lock_waiters == 0
    assert stored(db) == {1}


@pytest.mark.postgres
def test_a_postgresql_server_knows_whether_it_is_the_only_one(pg_db_url: str) -> None:
    """`claim_alone`: true for the first server of a database, false beside
    a live one (even after the first's start-up), true again once every
    other has gone (its connection closed: a process killed lets go too)."""
    first, second, third = (Database(pg_db_url) for _ in range(3))
    try:
        assert first.claim_alone() is True
        first.end_alone()
        assert second.claim_alone() is False
        second.end_alone()
        first.dispose()
        second.dispose()
        assert third.claim_alone() is True
    finally:
        for db in (first, second, third):
            db.dispose()


def test_a_sqlite_server_is_alone(sqlite_db_url: str) -> None:
    db = Database(sqlite_db_url)
    try:
        assert db.claim_alone() is True
        db.end_alone()
    finally:
        db.dispose()


@pytest.mark.postgres
def test_a_postgresql_server_that_lost_its_lock_connection_takes_the_lock_again(
        pg_db_url: str) -> None:
    """Its connection ended (a failover, an idle timeout): a server starting
    after the next check does not think itself alone."""
    first, second = Database(pg_db_url), Database(pg_db_url)
    try:
        assert first.claim_alone() is True
        first.end_alone()
        assert first._alone is not None
        pid = first._alone[0].execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with second.engine.connect() as c:
            c.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        first.keep_server_lock()
        assert second.claim_alone() is False
    finally:
        first.dispose()
        second.dispose()
