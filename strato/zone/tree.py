"""The zone tree: schedule over this zone's own providers and its children.

A zone knows its own providers (through ``LocalScheduler``) and its direct
children (by URL, with a cached summary each). A schedule request at a zone
with children:

1. holds its id before any work (in memory, having read this zone's request
   ledger, ``store/ledger.py``, which its answer's commit then writes it to):
   a concurrent duplicate waits for the first and replays its answer, or is
   told it is still in progress;
2. gets a deadline (the caller's, or ``request_timeout`` from now); each
   child is given less than what is left, and a request whose time runs out
   is abandoned and what it claimed undone;
3. prunes children whose static metadata or summary cannot satisfy it,
   orders the rest and its own providers by predicted fit, and asks them
   (``delegate``: one at a time, best first; ``best``: all for dry-run plans,
   then claims the best at its owner). Every part it asks for is recorded
   under the request's id first (held in memory with the id, or in the
   ledger without waiting for the disk), so one cancel finds and undoes all
   of them (``zone/sweep.py`` finds, at start-up, the parts whose records a
   dying process or machine took);
4. answers with the zone path of every placement; when nothing fits, a
   definite refusal (409, kept for a retry) only if every zone that might fit
   answered; otherwise 503 ``strato.zone_unavailable`` (not kept: a retry
   works afresh).

A child that fails is suspect and skipped until a probe (its summary, with
bounded backoff) finds it answering again; a part whose answer was lost is
in doubt and cancelled at that child, by part id, as soon as it answers.
Nothing here is the truth for any claim: the owning zone's store is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from strato import trace
from strato.model import errors
from strato.model.schedule import ScheduleRequest, SpreadRuleSpec, check_claim
from strato.observe import NOBODY, Observer
from strato.store import children as child_store
from strato.store import in_doubt, ledger, provisional
from strato.store.allocations import ConsumerClaim, claim, placed_by
from strato.store.children import Child
from strato.store.db import Database
from strato.store.ledger import State
from strato.store.util import utcnow
from strato.zone import clock, protocol, shared, split, subtree, sweep
from strato.zone import summary as summaries
from strato.zone.attempt import Attempt, Health, Outcome, Result, outage, part_id, part_origin
from strato.zone.failures import FailureMemory, Refusal, shape_of
from strato.zone.names import TreeNames
from strato.zone.prune import predicted_fit, prune_reason, soft_penalty, static_reason
from strato.zone.scheduler import LocalScheduler, NoValidPlacement, OwnHosts
from strato.zone.transport import Malformed, ObservedTransport, Transport, Unreachable, unrouted

log = logging.getLogger("strato.zone")
T = TypeVar("T")
LOCAL = ""  # the key of this zone's own providers among the options and parts
WRITE = "write"  # `_in_flight`'s key for consumers an allocations write is making
REFUSED_BEFORE = "refused as much before, and nothing was freed there since"
# Worker threads per planner for schedule calls on this zone's own providers:
# one plans while the others claim (wait for their commit).
LOCAL_THREADS_PER_PLANNER = 8
# Children are read from the store at most this often per process (other
# processes of the zone see a change within this delay; this one at once).
CHILDREN_TTL_S = 5.0
# Whether the zone has providers of its own is looked up at most this often.
OWN_TTL_S = 1.0
# Old answers kept by request id are purged this often.
PURGE_EVERY_S = 300.0
# A request naming a custom class or trait unknown here asks the subtree
# (`learn_names`): up to this many rounds at once, then one a second.
LEARN_BURST = 10
LEARN_EVERY_S = 1.0
# The background loop's tick: probes of failed children are this fine.
TICK_S = 0.25
# A summary is small: a child that takes longer than this is not healthy.
PROBE_TIMEOUT_S = 1.0
# How long a request waits for a due probe of a failed child (see _refresh_due).
PROBE_WAIT_S = 0.2
# A cancel from the parent is answered within this share of child_timeout (the
# parent's wait); a cancel on a request's path waits at least MIN_CANCEL_S.
CANCEL_SHARE = 0.8
MIN_CANCEL_S = 0.5
# A client's retry spends at most this share of its time cancelling what its
# earlier tries left in doubt, before it is tried again.
SETTLE_SHARE = 0.25
# In delegate mode, a child that is not the last option gets this share of
# the time left: one that hangs leaves time to ask the next.
NEXT_SHARE = 0.5
# A summary names at most this many unreachable zones below it.
MAX_UNREACHABLE = 64
# A duplicate waits at most this long for the first request with its id.
DUPLICATE_WAIT_S = 10.0


def _log_failure(task: asyncio.Future[Any]) -> None:
    """A background task's unexpected failure: logged (so retrieved), where
    nobody awaits its result; the loop that started it goes on."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("background task failed: %s: %s", type(exc).__name__, exc, exc_info=exc)


@dataclass(slots=True)
class Cached:
    body: dict[str, Any]
    fetched: float


@dataclass(slots=True)
class TreeConfig:
    name: str = "local"
    location_prefix: str | None = None
    tags: tuple[str, ...] = ()
    summary_interval: float = 5.0
    # The most one child call may take (less when the request has less left).
    child_timeout: float = 5.0
    # A request's whole budget at the zone a client asked.
    request_timeout: float = 30.0
    fanout: int = 16
    # `best` mode: how many children (the summaries' best) get a dry run at
    # once; the next as many only if none of them can place the request.
    best_width: int = 3
    # ... and at a zone whose parent asked for the dry run (its plan is one
    # of the parent's options): the zones below compare fewer, so a tree of
    # ten regions of ten cells plans in 3 cells, not 3 x 3.
    best_nested_width: int = 1
    # Cross-zone placements: how long a held part lives unless confirmed.
    hold_ttl: float = 30.0
    # Answers kept by request id are forgotten after this long.
    request_retention: float = 7 * 86400.0
    schedule_concurrency: int = 1
    # "async": a request's answer (with its id and parts) is committed
    # without waiting for the disk (durable when the process dies; within
    # 0.1 s when the machine does). "sync": the answer waits (and takes the
    # records before it to the disk); parts recorded before never wait
    # (zone/sweep.py finds those lost with the process or the machine).
    # Claims always wait.
    ledger_commit: str = "sync"


@dataclass
class ZoneTree:
    db: Database
    local: LocalScheduler
    transport: Transport
    config: TreeConfig = field(default_factory=TreeConfig)
    health: dict[str, Health] = field(default_factory=dict)
    # Each child's clock against this zone's (zone/clock.py), from its summaries.
    clocks: dict[str, clock.Skew] = field(default_factory=dict)
    cache: dict[str, Cached] = field(default_factory=dict)
    # What each child refused, until its summary says room grew there.
    failures: FailureMemory = field(default_factory=FailureMemory)
    # Which child holds a consumer placed or found through this zone, and
    # which owns a provider: routing tables for the Placement API over the
    # subtree (zone/subtree.py), each with a lookup in every child behind it.
    consumer_zones: subtree.Owners = field(default_factory=subtree.Owners)
    provider_zones: subtree.Owners = field(default_factory=subtree.Owners)
    # Custom classes and traits the children list, made here too (zone/names.py).
    names: TreeNames = field(default_factory=TreeNames)
    _learning: asyncio.Lock = field(default_factory=asyncio.Lock)
    _round_started: float = float("-inf")  # the last round of learn_names
    _rounds: tuple[float, float] = (float(LEARN_BURST), 0.0)  # (tokens, when counted)
    _kids: tuple[float, list[Child]] | None = None
    # (when looked, whether this zone has providers and where)
    _own: tuple[float, OwnHosts] | None = None
    # The children the last summary merged as overlapping (warned once).
    _overlaps: list[str] = field(default_factory=list)
    # Children with requests in doubt (None: not read from the store yet).
    _doubtful: set[str] | None = None
    # Parts noted in doubt so far, and the count at each child's last: a read
    # of the store's counts keeps the children noted while it ran.
    _doubt_notes: int = 0
    _doubt_noted: dict[str, int] = field(default_factory=dict)
    # Parts in doubt settled lately (a count, and each as (count, child, its
    # consumers)): a child's conflict answered before a cancel landed.
    _doubt_settled: int = 0
    _settled: deque[tuple[int, str, frozenset[str]]] = field(
        default_factory=lambda: deque(maxlen=1024))
    _reconciling: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Children still to be asked for parts lost with the machine (zone/sweep.py).
    _sweep: sweep.Sweep | None = None
    # When each child was last asked by it (this zone's clock): later rounds
    # ask only for what is newer.
    swept_until: dict[str, float] = field(default_factory=dict)
    # Requests left unanswered by an earlier process on this database (a
    # crash): request id -> attempt. See `note_orphans`.
    _orphans: dict[str, str | None] | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _fetching: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    _group_locks: split.GroupLocks = field(default_factory=split.GroupLocks)
    # Consumers being placed through this zone, by consumer: ((whose, request
    # id), request); whose: "client", or "parent" with the id of its request.
    _in_flight: dict[str, tuple[tuple[str, str | None], int]] = field(default_factory=dict)
    # Requests whose ids are held in memory, not yet in the ledger: request id
    # -> the attempt (its parts asked of children so far; see `_note_part`).
    _open: dict[str, Attempt] = field(default_factory=dict)
    _local_gate: asyncio.Semaphore = field(init=False)
    observer: Observer = NOBODY
    # This process on zone paths (PATH_HEADER) and in its summaries' zone_ids.
    zone_id: str = field(default_factory=lambda: secrets.token_hex(8))

    def __post_init__(self) -> None:
        # Every call to a child is timed, by child, for the observer (metrics),
        # and one made outside a request starts its zone path here.
        self.transport = ObservedTransport(self.transport, self._called, self.zone_id)
        # Schedule calls on this zone's own providers in worker threads at once;
        # the rest wait on the event loop. The scheduler itself lets
        # `schedule_concurrency` of them plan at a time; the others here wait
        # for their commits, which overlap and share transactions.
        self._local_gate = asyncio.Semaphore(LOCAL_THREADS_PER_PLANNER
                                             * max(1, self.config.schedule_concurrency))

    async def _write(self, job: Callable[[Connection], T], *, now: bool = False,
                     durable: bool = True) -> T:
        """A write in the database's writer (grouped with concurrent ones).

        `now`: a job of the ledger's cursor statements only (no SQLAlchemy
        statement: see `Database.write_now`), one request's reservation, parts
        and answer, on its path. With `ledger_commit` "async" its commit does
        not wait for the disk. Either way it runs at once, on the event loop,
        when nothing else is writing (a lazy commit: ~0.1 ms); with "sync" the
        WAL is then fsynced in a worker thread before this returns, which is
        the same durability as a FULL commit for less CPU than the writer
        thread's transaction. Otherwise the writer thread runs it, grouped, and
        waits for the disk (never the event loop). Not `durable`: never waits
        for the disk (a later durable commit takes it there, or the syncer
        thread within 0.1 s)."""
        lazy = not durable or (now and self.config.ledger_commit == "async")
        if now:
            done, result = self.db.write_now(job, lazy=True)
            if done:
                if not lazy:
                    await self._durable()
                return result  # type: ignore[return-value]
        return await self.db.written(job, lazy=lazy)

    async def _durable(self) -> None:
        """Until every ledger commit so far is on the disk (SQLite FULL)."""
        waiting = self.db.durable_soon(self.db.lazy_mark())
        if waiting is not None:
            await waiting

    def _called(self, url: str, seconds: float, outcome: str) -> None:
        kids = self._kids[1] if self._kids is not None else []
        name = next((c.name for c in kids if c.url == url), "other")
        self.observer.zone_called(name, seconds, outcome)

    async def _read(self, job: Callable[[Connection], T]) -> T:
        def run() -> T:
            with self.db.read() as conn:
                return job(conn)
        return await run_in_threadpool(run)

    # -- children --------------------------------------------------------------------

    async def children(self) -> list[Child]:
        """This zone's children (cached briefly: read on every request otherwise)."""
        now = time.monotonic()
        if self._kids is not None and now - self._kids[0] < CHILDREN_TTL_S:
            return self._kids[1]
        kids = await self._read(child_store.list_children)
        self._kids = (now, kids)
        return kids

    async def child(self, name: str) -> Child | None:
        return next((c for c in await self.children() if c.name == name), None)

    def forget_children(self) -> None:
        """After this process changed the children: read them again."""
        self._kids = None

    def health_of(self, name: str) -> Health:
        return self.health.setdefault(name, Health())

    def their_time(self, child: str, t: float) -> float:
        """`t` (a deadline, this zone's clock) in `child`'s clock."""
        skew = self.clocks.get(child)
        return t if skew is None else t + skew.offset()

    def _note_clock(self, child: str, body: dict[str, Any], sent: float,
                    received: float) -> None:
        stamp = body.get("clock")
        if not isinstance(stamp, float):
            return  # an older zone: its clock is taken to be right
        skew = self.clocks.setdefault(child, clock.Skew())
        before = skew.offset()
        skew.note(stamp, sent, received)
        after = skew.offset()
        if abs(after - before) > 1.0 or (after == 0.0) != (before == 0.0):
            if after == 0.0:
                log.warning("child zone %s's clock agrees with this zone's again", child)
            else:
                log.warning("child zone %s's clock is %.1f s %s this zone's: the deadlines "
                            "sent to it are given in its time; set both clocks right "
                            "(NTP)", child, abs(after), "ahead of" if after > 0 else "behind")

    def forget_child(self, name: str) -> None:
        self.cache.pop(name, None)
        self.health.pop(name, None)
        self.clocks.pop(name, None)
        self.failures.forget(name)

    async def fetch_summary(self, child: Child, *, fresh: bool = False
                            ) -> dict[str, Any] | None:
        """Ask one child for its summary (the probe); updates health either way.
        `fresh` makes the child refresh its own children's summaries first."""
        h = self.health_of(child.name)
        path = "/strato/v1/summary?fresh=1" if fresh else "/strato/v1/summary"
        timeout = self.config.child_timeout if fresh else min(self.config.child_timeout,
                                                              PROBE_TIMEOUT_S)
        sent = time.time()
        try:
            reply = await self.transport.call(child.url, "GET", path,
                                              token=child.credential, timeout=timeout)
        except Unreachable as exc:
            h.failed(exc.why, faulty=isinstance(exc, Malformed), timed_out=exc.timed_out)
            return None
        received = time.time()
        if protocol.is_loop(reply.status, reply.body):
            # Its summary would count this zone (or the call came back here):
            # the tree has a cycle through it.
            self._looped(child, str(_error(reply.body).get("detail", ""))[:300])
            return None
        if reply.status != 200 or not isinstance(reply.body, dict):
            h.failed(f"summary answered {reply.status}")
            return None
        try:
            body = protocol.read_summary(reply.body)
        except protocol.Faulty as exc:
            h.failed(f"faulty: {exc.reason}", faulty=True)
            return None
        if self._covers_this_zone(body):
            self._looped(child, f"its summary counts this zone ({self.config.name})")
            return None
        was_down = not h.healthy
        h.ok()
        self._note_clock(child.name, body, sent, received)
        self.cache[child.name] = Cached(body, time.monotonic())
        self.names.note(body, self.db)
        if was_down:
            log.info("child zone %s answers again", child.name)
            if self._doubtful and child.name in self._doubtful:
                self.spawn(self.reconcile(child.name))
        return body

    async def learn_names(self) -> bool:
        """Ask every child for a fresh summary and make the custom classes and
        traits they list here (a request named one this zone's registry did
        not have yet); whether any was new here."""
        before = self.names.size()
        asked = time.monotonic()
        # One round at a time, shared: requests that wait for a round share
        # the next one, and a round that started after this request came has
        # answered it. Rounds are rationed (a client naming a class nobody
        # has must not make every request a round through the whole
        # subtree), but with room for bursts: at most one a second left a
        # name a cell made just after a round unknown here for up to a
        # second, a 400 "No such trait" where Placement answers 200.
        async with self._learning:
            if self._round_started < asked and self._take_round():
                self._round_started = time.monotonic()
                # Not the children that failed (a hung one would hold every
                # misspelt name for the child timeout).
                kids = [c for c in await self.children() if self.health_of(c.name).healthy]
                # A summary lists the names the children's providers have; a
                # name a child made that no provider has yet is in its
                # registry alone (a query naming it is Placement's 200, an
                # empty answer, not a 400 "No such"): their registries too.
                _, (traits, _), (classes, _) = await asyncio.gather(
                    self.refresh(kids, fresh=True, wait=self.config.child_timeout),
                    subtree.registry_names(self, "/traits?name=startswith:CUSTOM_", "1.6",
                                           kids),
                    subtree.registry_names(self, "/resource_classes", "1.2", kids))
                self.names.note({"classes": [n for names in classes for n in names],
                                 "traits": [n for names in traits for n in names]}, self.db)
            await self.names.settle(self.db)
        return self.names.size() > before

    def _take_round(self) -> bool:
        """Whether a round of learn_names may start now (a token bucket:
        LEARN_BURST at once, one more every LEARN_EVERY_S)."""
        tokens, at = self._rounds
        now = time.monotonic()
        tokens = min(float(LEARN_BURST), tokens + (now - at) / LEARN_EVERY_S)
        if tokens < 1.0:
            self._rounds = (tokens, now)
            return False
        self._rounds = (tokens - 1.0, now)
        return True

    def _covers_this_zone(self, body: dict[str, Any]) -> bool:
        ids = body.get("zone_ids")
        return isinstance(ids, list) and self.zone_id in ids

    def _looped(self, child: Child, why: str) -> None:
        """`child` leads round a cycle of the tree back to this zone: faulty
        (not asked, not counted in this zone's summary) until, its quarantine
        over, a probe finds the cycle gone."""
        self.health_of(child.name).failed(
            f"loop: child {child.name} leads back to this zone ({why})", faulty=True,
            loop=True)
        self.cache.pop(child.name, None)
        log.warning("child zone %s leads round a cycle of the zone tree: %s", child.name, why)

    async def answers_as(self, child: Child) -> bool:
        """Whether a zone answers at `child.url` as `child.name` (alive)."""
        try:
            reply = await self.transport.call(child.url, "GET", "/strato/v1/summary",
                                              token=child.credential, timeout=PROBE_TIMEOUT_S)
        except Unreachable:
            return False
        return (reply.status == 200 and isinstance(reply.body, dict)
                and reply.body.get("zone") == child.name)

    async def is_this_zone(self, url: str, token: str | None) -> bool:
        """Whether a call to `url` comes back to this zone (its middleware
        refuses it as a loop): the URL is one of this zone's own addresses.
        The version document, which asks no other zone: another zone whose
        subtree holds this one refuses a summary request from here too."""
        try:
            reply = await self.transport.call(url, "GET", "/", token=token,
                                              timeout=PROBE_TIMEOUT_S)
        except Unreachable:
            return False
        return protocol.is_loop(reply.status, reply.body)

    async def closes_cycle(self, url: str, token: str | None) -> bool:
        """Whether the summary of the zone at `url` counts this zone (its
        `zone_ids`): this zone is in its subtree already, and registering it
        as a child would close a cycle. False when it cannot be asked.

        Asked without a zone path (`unrouted`), as a zone not below this one:
        with this zone's id on the call, a zone on the way whose background
        refresh the call started would take its own child, whose summary
        counts this zone, for a cycle, and quarantine a sound edge. Its
        summary as cached along the way: a fresh one would do the same."""
        with unrouted():
            try:
                reply = await self.transport.call(url, "GET", "/strato/v1/summary",
                                                  token=token, timeout=PROBE_TIMEOUT_S)
            except Unreachable:
                return False
        if reply.status != 200 or not isinstance(reply.body, dict):
            return False
        try:
            return self._covers_this_zone(protocol.read_summary(reply.body))
        except protocol.Faulty:
            return False

    def _refresh_one(self, child: Child) -> asyncio.Task[Any]:
        """One fetch per child at a time: a slow child never holds up the others."""
        task = self._fetching.get(child.name)
        if task is None or task.done():
            task = asyncio.ensure_future(self.fetch_summary(child))
            task.add_done_callback(_log_failure)
            self._fetching[child.name] = task
        return task

    def _stale(self, child: Child) -> bool:
        """Due for a fetch: a healthy child's summary is old, or a failed child's
        probe is due."""
        h = self.health_of(child.name)
        if not h.healthy:
            return h.due()
        cached = self.cache.get(child.name)
        return cached is None or (time.monotonic() - cached.fetched
                                  >= self.config.summary_interval)

    async def refresh(self, kids: Sequence[Child] | None = None, *, fresh: bool = False,
                      wait: float | None = None) -> None:
        """Fetch the summaries that are due (all of them if `fresh`), waiting at
        most `wait` seconds for them (None: until they end; 0: not at all)."""
        kids = await self.children() if kids is None else kids
        if fresh:
            tasks = [asyncio.ensure_future(self.fetch_summary(c, fresh=True)) for c in kids]
            for t in tasks:
                t.add_done_callback(_log_failure)
        else:
            tasks = [self._refresh_one(c) for c in kids if self._stale(c)]
        if tasks and (wait is None or wait > 0):
            await asyncio.wait(tasks, timeout=wait)

    async def run_refresher(self) -> None:
        """Background loop (HTTP servers): keep summaries fresh, probe failed
        children every tick they are due, and cancel requests left in doubt at
        children that answer again."""
        purged_at = 0.0
        reconciled_at = 0.0
        while True:
            try:
                await self.refresh(wait=0)
                now = time.monotonic()
                if ((self._doubtful is None or self._doubtful)
                        and now - reconciled_at >= self.config.summary_interval
                        and not self._reconciling.locked()):
                    reconciled_at = now
                    self.spawn(self.reconcile())
                if now - purged_at > PURGE_EVERY_S:
                    purged_at = now
                    await run_in_threadpool(self.purge_requests)
            except Exception:  # keep the loop alive whatever one round does
                log.exception("summary refresh failed")
            await asyncio.sleep(min(TICK_S, self.config.summary_interval))

    def purge_requests(self) -> int:
        """Forget answers kept by request id for longer than the retention."""
        before = utcnow() - timedelta(seconds=self.config.request_retention)
        if self._sweep is not None:
            # Not what the sweep compares its children's lists with.
            before = min(before, datetime.fromtimestamp(self._sweep.start - 120.0, UTC)
                         .replace(tzinfo=None))
        total = 0
        while True:
            with self.db.write() as conn:
                n = ledger.purge(conn, before)
            total += n
            if n < 10_000:
                return total

    def spawn(self, coro: Awaitable[Any]) -> None:
        """Run `coro` in the background (kept referenced until it ends)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    # -- requests in doubt ---------------------------------------------------------------

    async def note_in_doubt(self, child: str, request_id: str, consumers: Sequence[str],
                            why: str) -> None:
        """Record, durably and before going elsewhere, that `child` may have
        acted on `request_id` (a part id): it is cancelled there later."""
        new = await self._write(
            lambda conn: in_doubt.add(conn, child, request_id, consumers, why))
        self._doubt_notes += 1
        self._doubt_noted[child] = self._doubt_notes
        if self._doubtful is None:
            self._doubtful = set()
        self._doubtful.add(child)
        # Once per part: a parent re-sending its cancel while the child is
        # still down finds the part in doubt already.
        log.log(logging.WARNING if new else logging.DEBUG,
                "request %s is in doubt at child %s (%s): cancelled there when it "
                "answers again", request_id, child, why)

    async def in_doubt_counts(self) -> dict[str, int]:
        # A part noted in doubt while the counts are read (in a worker
        # thread) may be missing from them: its child stays in the set, or a
        # retry of its request would skip the look for it (`_earlier`: the
        # child's 409 for the request's own consumers taken as definite, a
        # refusal kept while it holds the room) and the reconcile round would
        # not cancel it until another part is noted there.
        before = self._doubt_notes
        counts = await self._read(in_doubt.counts)
        self._doubtful = set(counts) | {c for c, n in self._doubt_noted.items() if n > before}
        return counts

    async def reconcile(self, only: str | None = None) -> int:
        """Ask children that answer to cancel the requests in doubt there.
        Returns how many were settled; the rest wait for the next round."""
        async with self._reconciling:
            rows = await self._read(lambda conn: in_doubt.pending(conn, only))
            kids = {c.name: c for c in await self.children()}
            settled = 0
            down: set[str] = set()
            for row in rows:
                child = kids.get(row.child)
                if (child is None or row.child in down
                        or (only is None and not self.health_of(row.child).due())):
                    continue  # removed (kept for the operator), or not answering
                got = await self._settle_row(child, row)
                if got is None:
                    settled += 1
                elif not got.answered:
                    down.add(row.child)
            await self.in_doubt_counts()
            return settled

    async def _settle_row(self, child: Child, row: in_doubt.InDoubt,
                          timeout: float | None = None) -> Unsettled | None:
        """Cancel one part in doubt at its child; forgotten once done."""
        got = await self._send_cancel(child, row.request_id, timeout)
        if got is None:
            await self._write(partial(in_doubt.resolved, row_id=row.id))
            self._doubt_settled += 1
            self._settled.append((self._doubt_settled, row.child, frozenset(row.consumers)))
            log.info("request %s cancelled at child %s", row.request_id, row.child)
        else:
            await self._write(partial(in_doubt.attempt_failed, row_id=row.id,
                                      error=got.why))
        return got

    async def _send_cancel(self, child: Child, request_id: str,
                           timeout: float | None = None,
                           released: list[str] | None = None) -> Unsettled | None:
        """None once `child` confirmed the cancel done in its whole subtree,
        else why not. A child that took it but could not yet get it to a zone
        below it (deferred there) has not undone the part: what that zone
        holds of it still takes room, so the part stays in doubt here (a
        retry of its request is no refusal meanwhile) and is cancelled again
        until that zone confirms it too. `released` gets the consumers the
        child says it released."""
        try:
            reply = await self.transport.call(
                child.url, "POST", "/strato/v1/requests/cancel", token=child.credential,
                json={"request_id": request_id},
                timeout=self.config.child_timeout if timeout is None else timeout)
        except Unreachable as exc:
            self.health_of(child.name).failed(exc.why, timed_out=exc.timed_out)
            return Unsettled(exc.why)
        self.health_of(child.name).ok()
        if reply.status != 200:
            return Unsettled(f"cancel answered {reply.status}: "
                             f"{_error(reply.body).get('detail', '')}")
        try:
            answer = protocol.read_cancel_answer(request_id, reply.body)
        except protocol.Faulty as exc:
            self.health_of(child.name).failed(f"faulty: {exc.reason}", faulty=True)
            return Unsettled(f"faulty: {exc.reason}")
        if released is not None:
            released += answer.get("released", [])
        if answer.get("deferred"):
            return Unsettled(f"cancelled there, not yet below it (deferred at "
                             f"{', '.join(answer['deferred'])})"[:300], answered=True)
        return None

    async def cancel(self, request_id: str) -> dict[str, Any]:
        """Our parent lost the answer to `request_id`: undo everything it made
        here and below (or refuse it if it comes late). Idempotent."""
        held = self._open.get(request_id)
        unknown = (held is None and self._sweep is not None
                   and await self._lookup(request_id) is None)
        pending: list[ledger.Part] = []
        if held is not None:
            # Held in memory: it asks for nothing more, and what it asked for
            # so far is undone here (its worker undoes the rest, if any).
            held.cancelled = True
            pending = list(held.pending)
        answer = await run_in_threadpool(self.local.cancel_request, request_id)
        # Answered before the parent stops waiting (it gives a call at most
        # child_timeout): what a child below does not confirm by then is
        # deferred, as for one that does not answer.
        undone = await self.undo(request_id, placed=answer is not None,
                                 deadline=time.time() + CANCEL_SHARE * self.config.child_timeout,
                                 skip_failed=True, pending=pending)
        if unknown and self._sweep is not None:
            # Unknown here while the start-up sweep is owed: an earlier process
            # may have asked a child for it and died before writing it down.
            # Not confirmed until the sweep has cancelled what those hold.
            undone.deferred += [c for c in self._sweep.children if c not in undone.deferred]
        return {"request_id": request_id,
                "released": sorted({*(answer or {}).get("released", []), *undone.released}),
                "forwarded": undone.forwarded, "deferred": undone.deferred}

    async def undo(self, request_id: str, *, placed: bool, attempt: str | None = None,
                   deadline: float | None = None, skip: Collection[str] = (),
                   skip_failed: bool = False, pending: Sequence[ledger.Part] = (),
                   in_ledger: bool = True) -> Undone:
        """Undo every part recorded under `request_id` at this zone (only those
        of `attempt`, if given: a later attempt's work is not this one's): its
        own placements (by part id), its pool holds (and, if it had been placed,
        its pool allocations), and each child's part (cancelled there, or
        recorded in doubt until the child answers).

        With a `deadline` (on a request's path, or a parent's cancel) no child
        is waited for past it. The children in `skip` (they timed out on this
        request: likely hung) are not asked again, nor, with `skip_failed`,
        those whose last call timed out and that no call or probe has found
        answering since (being due for a probe is not enough: a parent's
        cancel is no probe, and on a slow day the first backoff is over
        before the cancel comes): their parts are recorded in doubt at once,
        and cancelled there once they answer again (asking now would only
        spend the caller's time).

        `pending`: parts held in memory only (`_note_part`), undone too; not
        `in_ledger`: they are all there is (nothing of it was written)."""
        parts = list(pending)
        out = Undone()
        if in_ledger:
            parts += await self._read(lambda conn: ledger.parts(conn, request_id, attempt))
            out.released += await self._write(partial(self._release_here, request_id=request_id,
                                                      attempt=attempt, placed=placed))
        kids = {c.name: c for c in await self.children()}
        for p in parts:
            if p.child in (shared.POOL, shared.POOL_DONE):
                continue
            if p.child == LOCAL:
                found = await run_in_threadpool(self.local.cancel_request, p.part_id)
                out.released += (found or {}).get("released", [])
                continue
            child = kids.get(p.child)
            h = self.health_of(p.child)
            if child is None:
                why: str | None = "child zone removed"
            elif p.child in skip or (skip_failed and h.hung):
                why = f"not answering ({h.last_error or 'failed'})"
            else:
                timeout = None if deadline is None else min(
                    self.config.child_timeout, max(MIN_CANCEL_S, deadline - time.time()))
                said: list[str] = []
                got = await self._send_cancel(child, p.part_id, timeout, said)
                why = None if got is None else got.why
                # Only the part's own consumers (a child's word is input).
                mine = set(p.consumers)
                out.released += [c for c in said if not mine or c in mine]
            if why is None:
                if p.child not in out.forwarded:
                    out.forwarded.append(p.child)
            else:
                if p.child not in out.deferred:
                    out.deferred.append(p.child)
                await self.note_in_doubt(p.child, p.part_id, p.consumers,
                                         f"cancel not done: {why}")
        return out

    def _release_here(self, conn: Connection, *, request_id: str, attempt: str | None,
                      placed: bool) -> list[str]:
        """`undo`'s part in this zone's own database: pool parts and holds."""
        # The pool parts are read and forgotten in the transaction that
        # releases them: their allocations go by consumer, and once gone a
        # later request may place the same consumers here, which a second
        # undo of this request (its worker gave up, then its parent's
        # cancel came) must leave alone.
        pool = ledger.take_parts(conn, request_id, (shared.POOL, shared.POOL_DONE),
                                 attempt)
        pooled = {c for p in pool if p.child == shared.POOL for c in p.consumers}
        # Confirmed pool parts are permanent allocations of this request:
        # they go too (no other request can hold these consumers while
        # they exist: a zone claims only consumers that have none).
        permanent = {c for p in pool if p.child == shared.POOL_DONE
                     for c in p.consumers}
        if placed:
            permanent |= pooled
        held = [h.consumer_uuid
                for h in provisional.of_request(conn, request_id, attempt)]
        gone = provisional.release(conn, held) if held else []
        # Not one released since and made again by another request.
        rest = placed_by(conn, sorted(permanent - set(gone)), request_id)
        if rest:
            claim(conn, [ConsumerClaim(c, {}) for c in rest])
            gone += rest
        return gone

    # -- server groups ---------------------------------------------------------------------

    async def group_members(self, group: str) -> dict[str, Any]:
        """Where the members of server group `group` are in this zone's subtree:
        {"group", "members": [{"consumer", "location", "zone"}], "unreachable":
        [zone paths that could not say]}. Each zone knows the members placed on
        its own providers (and forgets them when they are released); a parent
        asks its children."""
        members: list[dict[str, Any]] = []
        if await self.has_providers():
            own = await run_in_threadpool(self.local.group_members, group)
            members += [{**m, "zone": self.config.name} for m in own]
        kids = await self.children()
        got = await asyncio.gather(*(self._child_members(c, group) for c in kids))
        unreachable: list[str] = []
        for c, answer in zip(kids, got, strict=True):
            if answer is None:
                unreachable.append(c.name)
                continue
            members += [{**m, "zone": f"{self.config.name}/{m['zone']}"}
                        for m in answer["members"]]
            unreachable += [f"{c.name}/{u}" for u in answer["unreachable"]]
        return {"group": group, "members": members, "unreachable": unreachable}

    async def _child_members(self, child: Child, group: str) -> dict[str, Any] | None:
        h = self.health_of(child.name)
        if not h.due():
            return None
        try:
            reply = await self.transport.call(
                child.url, "GET", f"/strato/v1/groups/{quote(group, safe='')}",
                token=child.credential, timeout=self.config.child_timeout)
        except Unreachable as exc:
            h.failed(exc.why, faulty=isinstance(exc, Malformed))
            return None
        if reply.status != 200:
            return None  # an older zone, or an error: its members are unknown
        try:
            return protocol.read_group_members(group, self._own_name(child), reply.body)
        except protocol.Faulty as exc:
            h.failed(f"faulty: {exc.reason}", faulty=True)
            return None

    # -- summary -------------------------------------------------------------------------

    async def has_providers(self, *, fresh: bool = False) -> bool:
        """Whether this zone has providers of its own (looked up at most once a
        second: a zone that only routes to its children pays little for it)."""
        return (await self.own_hosts(fresh=fresh)).has

    async def own_hosts(self, *, fresh: bool = False) -> OwnHosts:
        """Whether this zone has providers of its own, and where (looked up
        at most once a second)."""
        now = time.monotonic()
        if not fresh and self._own is not None and now - self._own[0] < OWN_TTL_S:
            return self._own[1]
        own = await run_in_threadpool(self.local.own_hosts)
        self._own = (now, own)
        return own

    async def own_summary(self) -> dict[str, Any]:
        """This zone's own providers as one pool: the last one computed while
        nothing changed here, else computed in a worker thread."""
        own = self.local.summary_now()
        if own is None:
            own = await run_in_threadpool(self.local.summary)
        return own

    async def summary(self, *, fresh: bool = False, own: dict[str, Any] | None = None,
                      callers: Collection[str] = ()) -> dict[str, Any]:
        """This zone's subtree as one pool. Never waits on a slow child unless
        `fresh`, and then at most the child timeout: a parent probing this
        zone must not see it slow because a zone below it is. LoopDetected
        when it would count one of `callers` (the ids of the zones the request
        passed through): the tree has a cycle."""
        if own is None:
            if not await self.has_providers(fresh=fresh):
                own = summaries.EMPTY
            else:
                own = await self.own_summary()
        kids = await self.children()
        await self.refresh(kids, fresh=fresh,
                           wait=self.config.child_timeout * 0.8 if fresh else 0)
        parts = [own]
        child_rows = []
        unreachable: list[str] = []
        loops: list[str] = []  # those of `unreachable` left out as a cycle's
        # Children whose summaries count a zone counted already (a diamond):
        # merged as maxima, not sums (summaries.merge).
        overlaps: list[str] = []
        overlapping: list[dict[str, Any]] = []
        # The zones counted, each once (a zone whose summary counts this one
        # is never cached: fetch_summary).
        ids = [self.zone_id]
        seen = {self.zone_id}
        for c in kids:
            cached = self.cache.get(c.name)
            h = self.health_of(c.name)
            if cached is not None and h.healthy:
                below_ids = cached.body.get("zone_ids") or []
                if callers and not set(callers).isdisjoint(below_ids):
                    raise errors.LoopDetected(
                        f"the summary of zone {self.config.name!r} counts a zone that asked "
                        f"for it ({protocol.PATH_HEADER}), through its child {c.name!r}: the "
                        "zone tree has a cycle; remove one of the child registrations on it "
                        f"(here: DELETE /strato/v1/children/{c.name})")
                if seen.isdisjoint(below_ids):
                    parts.append(cached.body)
                else:
                    overlaps.append(c.name)
                    overlapping.append(cached.body)
                ids += [z for z in below_ids if z not in seen]
                seen.update(below_ids)
                for key, into in (("unreachable", unreachable), ("loops", loops)):
                    below = cached.body.get(key)
                    if isinstance(below, list):
                        into += [f"{c.name}/{u}" for u in below if isinstance(u, str)]
            elif not h.healthy:
                unreachable.append(c.name)
                if h.looped:
                    loops.append(c.name)
            child_rows.append({"name": c.name, "healthy": h.healthy,
                               "age_s": None if cached is None
                               else round(time.monotonic() - cached.fetched, 3)})
        if overlaps and overlaps != self._overlaps:
            log.warning("children %s count zones counted through another child (a zone "
                        "registered under two of them): their capacity is not added up in "
                        "this zone's summary, only its largest figures", ", ".join(overlaps))
        self._overlaps = overlaps
        # This zone's own providers are never counted by a child (that child
        # would be in a cycle, and not cached): only the children's figures
        # are bounded by an overlapping child's.
        merged = (summaries.merge([own, summaries.merge(parts[1:], overlapping)])
                  if overlapping else summaries.merge(parts))
        # Zones below that could not be asked: a parent must not take "too
        # small" from this summary for a definite "no" while they are away.
        return {"zone": self.config.name, "location_prefix": self.config.location_prefix,
                "tags": list(self.config.tags), "health": "ok", "as_of": summaries.now_iso(),
                **merged, "children": child_rows,
                "unreachable": unreachable[:MAX_UNREACHABLE], "loops": loops[:MAX_UNREACHABLE],
                "overlaps": overlaps[:MAX_UNREACHABLE], "zone_ids": ids[:protocol.MAX_ZONE_IDS]}

    # -- scheduling ----------------------------------------------------------------------

    async def schedule(self, req: ScheduleRequest) -> dict[str, Any]:
        """The answer to a schedule request; raises NoValidPlacement (409, kept
        under the request id), ServiceUnavailable (503, not kept) or another
        StratoError."""
        with trace.span("strato.schedule", consumers=len(req.consumers),
                        request_id=req.request_id, dry_run=req.dry_run, hops=req.hops):
            return await self._schedule(req)

    async def _schedule(self, req: ScheduleRequest) -> dict[str, Any]:
        kids = await self.children()
        if not kids:
            return await self._schedule_here(req)
        # As a zone without children would, before anything is asked or kept.
        await self._check_names(req)
        if req.dry_run:
            self._check_deadline(req, time.time())
            answer, outcomes = await self._place(req, kids, None)
            if answer is None:
                # As the real request: part of the tree not asked is a 503,
                # not a "nothing fits" (nor /explain's 200 saying so).
                down = outage(outcomes)
                if down:
                    raise self._unavailable(req, outcomes, down)
                raise self._refusal(req, outcomes)
            return self._finish_explain(req, answer, outcomes)
        client_id = req.request_id
        with self._placing(req):
            # Also for a parent's request: a consumer a client placed here
            # directly is not the parent's to know of.
            await self._refuse_placed(req)
            look = False  # a new id is the common case: its reservation tells
            while True:
                begun = await self._begin(req, look=look)
                look = True
                if isinstance(begun, dict):
                    return begun
                attempt, sub = begun
                if req.hops == 0:
                    # (A parent's retries come under new part ids: no earlier
                    # try has this one.)
                    await self._settle_earlier(attempt, kids)
                try:
                    return await self._attempt(sub, kids, attempt, client_id)
                except _Duplicate:
                    continue  # another request took the id first: wait for its answer
                finally:
                    if self._open.get(attempt.request_id) is attempt and not attempt.dropping:
                        # Left by an error: what it asked for goes (its id is
                        # held until then).
                        self.spawn(self._drop_pending(attempt))

    async def _check_names(self, req: ScheduleRequest) -> None:
        """400 for a class or trait neither this zone's registry nor (looked at
        only then) its children's summaries know."""
        def check(also_classes: set[str], also_traits: set[str]) -> None:
            self.local.check_names(req, also_classes=also_classes, also_traits=also_traits)
        try:
            if self.local.plans_inline:
                check(set(), set())
            else:
                await run_in_threadpool(check, set(), set())
        except errors.BadRequest:
            def seen() -> tuple[set[str], set[str]]:
                classes: set[str] = set()
                traits: set[str] = set()
                for cached in self.cache.values():
                    classes.update(cached.body.get("classes", {}))
                    traits.update(cached.body.get("traits", []))
                return classes, traits
            try:
                await run_in_threadpool(check, *seen())
            except errors.BadRequest:
                # A name a cell made since its last summary: ask the children
                # (a round shared with other requests waiting for one, and
                # rationed) before the 400.
                if not await self.learn_names():
                    raise
                await run_in_threadpool(check, *seen())

    @contextmanager
    def _placing(self, req: ScheduleRequest) -> Iterator[None]:
        """The request's consumers, while it places them through this zone: a
        request with another id (or none) for one of them meanwhile is a 409
        (each child checks only its own consumers; two requests could else
        place one consumer in two zones). The same id is the ledger's to
        settle: it waits for the first, or replays it. A parent's tries of
        one request come with new part ids while an earlier one may still run
        here (the parent settles them): they count as one request, and as
        another than a client's request sent here directly (which the parent
        cannot know of) with any id."""
        mine: list[str] = []
        key = (("parent", part_origin(req.request_id)) if req.hops > 0
               and req.request_id is not None else ("client", req.request_id))
        try:
            for c in req.consumers:
                other = self._in_flight.get(c)
                if other is not None and (other[0][1] is None or other[0] != key):
                    raise errors.Conflict(
                        f"consumer generation conflict - consumer {c} is being placed by "
                        "another request (a schedule request places new consumers only)",
                        errors.CONCURRENT_UPDATE)
                if other is None:
                    self._in_flight[c] = (key, id(req))
                    mine.append(c)
            yield
        finally:
            for c in mine:
                self._in_flight.pop(c, None)

    @contextmanager
    def writing(self, consumers: Sequence[str]) -> Iterator[None]:
        """An allocations write through this zone (the Placement routes, with
        the consumers' write lock held) gives `consumers` allocations: a
        schedule request placing one of them meanwhile is a 409, and so is
        the write while one is being placed (the write looks for them below
        first, where one still being placed is not yet; both were made, in
        two zones)."""
        mine: list[str] = []
        key = (WRITE, None)
        try:
            for c in consumers:
                if c in self._in_flight:
                    raise errors.Conflict(
                        f"consumer generation conflict - consumer {c} is being placed by a "
                        "schedule request through this zone", errors.CONCURRENT_UPDATE)
                self._in_flight[c] = (key, 0)
                mine.append(c)
            yield
        finally:
            for c in mine:
                self._in_flight.pop(c, None)

    async def _refuse_placed(self, req: ScheduleRequest) -> None:
        """409 for a consumer this zone placed below before and that is still
        there (a schedule request places new consumers only; a child checks
        only its own). Only consumers this zone knows of are looked for (its
        consumer index: no lookup on a new consumer's path), and not for a
        request id the ledger knows (its answer is replayed)."""
        known = [c for c in req.consumers if self.consumer_zones.get(c) is not None]
        if not known:
            return
        if req.request_id is not None and await self._read(
                partial(ledger.lookup, request_id=req.request_id)) is not None:
            return
        for c in known:
            try:
                found = await subtree.find_consumer(self, c)
            except errors.ServiceUnavailable:
                continue  # its zone cannot say: not refused on a guess
            if found is not None:
                raise errors.Conflict(
                    f"consumer generation conflict - consumer {c} already has allocations "
                    f"in zone {found.child.name} (a schedule request places new consumers "
                    "only)", errors.CONCURRENT_UPDATE)

    async def _attempt(self, req: ScheduleRequest, kids: Sequence[Child], attempt: Attempt,
                       client_id: str | None) -> dict[str, Any]:
        try:
            answer, outcomes = await self._place(req, kids, attempt)
        except _Duplicate:
            raise  # nothing done yet: the id's first request answers
        except BaseException:
            # A request the children call invalid, or this task cancelled:
            # nothing of it may stay, and a retry works afresh.
            await asyncio.shield(self._give_up(attempt))
            raise
        if answer is None:
            down = outage(outcomes)
            if not down:
                down = await self._leftovers(attempt, req.consumers, kids)
                outcomes += down
            if down:
                if not attempt.reserved and not attempt.pending and (
                        self._held_by_another(attempt)
                        or await self._lookup(attempt.request_id) is not None):
                    raise _Duplicate()  # the id is known: its answer, not an outage
                await self._give_up(attempt)
                raise self._unavailable(req, outcomes, down)
            refusal = self._refusal(req, outcomes)
            await self._final(attempt, State.REFUSED,
                              {"detail": refusal.detail, "explain": refusal.explain})
            raise refusal
        answer = self._finish_explain(req, answer, outcomes)
        answer["request_id"] = client_id
        if attempt.remaining() <= 0:
            await self._give_up(attempt, placed=True)
            raise errors.ServiceUnavailable(
                f"request {attempt.request_id}: its deadline passed before it was placed; "
                "what it claimed was undone", retry_after=0.0)
        await self._final(attempt, State.PLACED, answer)
        return await self._with_summary(req, answer)

    async def _leftovers(self, attempt: Attempt, consumers: Sequence[str],
                         kids: Sequence[Child]) -> list[Outcome]:
        """The children where an earlier try of the request left a part in doubt
        (see `_earlier`): until it is cancelled there, what it placed takes room
        the request may need, so a refusal now is no answer (an outage of that
        try)."""
        found = {p.child for p in await self._earlier(attempt, consumers,
                                                      [c.name for c in kids])}
        # This zone restarted and has not listed them yet (zone/sweep.py): a
        # part its earlier process asked for and lost the record of (this
        # request's own, retried) may hold room there until it is cancelled.
        unswept = (set() if self._sweep is None else
                   {n for n in self._sweep.children if n not in self.swept_until} - found)
        return [Outcome(c.name, Result.IN_DOUBT, "an earlier try of this request may "
                        "still hold room there: it is cancelled when the zone answers again")
                for c in kids if c.name in found] + [
                Outcome(c.name, Result.IN_DOUBT, "this zone restarted and has not asked it "
                        "yet for the parts it lost the record of, which may hold room there")
                for c in kids if c.name in unswept]

    async def _earlier(self, attempt: Attempt, consumers: Sequence[str],
                       children: Sequence[str]) -> list[in_doubt.InDoubt]:
        """The parts in doubt at `children` that an earlier try of `attempt`'s
        request may have left: recorded under its id, or holding one of its
        `consumers` (a try that came from a parent under another part id)."""
        if self._doubtful is not None and not self._doubtful.intersection(children):
            return []  # nothing in doubt there: the usual case, no read
        return await self._read(partial(in_doubt.earlier_tries,
                                        request_id=attempt.request_id,
                                        consumers=consumers, children=children))

    async def _settle_earlier(self, attempt: Attempt, kids: Sequence[Child]) -> None:
        """Before a client's request is tried again, cancel what its earlier
        tries left in doubt at the children that answer: the consumers they may
        hold there would make the new try's claim a conflict (placement.
        concurrent_update) and the room they take a refusal. What cannot be
        cancelled now stays in doubt (the retry is then a 503 where it meets
        it); the child's reconcile round tries again."""
        if self._doubtful is not None and not self._doubtful:
            return
        found = await self._read(partial(in_doubt.earlier_tries,
                                         request_id=attempt.request_id))
        if not found:
            return
        # A failed child whose probe is due is probed first (briefly): one
        # that answers again gets the cancel now.
        await self._refresh_due([c for c in kids if c.name in {r.child for r in found}])
        timeout = min(self.config.child_timeout,
                      max(MIN_CANCEL_S, SETTLE_SHARE * attempt.remaining()))
        await self._settle(found, kids, timeout)

    async def _settle(self, rows: Sequence[in_doubt.InDoubt], kids: Sequence[Child],
                      timeout: float) -> None:
        """Cancel the parts in doubt `rows` at their children, at once, where
        the child is healthy (one that failed is left to its probe and the
        reconcile round: a request does not wait on a zone likely down)."""
        by_name = {c.name: c for c in kids}

        async def one(row: in_doubt.InDoubt) -> None:
            child = by_name.get(row.child)
            if child is None or not self.health_of(row.child).healthy:
                return
            await self._settle_row(child, row, timeout)
        await asyncio.gather(*(one(r) for r in rows))
        await self.in_doubt_counts()

    async def _final(self, attempt: Attempt, state: State, body: dict[str, Any]) -> None:
        """Write the attempt's answer, once, over its reservation (made now if no
        part needed one). A cancel that came first wins: the work is undone."""
        rid = attempt.request_id
        pending = list(attempt.pending)

        def job(conn: Connection) -> bool | None:
            if not attempt.reserved:
                # Its id, parts and answer in one go.
                return ledger.reserve(conn, rid, attempt.deadline, attempt.token,
                                      answer=(state, body), parts=pending) or None
            return ledger.finish(conn, rid, state, body, only_placing=True,
                                 attempt=attempt.token)
        if attempt.cancelled or (not attempt.reserved and self._held_by_another(attempt)):
            kept: bool | None = None  # its cancel's tombstone, or another, has the id
        else:
            kept = await self._write(job, now=True)
        if kept is None:
            # Another has the id (a cancel came first): what was asked of
            # children goes, and the id's answer is replayed.
            await self._drop_pending(attempt)
            raise _Duplicate()
        attempt.reserved = True
        attempt.pending.clear()
        self._close(attempt)
        if not kept:
            lost = await self._lost(attempt)
            if state == State.PLACED:
                await self.undo(rid, placed=True, attempt=attempt.token,
                                deadline=attempt.deadline, skip=attempt.hung)
            raise lost

    async def _schedule_here(self, req: ScheduleRequest) -> dict[str, Any]:
        """A zone without children: its own providers (the store's claim
        transaction reserves the request id)."""
        req, relaxed = split.in_one_zone(req)
        if relaxed:
            answer = await self._schedule_here(req)
            return {**answer, "relaxed": [*relaxed, *answer.get("relaxed", [])]}
        try:
            if self.local.plans_inline:
                only = await self.local.schedule_with_summary_async(req)
            else:
                async with self._local_gate:
                    only = await run_in_threadpool(self.local.schedule_with_summary, req)
        except NoValidPlacement as exc:
            await run_in_threadpool(self.local.record_failure, req, exc)
            raise
        own = only.pop("own_summary", None)
        if own is None:
            return only
        return {**only, "zone_summary": await self.summary(own=own)}

    async def _begin(self, req: ScheduleRequest, *, look: bool = True
                     ) -> tuple[Attempt, ScheduleRequest] | dict[str, Any]:
        """(the attempt, the request with its id and deadline), or the answer of
        an earlier request with the same id (waited for while it is at work,
        here in memory or in the ledger). Reads only: the id is held with the
        attempt's first part (`_note_part`, `_reserve`) or with its answer.
        Without `look` nothing is read: a known id then fails to be held, and
        the caller begins again with `look`."""
        now = time.time()
        self._check_deadline(req, now)
        deadline = now + self.config.request_timeout
        if req.deadline is not None:
            deadline = min(deadline, req.deadline)
        fresh = req.request_id is None
        rid = req.request_id or f"auto-{uuid.uuid4().hex}"
        wait_until = min(deadline, now + DUPLICATE_WAIT_S)
        while look and not fresh:
            entry = (ledger.Entry(rid, State.PLACING, {}, None) if rid in self._open
                     else await self._lookup(rid))
            if entry is None:
                break
            if entry.state in ledger.FINAL:
                if self.config.ledger_commit != "async":
                    # Its writer may still be waiting for the disk (`_write`):
                    # nobody is told an answer a machine crash could take back.
                    await self._durable()
                return _replay(entry)
            if time.time() >= wait_until:
                raise errors.Conflict(
                    f"request_id {rid} is being worked on by an earlier request with the "
                    "same id; retry with the same id to get its answer",
                    errors.REQUEST_IN_PROGRESS)
            await asyncio.sleep(0.05)
        return (Attempt(rid, deadline, fresh=fresh),
                req.model_copy(update={"request_id": rid, "deadline": deadline}))

    def _check_deadline(self, req: ScheduleRequest, now: float) -> None:
        """503 for a request (a dry run too) whose deadline has passed."""
        if req.deadline is not None and req.deadline <= now:
            raise errors.ServiceUnavailable(
                "the request's deadline had passed when it reached zone "
                f"{self.config.name}: nothing was done", retry_after=0.0)

    async def record_part(self, attempt: Attempt, child: str, pid: str,
                          consumers: Sequence[str], *, durable: bool = True) -> None:
        """Record a part before it is asked for; the attempt's first part also
        reserves its id (raises _Duplicate if another request has it). A part is
        recorded only while the attempt still holds the reservation: once it was
        cancelled (or abandoned by recovery), nothing more is asked for.

        Not `durable`: without waiting for the disk. For a part a child holds
        under its part id (a schedule call) or one this zone's own database
        holds: one lost with the machine is found and cancelled at start-up
        (zone/sweep.py), and the answer's durable commit takes every record
        before it to the disk."""
        rid, token = attempt.request_id, attempt.token
        if attempt.reserved:
            if not await self._write(lambda conn: ledger.add_part(conn, rid, child, pid,
                                                                  consumers, token),
                                     now=True, durable=durable):
                raise await self._lost(attempt)
            return
        await self._reserve(attempt, [ledger.Part(child, pid, tuple(consumers), token)],
                            durable=durable)

    async def _reserve(self, attempt: Attempt, parts: Sequence[ledger.Part], *,
                       durable: bool = True) -> None:
        """Reserve the attempt's id in the ledger with `parts` and those it held
        in memory so far (raises _Duplicate, having undone those, if another
        request has the id)."""
        rid, token = attempt.request_id, attempt.token
        if attempt.cancelled or self._held_by_another(attempt):
            await self._drop_pending(attempt)
            raise _Duplicate()  # its cancel's tombstone, or another request, has the id
        every = [*attempt.pending, *parts]

        def job(conn: Connection) -> bool:
            if not ledger.reserve(conn, rid, attempt.deadline, token):
                return False
            ledger.add_parts(conn, rid, every, token)
            return True
        if not await self._write(job, now=True, durable=durable):
            await self._drop_pending(attempt)
            raise _Duplicate()
        attempt.reserved = True
        attempt.pending.clear()
        self._close(attempt)

    async def _note_part(self, attempt: Attempt, child: str, pid: str,
                         consumers: Sequence[str]) -> None:
        """Hold a part asked of a child in memory, and with the first one the
        attempt's id (raises _Duplicate if another request has it, here or in
        the ledger): the answer's commit writes them (one commit a request at
        a routing zone, not two). A process that dies first takes them along:
        its start-up sweep (zone/sweep.py) cancels what the children hold of
        them, and until then a cancel of their request is not confirmed."""
        rid = attempt.request_id
        if attempt.cancelled:
            raise _cancelled(rid)
        if self._open.get(rid) is not attempt:
            if rid in self._open or (not attempt.fresh
                                     and await self._lookup(rid) is not None):
                raise _Duplicate()
            if rid in self._open:  # taken while the ledger was read
                raise _Duplicate()
            self._open[rid] = attempt
        attempt.pending.append(ledger.Part(child, pid, tuple(consumers), attempt.token))

    def _check_owners(self, child: str, answer: Mapping[str, Any]) -> None:
        """Faulty: `child`'s answer places on a provider this zone knows to be
        another's (its own, or one its routing table has from another child's
        listing): a placement there was claimed by nobody, and a client
        acting on it would overcommit that host."""
        own = self.local.engine.index.pos
        for i, p in enumerate(answer.get("placements", [])):
            for rp in p.get("allocations", {}):
                owner = self.config.name if rp in own else self.provider_zones.get(rp)
                if owner is not None and owner != child and not self._overlap(owner, child):
                    raise protocol.Faulty(
                        f"schedule answer: placements.{i}.allocations: provider {rp} is "
                        f"zone {owner!r}'s, not {child!r}'s")

    def _overlap(self, a: str, b: str) -> bool:
        """Children `a` and `b` count a zone in common (one registered under
        both, a diamond): a provider may be listed through either."""
        ids = []
        for name in (a, b):
            cached = self.cache.get(name)
            below = cached.body.get("zone_ids") if cached is not None else None
            ids.append(set(below) if isinstance(below, list) else set())
        return not ids[0].isdisjoint(ids[1])

    def _held_by_another(self, attempt: Attempt) -> bool:
        """Another attempt holds `attempt`'s id in memory (its first part is
        being asked for): this one waits for its answer, as for a reservation
        in the ledger."""
        other = self._open.get(attempt.request_id)
        return other is not None and other is not attempt

    def _close(self, attempt: Attempt) -> None:
        """The attempt's id is no longer held in memory (in the ledger, or given up)."""
        if self._open.get(attempt.request_id) is attempt:
            del self._open[attempt.request_id]

    async def _drop_pending(self, attempt: Attempt) -> None:
        """Undo the parts `attempt` holds in memory only, and let its id go."""
        if attempt.dropping:
            return
        attempt.dropping = True
        rid, token, pending = attempt.request_id, attempt.token, list(attempt.pending)
        try:
            if pending:
                await self.undo(rid, placed=True, attempt=token, deadline=attempt.deadline,
                                skip=attempt.hung, pending=pending, in_ledger=False)
                # Kept without a reservation, as those of a try given back are
                # (ledger.give_back): a later cancel of the request finds them.
                await self._write(lambda conn: ledger.add_parts(conn, rid, pending, token),
                                  durable=False)
        finally:
            attempt.pending.clear()
            self._close(attempt)

    async def _lookup(self, rid: str) -> ledger.Entry | None:
        """The ledger's entry for `rid`: read at once on the event loop where
        that costs no wait, else in a worker thread."""
        done, entry = self.db.read_now(partial(ledger.lookup, request_id=rid))
        if done:
            return entry
        return await self._read(partial(ledger.lookup, request_id=rid))

    async def _lost(self, attempt: Attempt) -> errors.StratoError:
        """Why `attempt` no longer holds its reservation, as the error to answer."""
        entry = await self._read(partial(ledger.lookup, request_id=attempt.request_id))
        if entry is not None and entry.state == State.CANCELLED:
            return _cancelled(attempt.request_id)
        return errors.ServiceUnavailable(
            f"request {attempt.request_id}: its time ran out and it was undone; retry",
            retry_after=0.0)

    async def give_up(self, attempt: Attempt) -> None:
        """Undo what `attempt` made and give its id back (zone/writes.py)."""
        await self._give_up(attempt)

    async def final(self, attempt: Attempt, state: State, body: dict[str, Any]) -> None:
        """Write `attempt`'s answer over its reservation (zone/writes.py)."""
        await self._final(attempt, state, body)

    async def _give_up(self, attempt: Attempt, *, placed: bool = False) -> None:
        """No answer for this attempt: undo what it made, then give the id back
        (only if the undo went through: otherwise recovery finds the request
        overdue and undoes it again)."""
        if not attempt.reserved:
            # Nothing in the ledger: what it asked of children is in memory.
            await self._drop_pending(attempt)
            return
        await self.undo(attempt.request_id, placed=placed, attempt=attempt.token,
                        deadline=attempt.deadline, skip=attempt.hung)
        await self._write(lambda conn: ledger.give_back(conn, attempt.request_id,
                                                        attempt.token))

    async def _place(self, req: ScheduleRequest, kids: Sequence[Child],
                     attempt: Attempt | None) -> tuple[dict[str, Any] | None, list[Outcome]]:
        """Place `req` here or below: (the answer or None, what each zone said)."""
        answer, outcomes = await self._place_first(req, kids, attempt)
        if answer is not None:
            answer = split.relax_scattered_own(req, answer)
        return answer, outcomes

    async def _place_first(self, req: ScheduleRequest, kids: Sequence[Child],
                           attempt: Attempt | None
                           ) -> tuple[dict[str, Any] | None, list[Outcome]]:
        """`_place`'s work.
        Soft rules are tried as hard ones first (`split.soft_first`), as one
        zone tries its perfect matches first: one instance is asked so first;
        several, when a plan says every instance fits so (a child relaxes a
        rule its hosts or its share cannot keep, where another child or
        another division keeps it). Then as they are."""
        first = split.soft_first(req, kids)
        if first and len(req.consumers) == 1:
            strict = split.hardened(req, first)
            answer, outcomes = await self._place_kept(strict, kids, attempt)
            if answer is not None:
                return answer, outcomes
        elif first:
            strict = split.hardened(req, first)
            plan, _ = await self._place_kept(
                strict.model_copy(update={"dry_run": True, "request_id": None}), kids, None)
            if plan is not None and not plan.get("unplaced"):
                if req.dry_run or attempt is None:
                    return plan, _
                answer, outcomes = await self._place_kept(strict, kids, attempt)
                if answer is not None and not answer.get("unplaced"):
                    return answer, outcomes
                if answer is not None:
                    # atomic=false, short of the plan (lost races): the rest
                    # as they come, the rule as it is.
                    rest = req.model_copy(update={"consumers": list(answer["unplaced"])})
                    more, extra = await self._place_kept(rest, kids, attempt)
                    outcomes += extra
                    return (split.combine(answer, more) if more is not None else answer,
                            outcomes)
        if len(req.consumers) > 1 and (split.kept_apart(req, kids)
                                       or split.deep_spreads(req, kids)):
            # A soft anti-affinity below the children that cannot be kept
            # (the plan above fell short), or a spread below them: divided as
            # the children's domains with room are when the instances
            # outnumber any one child's, so that the rule gives as little as
            # in one zone with these hosts, where one child would pile every
            # instance on its few domains.
            answer, outcomes = await self._place_kept(req, kids, attempt, even=True)
            if answer is not None:
                return answer, outcomes
        return await self._place_kept(req, kids, attempt)

    async def _place_kept(self, req: ScheduleRequest, kids: Sequence[Child],
                          attempt: Attempt | None, *, even: bool = False
                          ) -> tuple[dict[str, Any] | None, list[Outcome]]:
        """`_place`, every rule as the request says; `even`: divided as the
        children's domains are (`split.schedule_across`), or not at all."""
        wide = split.wide_rules(req, kids)
        deep = split.deep_affinity(req, kids)
        own = await self.own_hosts()
        # Hard anti-affinity below the children where two of them (or one and
        # this zone's own hosts) may share a domain: neither sees the other's
        # members (children one site each never share a room).
        places = [*(k.location_prefix for k in kids), *([own.where] if own.has else [])]
        apart = [(i, r) for i, r in split.deep_apart(req, kids)
                 if any(not split.separated(a, b, r.level)
                        for n, a in enumerate(places) for b in places[n + 1:])]
        groups = split.rule_groups(req, [*wide, *deep, *apart])
        if not groups and not any(r.hard for _, r in wide):
            # No rule about a group's members, none above a child that must
            # hold: only the request's own instances count.
            return await self._place_in(req, kids, attempt, None, even=even)
        # Rules above a child are this zone's to keep, soft ones too: one
        # request per group at a time reads where the group's members are,
        # and places new ones.
        async with self._group_locks.hold(groups):
            found = {}
            for g in groups:
                found[g] = await self.group_members(g)
            occ, unknown = split.occupancy(req, kids, wide, found)
            first: list[Outcome] = []
            every = list(kids)
            kids = split.allowed(req, kids, wide, occ, unknown, first)
            kids, following = split.follow(req, kids, deep, found, first)
            kids, own_ok = split.keep_apart(req, kids, apart, found,
                                            own if own.has else None, first)
            local = following.own and own_ok
            steered = list(kids)
            if local and own.has:
                why = split.own_excluded(req, wide, occ, found, unknown)
                mine = await self.own_child()
                if why is not None:
                    first.append(Outcome(LOCAL, Result.PRUNED, why))
                    local = False
                elif split.takes_part(mine, wide):
                    # Their hosts are all in one domain of each rule (a
                    # room of their own beside the children's): that
                    # domain's members count, wherever they are below here.
                    local = bool(split.allowed(req, [mine], wide, occ, unknown, first,
                                               every=every))
                    steered = [mine, *kids] if local else steered
            # One instance: the children that keep the soft rules above them
            # are asked first; any number: those that hold the members a soft
            # affinity below them follows.
            penalty = split.penalties(req, steered, wide, occ)
            if following.penalty:
                penalty = {name: (penalty or {}).get(name, 0.0) + following.penalty.get(name, 0.0)
                           for name in [*(k.name for k in kids), LOCAL]}
            answer, outcomes = await self._place_in(req, kids, attempt, occ, penalty,
                                                    local=local, even=even)
            if answer is not None:
                answer = split.relax_scattered(req, wide, occ, answer)
                answer = split.relax_unfollowed(req, deep, following, answer)
                if penalty:
                    answer = split.relax_missed(req, steered, wide, occ, answer)
            return answer, first + outcomes

    async def _place_in(self, req: ScheduleRequest, kids: Sequence[Child],
                        attempt: Attempt | None, occ: split.Occupancy | None,
                        penalty: Mapping[str, float] | None = None, *, local: bool = True,
                        even: bool = False
                        ) -> tuple[dict[str, Any] | None, list[Outcome]]:
        """`local`: this zone's own providers may take it (or a share of it);
        `even`: divided (see `_place_kept`), or not at all."""
        await self._refresh_due(kids)
        outcomes: list[Outcome] = []
        answer = None
        if attempt is not None and shared.shared_classes(self, req):
            answer = await shared.schedule_split(self, req, attempt, outcomes, kids, occ)
        divide = even or split.must_split(req, kids)
        if answer is None and not divide:
            answer = await self._decide(req, kids, outcomes, attempt, local=local,
                                        penalty=penalty)
            if answer is not None:
                answer = split.relax_undivided(req, kids, answer)
        pruned = [c for c in kids if any(o.zone == c.name and o.outcome == Result.PRUNED
                                         for o in outcomes)]
        if answer is None and pruned and not divide:
            # Summaries are hints and may be stale: before giving up, look again
            # at the children they pruned (widen), with fresh summaries.
            wait = min(self.config.child_timeout,
                       attempt.remaining() * 0.5 if attempt else self.config.child_timeout)
            await self.refresh(pruned, fresh=True, wait=max(0.0, wait))
            retry: list[Outcome] = []
            answer = await self._decide(req, pruned, retry, attempt, local=False,
                                        penalty=penalty)
            # What was said of the others (this zone's own providers among
            # them) stands: only the children looked at again are replaced.
            again = {c.name for c in pruned}
            outcomes = [o for o in outcomes
                        if not (o.outcome == Result.PRUNED and o.zone in again)] + retry
        if answer is None and len(req.consumers) > 1 and not outage(outcomes):
            # No child takes it whole: divide it among several (zone/split.py),
            # this zone's own providers among them.
            own = await self.own_child() if local and await self.has_providers() else None
            if divide or own is not None or len(kids) > 1:
                # (One child that refused it whole would refuse it divided:
                # its answer is the answer, said once.)
                answer = await split.schedule_across(self, req, kids, outcomes, attempt, occ,
                                                     own, even=even)
        elif answer is not None and not req.atomic and answer.get("unplaced"):
            answer = await self._place_rest(req, kids, answer, outcomes, attempt, occ,
                                            own=local)
        return answer, outcomes

    async def _place_rest(self, req: ScheduleRequest, kids: Sequence[Child],
                          answer: dict[str, Any], outcomes: list[Outcome],
                          attempt: Attempt | None, occ: split.Occupancy | None, *,
                          own: bool = True) -> dict[str, Any]:
        """atomic=false: what one child left unplaced, asked of the others (and
        of this zone's own providers, with `own`)."""
        took = {str(p["zone"]).split("/")[1] for p in answer["placements"]
                if "/" in str(p["zone"])}
        others = [c for c in kids if c.name not in took]
        rest = req.model_copy(update={"consumers": list(answer["unplaced"])})
        wide = split.wide_rules(req, kids)
        # This zone's own providers too, unless they placed part of it already
        # or a rule above the children applies that they are not one domain of.
        here = (own and not shared.local_consumers(answer) and await self.has_providers()
                and split.takes_part(mine := await self.own_child(), wide))
        if occ is not None and wide:
            # What was just placed counts against the rules, as the members before.
            split.add_placements(occ, req, kids, wide, answer["placements"])
            others = split.allowed(req, others, wide, occ, set(), outcomes)
            here = here and bool(split.allowed(req, [mine], wide, occ, set(), outcomes))
        if not others and not here:
            return answer
        if any(r.hard for _, r in split.kept_together(req, kids)):
            return answer  # the rest elsewhere would not be with these instances
        placed_in = [c for c in kids if c.name in took]
        if shared.local_consumers(answer):
            placed_in.append(await self.own_child())
        if split.apart_unsafe(req, kids, [*placed_in, *others,
                                          *([await self.own_child()] if here else [])]):
            return answer  # the rest elsewhere could share a domain with these
        more = await self._decide(rest, others, outcomes, attempt, local=here)
        if more is None and len(rest.consumers) > 1:
            more = await split.schedule_across(self, rest, others, outcomes, attempt, occ,
                                               await self.own_child() if here else None)
        if more is None:
            return answer
        if more.get("placements"):
            answer = split.relax_together(req, kids, answer)
        if more.get("unplaced") and len(more["placements"]):
            # Own providers that placed part already (in `answer`, or in `more`)
            # are not asked again: a dry run has not filled them.
            more = await self._place_rest(rest, others, more, outcomes, attempt, occ,
                                          own=here)
        return split.combine(answer, more)

    async def _refresh_due(self, kids: Sequence[Child]) -> None:
        """Fetch due summaries in the background; a request waits only for
        children it has never seen a summary of (briefly), and for the probe of
        a failed child that is due one (very briefly: one that answers again
        is asked at once, one still hung costs the request PROBE_WAIT_S)."""
        first = [self._refresh_one(c) for c in kids if self._stale(c)
                 and c.name not in self.cache and self.health_of(c.name).healthy]
        probes = [self._refresh_one(c) for c in kids
                  if not self.health_of(c.name).healthy and self.health_of(c.name).due()]
        for c in kids:
            if self._stale(c):
                self._refresh_one(c)
        if first:
            await asyncio.wait(first, timeout=PROBE_TIMEOUT_S)
        if probes:
            await asyncio.wait(probes, timeout=PROBE_WAIT_S)

    def _refusal(self, req: ScheduleRequest, outcomes: list[Outcome]) -> NoValidPlacement:
        explain = self._explain(outcomes)
        return NoValidPlacement(
            f"no valid placement for {len(req.consumers)} consumer(s) under zone "
            f"{self.config.name}: {explain['summary']}", explain)

    def _unavailable(self, req: ScheduleRequest, outcomes: list[Outcome],
                     down: list[Outcome]) -> errors.ServiceUnavailable:
        names = ", ".join(sorted({o.zone for o in down}))
        waits = [self.health_of(o.zone).retry_after() for o in down if o.zone]
        if all(o.outcome == Result.LOOP for o in down):
            # Not a passing outage: say what it is, and where.
            return errors.LoopBelow(
                f"no placement for {len(req.consumers)} consumer(s) under zone "
                f"{self.config.name}: the zone tree has a cycle below it ("
                + "; ".join(f"{o.zone}: {o.reason}" for o in down)
                + "); nothing was claimed", retry_after=max([1.0, *waits]),
                explain=self._explain(outcomes))
        return errors.ServiceUnavailable(
            f"no placement for {len(req.consumers)} consumer(s) under zone "
            f"{self.config.name}, and part of the tree could not be asked ({names}); "
            "nothing was claimed: retry", retry_after=max([1.0, *waits]),
            explain=self._explain(outcomes))

    def _explain(self, outcomes: list[Outcome]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "zone": self.config.name,
            "summary": "; ".join(f"{o.zone or 'own providers'}: {o.reason}"
                                 for o in outcomes) or "no zone to ask",
            "children": [o.as_dict() for o in outcomes]}
        # A rule above the children that no division could keep: said first,
        # as `cause`, as a zone without children says what its rules need.
        causes = [str(o.explain["cause"]) for o in outcomes
                  if o.zone == split.DIVIDED and o.explain and o.explain.get("cause")]
        if causes:
            out["cause"] = causes[-1]
            out["summary"] = f"{causes[-1]}; {out['summary']}"
        return out

    def _finish_explain(self, req: ScheduleRequest, answer: dict[str, Any],
                        outcomes: list[Outcome]) -> dict[str, Any]:
        if req.explain:
            answer["explain"] = {"zone": self.config.name, "placed_by": answer.get("explain"),
                                 "children": [o.as_dict() for o in outcomes]}
        return answer

    async def _with_summary(self, req: ScheduleRequest, answer: dict[str, Any]
                            ) -> dict[str, Any]:
        """A parent asked (hops > 0) and capacity moved: send our summary along."""
        if req.hops == 0 or req.dry_run:
            return answer
        return {**answer, "zone_summary": await self.summary()}

    async def decide_children(self, req: ScheduleRequest, attempt: Attempt,
                              outcomes: list[Outcome], kids: Sequence[Child] | None = None,
                              occ: split.Occupancy | None = None) -> dict[str, Any] | None:
        """Place `req` in the children only (not this zone's own providers): in
        one, or divided among several when none takes it whole or a rule above
        them says so (the shares held as `req` says: its caller confirms them)."""
        if kids is None:
            kids = await self.children()
        answer = None
        divide = split.must_split(req, kids)
        if not divide:
            answer = await self._decide(req, kids, outcomes, attempt, local=False)
        if (answer is None and len(req.consumers) > 1 and not outage(outcomes)
                and (divide or len(kids) > 1)):
            answer = await split.schedule_across(self, req, kids, outcomes, attempt, occ)
        elif answer is not None and not req.atomic and answer.get("unplaced"):
            answer = await self._place_rest(req, kids, answer, outcomes, attempt, occ,
                                            own=False)
        return answer

    async def _decide(self, req: ScheduleRequest, kids: Sequence[Child],
                      outcomes: list[Outcome], attempt: Attempt | None, *,
                      local: bool = True, penalty: Mapping[str, float] | None = None
                      ) -> dict[str, Any] | None:
        """The best of the options that place `req`; with `penalty` (child name
        -> weight of the soft rules it would break), those with the least
        first, in tiers."""
        options = await self._options(req, kids, outcomes, local=local)
        soft = await self._soft_penalties(req, options)
        tiers: dict[float, list[tuple[float, str, Child | None]]] = {}
        for o in options:
            tiers.setdefault((penalty or {}).get(o[1], 0.0) + soft.get(o[1], 0.0),
                             []).append(o)
        ranked = [tiers[p] for p in sorted(tiers)]
        for n, tier in enumerate(ranked):
            last = n == len(ranked) - 1
            got = await (self._best(req, tier, outcomes, attempt) if req.mode == "best"
                         else self._delegate(req, tier, outcomes, attempt, final=last))
            if got is not None:
                return got
        return None

    async def _soft_penalties(self, req: ScheduleRequest,
                              options: Sequence[tuple[float, str, Child | None]]
                              ) -> dict[str, float]:
        """Per option, the weight of the soft location and tags rules it cannot
        keep (its location prefix, tags, summary say so): asked after those
        that may keep them."""
        if all(c.hard or isinstance(c, SpreadRuleSpec) for c in req.constraints):
            return {}
        out: dict[str, float] = {}
        for _, name, child in options:
            if child is None:
                own = await self.own_child()
                out[name] = soft_penalty(req, await self.own_summary(), own.location_prefix,
                                         own.tags)
            else:
                cached = self.cache.get(child.name)
                out[name] = soft_penalty(req, cached.body if cached else None,
                                         child.location_prefix, child.tags)
        return out

    async def _options(self, req: ScheduleRequest, kids: Sequence[Child],
                       outcomes: list[Outcome], *, local: bool = True
                       ) -> list[tuple[float, str, Child | None]]:
        """(predicted fit, name, child) of everything worth asking, best first."""
        scored: list[tuple[float, str, Child | None]] = []
        shape = shape_of(req)
        if local and await self.has_providers():
            own = await self.own_summary()
            why = prune_reason(req, own, None, ())
            if why is None:
                scored.append((predicted_fit(req, own), LOCAL, None))
            else:
                outcomes.append(Outcome(LOCAL, Result.PRUNED, why))
        for c in kids:
            h = self.health_of(c.name)
            cached = self.cache.get(c.name)
            if not h.healthy:
                # Not asked until its probe (the summary fetch `_refresh_due`
                # starts once due, in the background) finds it answering: a
                # request sent to a zone that failed lately would spend its
                # time there. Its metadata may exclude it for good: then it
                # is not missed.
                why = static_reason(req, None, c.location_prefix, c.tags)
                if why is not None:
                    outcomes.append(Outcome(c.name, Result.PRUNED, why))
                elif h.looped:
                    outcomes.append(Outcome(c.name, Result.LOOP, f"skipped: {h.last_error}"))
                else:
                    outcomes.append(Outcome(c.name, Result.UNHEALTHY,
                                            f"skipped: unhealthy ({h.last_error})"))
                continue
            why = prune_reason(req, cached.body if cached else None, c.location_prefix,
                               c.tags)
            if why is not None:
                down = cached.body.get("unreachable") if cached else None
                if down and static_reason(req, None, c.location_prefix, c.tags) is None:
                    # Its summary leaves out zones it cannot reach: "too small"
                    # is not a definite answer while they are away.
                    shown = ", ".join(map(str, down[:5]))
                    if cached and set(down) <= set(cached.body.get("loops") or ()):
                        outcomes.append(Outcome(c.name, Result.LOOP,
                                                f"{why}, and a cycle of the zone tree below "
                                                f"it left out: {shown}"))
                    else:
                        outcomes.append(Outcome(c.name, Result.UNAVAILABLE,
                                                f"{why}, and unreachable below it: {shown}"))
                else:
                    outcomes.append(Outcome(c.name, Result.PRUNED, why))
                continue
            refused = (self.failures.blocks(c.name, shape, cached.body.get("freed"))
                       if cached else None)
            if refused is not None:
                outcomes.append(Outcome(c.name, Result.PRUNED, f"pruned: {REFUSED_BEFORE} "
                                        f"({refused.reason})", refused.explain))
                continue
            fit = predicted_fit(req, cached.body) if cached else 0.0
            scored.append((fit, c.name, c))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return scored

    async def _record(self, attempt: Attempt | None, child: str, req: ScheduleRequest
                      ) -> str | None:
        """A fresh part id for asking `child`, recorded before it is asked."""
        if attempt is None:
            return None
        pid = part_id(attempt.request_id, self.config.name)
        if child != LOCAL and not attempt.reserved:
            await self._note_part(attempt, child, pid, req.consumers)
        else:
            await self.record_part(attempt, child, pid, req.consumers, durable=False)
        return pid

    async def ask(self, child: Child, req: ScheduleRequest, attempt: Attempt | None,
                  share: float = 1.0) -> dict[str, Any] | Outcome:
        """One schedule call to a child (see `_ask`), or to this zone's own
        providers for the child `own_child()`, for zone/split.py."""
        if child.name == LOCAL:
            return await self._run_local(req, attempt)
        return await self._ask(child, req, attempt, share)

    async def own_child(self) -> Child:
        """This zone's own providers as a share of a divided request, located
        where all its hosts are (so a rule whose level they share one domain
        of, a room, takes them as one more domain, as a child cell)."""
        where = (await self.own_hosts()).where
        return Child(name=LOCAL, url="",
                     location_prefix=where or self.config.location_prefix,
                     tags=tuple(self.config.tags), credential=None)

    async def confirm_here(self, consumers: Sequence[str]) -> bool:
        """Confirm holds on this zone's own providers: False if one had expired."""
        def work() -> list[str]:
            with self.db.write() as conn:
                return provisional.confirm(conn, list(consumers))[1]
        return not await run_in_threadpool(work)

    def prefixed(self, answer: dict[str, Any], child: str) -> dict[str, Any]:
        return self._prefixed(answer, child)

    async def reserve(self, attempt: Attempt) -> None:
        """Reserve the attempt's id now (before parts are asked for at once);
        raises _Duplicate if another request has it."""
        if attempt.reserved:
            return
        await self._reserve(attempt, [])

    async def _ask(self, child: Child, req: ScheduleRequest, attempt: Attempt | None,
                   share: float = 1.0) -> dict[str, Any] | Outcome:
        """One schedule call to a child: its answer, or why it failed. `share`:
        of the time left, how much this child may use (less when others may
        have to be asked after it)."""
        h = self.health_of(child.name)
        cap = self.config.child_timeout
        deadline = attempt.child_deadline(cap, share) if attempt else time.time() + cap
        budget = deadline - time.time()
        if budget <= 0.01:
            return Outcome(child.name, Result.TIMEOUT, "not asked: the request's time ran out")
        pid = await self._record(attempt, child.name, req)
        settled_before = self._doubt_settled
        sent_deadline = deadline if attempt else req.deadline
        body = split.for_child(req).model_copy(update={
            "hops": req.hops + 1, "request_id": pid,
            "deadline": None if sent_deadline is None
            else self.their_time(child.name, sent_deadline)})
        try:
            # A little past the child's deadline: an answer it gives at its
            # deadline still arrives (a little: what is past it comes out of
            # the share of time this zone keeps to answer its own caller).
            reply = await self.transport.call(
                child.url, "POST", "/strato/v1/schedule", token=child.credential,
                json=body.model_dump(mode="json", exclude_none=True),
                timeout=budget + min(0.25, budget * 0.1))
        except Unreachable as exc:
            faulty = isinstance(exc, Malformed)
            h.failed(exc.why, faulty=faulty, timed_out=exc.timed_out)
            if exc.timed_out and attempt is not None:
                attempt.hung.add(child.name)
            if exc.maybe_delivered and pid is not None:
                await self.note_in_doubt(child.name, pid, req.consumers, exc.why)
                return Outcome(child.name, Result.FAULTY if faulty else Result.IN_DOUBT,
                               f"{exc.why}; whatever it claimed is cancelled when it "
                               "answers again")
            return Outcome(child.name, Result.FAULTY if faulty else Result.TIMEOUT
                           if exc.timed_out else Result.UNREACHABLE, exc.why)
        h.ok()
        try:
            if reply.status == 200:
                answer = protocol.read_schedule_answer(req, reply.body,
                                                       self._own_name(child))
                self._check_owners(child.name, answer)
                summary = answer.pop("zone_summary", None)
                if summary is not None or not req.dry_run:
                    # A dry run moved nothing there: what is cached stays as
                    # good as it was (marking it stale cost `best` mode a
                    # summary fetch per child asked, per request).
                    self._note_answer(child.name, summary)
                return answer
            if reply.status in (400, 409, 503):
                # Acted on below: an error body must be one.
                protocol.read_error(reply.body)
        except protocol.Faulty as exc:
            return await self._faulty(child, pid, req.consumers, exc.reason)
        err = _error(reply.body)
        code = err.get("code")
        if reply.status == 409 and code == NoValidPlacement.CODE:
            explain = reply.body.get("explain") if isinstance(reply.body, dict) else None
            why = (explain or {}).get("summary", err.get("detail", "no capacity"))
            cached = self.cache.get(child.name)
            if cached is not None:
                self.failures.note(child.name, shape_of(req), cached.body.get("freed"),
                                   Refusal(str(why), explain))
            return Outcome(child.name, Result.NO_VALID_PLACEMENT, str(why), explain)
        if reply.status == 503:
            return Outcome(child.name, Result.UNAVAILABLE,
                           f"part of it is unreachable: {err.get('detail', '')}"[:300],
                           reply.body.get("explain") if isinstance(reply.body, dict) else None)
        if protocol.is_loop(reply.status, reply.body):
            # A cycle through it or below it: its next summary fetch tells.
            self._note_answer(child.name, None)
            return Outcome(child.name, Result.LOOP, f"loop: {err.get('detail', '')}"[:300])
        if reply.status == 409 and code == errors.CONCURRENT_UPDATE and attempt is not None:
            earlier = await self._earlier(attempt, req.consumers, [child.name])
            if earlier:
                # Its consumers may be held there by an earlier try of this
                # request whose part is in doubt (its answer was lost, the
                # cancel has not got through): no definite answer. The child
                # answers: the cancel goes now.
                self.spawn(self._settle(earlier, [child], self.config.child_timeout))
                return Outcome(child.name, Result.IN_DOUBT, "an earlier try of this request "
                               "may still hold its consumers there: it is being cancelled")
            mine = set(req.consumers)
            if any(n > settled_before and name == child.name and mine & consumers
                   for n, name, consumers in self._settled):
                # Such a part was cancelled there while the child answered
                # (the reconcile round, beside this call): the conflict may
                # be with what it held then. No definite answer either.
                return Outcome(child.name, Result.IN_DOUBT, "an earlier try of this request "
                               "held its consumers there until its cancel landed just now")
        if reply.status == 400 or (reply.status == 409
                                   and code == errors.CONCURRENT_UPDATE):
            # The request itself is at fault (bad input, consumer exists):
            # every child would say the same.
            raise _status_error(reply.status, err)
        return Outcome(child.name, Result.ERROR, f"answered {reply.status}: "
                       f"{err.get('detail', '')}"[:300])

    async def _faulty(self, child: Child, pid: str | None, consumers: Sequence[str],
                      reason: str) -> Outcome:
        """`child` answered with something no zone says: its answer is discarded
        and it is marked failed. Whatever it may have claimed under that part is
        cancelled, as for an answer lost on the way."""
        why = f"faulty: {reason}"
        self.health_of(child.name).failed(why, faulty=True)
        log.warning("child %s answered a request faultily: %s", child.name, reason)
        if pid is not None:
            await self.note_in_doubt(child.name, pid, consumers, why)
            return Outcome(child.name, Result.FAULTY, f"{why}; whatever it claimed is "
                           "cancelled when it answers again")
        return Outcome(child.name, Result.FAULTY, why)

    def _own_name(self, child: Child) -> str:
        """The name `child` gives itself (its zone paths start with it): what its
        summary says, else the name it registered under."""
        cached = self.cache.get(child.name)
        return str(cached.body.get("zone", child.name)) if cached else child.name

    def _note_answer(self, name: str, summary: dict[str, Any] | None) -> None:
        """A child answered a claim: its summary comes with the answer (no extra
        round trip; validated with the answer, by zone/protocol.py); without
        one, refresh it at the next request."""
        if summary is not None and not self._covers_this_zone(summary):
            self.cache[name] = Cached(summary, time.monotonic())
            return
        cached = self.cache.get(name)
        if cached is not None:
            cached.fetched = 0.0

    async def _run_local(self, req: ScheduleRequest, attempt: Attempt | None
                         ) -> dict[str, Any] | Outcome:
        """This zone's own providers, under a part id of the request."""
        try:
            # They are one domain of a rule at level `zone`, which their
            # planner does not know (a 400): as at a zone without children.
            req, relaxed = split.in_one_zone(req)
            pid = await self._record(attempt, LOCAL, req)
            if pid is not None:
                req = req.model_copy(update={"request_id": pid})
            if self.local.plans_inline:
                answer = await self.local.schedule_async(req)
            else:
                answer = await run_in_threadpool(self.local.schedule, req)
            if relaxed:
                answer = {**answer, "relaxed": [*relaxed, *answer.get("relaxed", [])]}
            return answer
        except NoValidPlacement as exc:
            return Outcome(LOCAL, Result.NO_VALID_PLACEMENT,
                           exc.explain.get("summary", exc.detail), exc.explain)
        except errors.ServiceUnavailable as exc:
            return Outcome(LOCAL, Result.TIMEOUT, exc.detail)

    async def _delegate(self, req: ScheduleRequest,
                        options: Sequence[tuple[float, str, Child | None]],
                        outcomes: list[Outcome], attempt: Attempt | None, *,
                        final: bool = True) -> dict[str, Any] | None:
        for i, (_, name, child) in enumerate(options):
            # The last option asked may take all the time left.
            share = 1.0 if final and i == len(options) - 1 else NEXT_SHARE
            got = await (self._run_local(req, attempt) if child is None
                         else self._ask(child, req, attempt, share))
            if isinstance(got, Outcome):
                outcomes.append(got)
                continue
            return self._prefixed(got, name)
        return None

    async def _best(self, req: ScheduleRequest,
                    options: Sequence[tuple[float, str, Child | None]],
                    outcomes: list[Outcome], attempt: Attempt | None
                    ) -> dict[str, Any] | None:
        """`best` mode: dry runs of the `best_width` options the summaries rank
        highest (at once), the best plan claimed where it was made; the next
        `best_width` only if none of those could place or claim it. A tree of
        ten regions of ten cells plans in 3 cells (each region's summary-best
        for the root's three best regions), not 100. A zone whose parent asked
        compares `best_nested_width` options."""
        width = max(1, self.config.best_width if req.hops == 0
                    else self.config.best_nested_width)
        for lo in range(0, len(options), width):
            plans = await self._plans(req, options[lo:lo + width], outcomes)
            if req.dry_run or attempt is None:
                if plans:
                    return self._prefixed(plans[0][2], plans[0][1])
                continue
            for _, name, got in plans:
                claimed = await self._claim_plan(req, attempt, name, got)
                if isinstance(claimed, Outcome):
                    outcomes.append(claimed)
                    continue
                return claimed
        return None

    async def _plans(self, req: ScheduleRequest,
                     options: Sequence[tuple[float, str, Child | None]],
                     outcomes: list[Outcome]) -> list[tuple[float, str, dict[str, Any]]]:
        """Dry runs of `options` at once: (score, name, plan), best first; no
        more waiting once one is good enough."""
        dry = req.model_copy(update={"dry_run": True, "request_id": None})
        if len(options) == 1:
            # One to ask (a zone below the root, best_nested_width 1): no tasks.
            _, name, child = options[0]
            got = await (self._run_local(dry, None) if child is None
                         else self._ask(child, dry, None))
            if isinstance(got, Outcome):
                outcomes.append(got)
                return []
            return [(_mean_score(got), name, got)]
        sem = asyncio.Semaphore(self.config.fanout)

        async def plan(name: str, child: Child | None) -> tuple[str, dict[str, Any] | Outcome]:
            async with sem:
                got = await (self._run_local(dry, None) if child is None
                             else self._ask(child, dry, None))
            return name, got

        tasks = [asyncio.ensure_future(plan(name, child)) for _, name, child in options]
        plans: list[tuple[float, str, dict[str, Any]]] = []
        try:
            for fut in asyncio.as_completed(tasks):
                name, got = await fut
                if isinstance(got, Outcome):
                    outcomes.append(got)
                    continue
                score = _mean_score(got)
                plans.append((score, name, got))
                if req.good_enough is not None and score >= req.good_enough:
                    break  # good enough: do not wait for slower children
        finally:
            for t in tasks:
                t.cancel()
        plans.sort(key=lambda p: (-p[0], p[1]))
        return plans

    async def _claim_plan(self, req: ScheduleRequest, attempt: Attempt, name: str,
                          plan: dict[str, Any]) -> dict[str, Any] | Outcome:
        """Claim exactly `plan` at the zone that owns it ("go with allocate")."""
        placements = plan.get("placements", [])
        path = str(placements[0]["zone"]).split("/")[1:] if placements else []
        pid = await self._record(attempt, name, req)
        deadline = attempt.child_deadline(self.config.child_timeout)
        body = {"path": path, "project_id": req.project_id, "user_id": req.user_id,
                "consumer_type": req.consumer_type, "group": req.group,
                "hold_ttl": req.hold_ttl, "request_id": pid, "deadline": deadline,
                "placements": [{"consumer_uuid": p["consumer_uuid"],
                                "allocations": p["allocations"]} for p in placements]}
        if name == LOCAL:
            try:
                await run_in_threadpool(self.local.claim_placements, body)
            except errors.Conflict as exc:
                return Outcome(LOCAL, Result.CONFLICT, exc.detail)
            return self._prefixed({**plan, "dry_run": False}, LOCAL)
        child = await self.child(name)
        if child is None:
            return Outcome(name, Result.ERROR, "child zone removed")
        reply = await self.call_claim(child, "/strato/v1/claims", body, req.consumers,
                                      deadline + 0.25)
        if isinstance(reply, Outcome):
            return reply
        if reply.status == 200:
            consumers = [p["consumer_uuid"] for p in placements]
            try:
                claimed = protocol.read_claim_answer(consumers, reply.body)
            except protocol.Faulty as exc:
                return await self._faulty(child, pid, consumers, exc.reason)
            self._note_answer(name, claimed.get("zone_summary"))
            return self._prefixed({**plan, "dry_run": False}, name)
        err = _error(reply.body)
        why = f"claim refused ({reply.status}): {err.get('detail', '')}"[:300]
        if reply.status == 409:
            return Outcome(name, Result.CONFLICT, why)
        # Not an answer about room (503, 508, 500, a lying body): an outage.
        return Outcome(name, Result.UNAVAILABLE if reply.status == 503 else Result.LOOP
                       if protocol.is_loop(reply.status, reply.body) else Result.ERROR, why)

    async def call_claim(self, child: Child, route: str, body: dict[str, Any],
                         consumers: Sequence[str], deadline: float) -> Any:
        """Send a claim message to `child`: its Reply, or an Outcome when it did
        not answer (a claim that may have arrived is recorded in doubt)."""
        if body.get("deadline") is not None:
            body = {**body, "deadline": self.their_time(child.name, float(body["deadline"]))}
        try:
            return await self.transport.call(child.url, "POST", route,
                                              token=child.credential, json=body,
                                              timeout=max(0.05, deadline - time.time()))
        except Unreachable as exc:
            self.health_of(child.name).failed(exc.why)
            rid = body.get("request_id")
            if exc.maybe_delivered and rid is not None:
                await self.note_in_doubt(child.name, rid, consumers, exc.why)
                return Outcome(child.name, Result.IN_DOUBT, f"{exc.why}; whatever it "
                               "claimed is cancelled when it answers again")
            return Outcome(child.name, Result.UNREACHABLE, exc.why)

    async def forward_claim(self, route: str, payload: dict[str, Any]) -> Any:
        """Pass a claim message (POST /strato/v1/claims...) one level down its zone
        path. A claim with a request id goes through this zone's ledger like a
        schedule request: reserved first (a late one after a cancel is refused,
        a repeat replays), sent under a fresh part id recorded under it. A
        claim this zone would refuse is refused here, before any of that."""
        check_claim(payload)
        path = payload["path"]
        child = await self.child(path[0])
        if child is None:
            raise errors.NotFound(f"path: no child zone named {path[0]!r}")
        rid = payload.get("request_id")
        consumers = [p["consumer_uuid"] for p in payload.get("placements", [])]
        deadline = time.time() + self.config.child_timeout
        if payload.get("deadline") is not None:
            deadline = min(deadline, float(payload["deadline"]))
        if rid is None:
            reply = await self.call_claim(child, route, {**payload, "path": path[1:]},
                                          payload.get("consumers", []), deadline)
            if isinstance(reply, Outcome):
                raise errors.ServiceUnavailable(f"child zone {child.name} did not answer: "
                                                f"{reply.reason}")
            return reply
        pid = part_id(rid, self.config.name)

        def reserve(conn: Connection) -> ledger.Entry | None:
            if not ledger.reserve(conn, rid, deadline):
                return ledger.lookup(conn, rid)
            ledger.add_part(conn, rid, child.name, pid, consumers)
            return None
        entry = await self._write(reserve, now=True)
        if entry is not None:
            if entry.state == State.PLACED:
                return _Reply(200, {**entry.body, "replayed": True})
            if entry.state == State.CANCELLED:
                raise _cancelled(rid)
            raise errors.Conflict(f"request_id {rid}: a claim with this id is at work or "
                                  "was refused; retry", errors.REQUEST_IN_PROGRESS)
        reply = await self.call_claim(child, route, {**payload, "request_id": pid,
                                                     "path": path[1:]}, consumers, deadline)
        if isinstance(reply, Outcome) or reply.status != 200:
            await self._write(lambda conn: ledger.give_back(conn, rid, None))
            if isinstance(reply, Outcome):
                raise errors.ServiceUnavailable(f"child zone {child.name} did not answer: "
                                                f"{reply.reason}")
            return reply
        body = dict(reply.body) if isinstance(reply.body, dict) else {}
        # The owner's summary, when it sent one, replaces what is cached of that
        # child (otherwise the cached one is stale now); this zone's own goes
        # up instead.
        below = body.pop("zone_summary", None)
        try:
            below = None if below is None else protocol.read_summary(below)
        except protocol.Faulty:
            below = None
        self._note_answer(child.name, below)
        if not await self._write(lambda conn: ledger.finish(conn, rid, State.PLACED, body,
                                                            only_placing=True), now=True):
            await self.undo(rid, placed=True)
            raise _cancelled(rid)
        if below is None:
            return _Reply(reply.status, body)
        return _Reply(reply.status, {**body, "zone_summary": await self.summary()})

    def _prefixed(self, answer: dict[str, Any], child: str) -> dict[str, Any]:
        """Zone paths seen from here: this zone's name first."""
        out = dict(answer)
        out["placements"] = [{**p, "zone": f"{self.config.name}/{p['zone']}" if child
                              else p["zone"]} for p in answer.get("placements", [])]
        return out

    # -- recovery ------------------------------------------------------------------------

    async def recover(self) -> dict[str, int]:
        """One round: release expired holds; finish or undo split placements
        left committing; abandon requests whose deadline passed while they were
        at work (a crash, a pause) and undo their parts."""
        done = await shared.recover(self, self._decided)
        orphans, self._orphans = self._orphans or {}, None
        for rid, attempt in orphans.items():
            await self._take_over(rid, attempt, "left unanswered by an earlier process")
        overdue = await self._read(lambda conn: ledger.overdue(conn, time.time() - 1.0))
        for rid in overdue:
            await self._take_over(rid, None, "ran past its deadline unanswered")
        done["abandoned"] = len(orphans) + len(overdue)
        return done

    async def _take_over(self, rid: str, attempt: str | None, why: str) -> None:
        """Abandon request `rid` (only its attempt `attempt`, if given), undo its
        parts and give its reservation back: a retry then works afresh."""
        if attempt is not None:
            now = await self._read(partial(ledger.lookup, request_id=rid))
            if now is None or now.attempt != attempt:
                return  # given back and taken again: not the one left behind
        await self._write(partial(ledger.abandon, request_id=rid))
        entry = await self._read(partial(ledger.lookup, request_id=rid))
        if entry is None or entry.state != State.ABANDONED:
            return  # finished meanwhile
        if attempt is not None and entry.attempt != attempt:
            return  # another attempt's now (given back and taken again)
        log.warning("request %s %s: undoing it", rid, why)
        await self.undo(rid, placed=False, attempt=entry.attempt)
        await self._write(partial(ledger.give_back, request_id=rid, attempt=entry.attempt))

    async def note_orphans(self) -> None:
        """At start-up, before any request, on a database no other process
        serves (a SQLite file: `strato serve` holds its lock; PostgreSQL: no
        other server holds its advisory lock, `Database.claim_alone`): a
        request still placing was at work in a process that is gone, so the
        first recovery round undoes it and gives it back, instead of its
        deadline (up to `request_timeout` later) while every retry of its id
        waits. With other servers of the database alive (PostgreSQL's
        workers), they may be at theirs: the deadline decides."""
        try:
            if not await run_in_threadpool(self.db.claim_alone):
                return
            self._orphans = await self._read(ledger.unanswered)
        finally:
            await run_in_threadpool(self.db.end_alone)
        if self._orphans:
            log.info("%d request(s) left unanswered by an earlier process: undoing them",
                     len(self._orphans))

    async def _decided(self, request_id: str | None, attempt: str | None) -> bool | None:
        """Whether a split placement left committing is to be finished (True),
        undone (False), or left to the request still at work (None)."""
        if request_id is None:
            return True  # made before the ledger recorded it: finish, as decided
        entry = await self._read(lambda conn: ledger.lookup(conn, request_id))
        if entry is None or entry.attempt != attempt:
            return False  # given back, or another attempt's now: nobody was told
        if entry.state != State.PLACING:
            # Placed: already finished. Anything else: nobody was told it is.
            return entry.state == State.PLACED
        if entry.deadline is None or entry.deadline > time.time():
            return None  # its worker may be at it
        # Past its deadline and unanswered: take it over (its worker, if alive,
        # then cannot answer it placed), and undo it.
        if await self._write(partial(ledger.abandon, request_id=request_id)):
            return False
        return await self._decided(request_id, attempt)

    def recovery_interval(self) -> float:
        return max(0.5, min(self.config.hold_ttl / 6, 2.0))

    async def run_recovery(self) -> None:
        """Background loop (HTTP servers): a recovery round a few times per hold
        TTL, this zone's heartbeat, and the start-up sweep for parts lost with
        the machine (zone/sweep.py) until every child was asked."""
        while True:
            try:
                if await self.children():
                    await self._write(sweep.heartbeat)
                if not self.db.is_sqlite:
                    await run_in_threadpool(self.db.keep_server_lock)
                if self._sweep is not None:
                    self._sweep = await sweep.run(self, self._sweep)
                await self.recover()
            except Exception:
                log.exception("recovery round failed")
            await asyncio.sleep(self.recovery_interval())

    async def learn_placed(self) -> None:
        """At start-up, before any request: the consumers this zone placed in
        its children (its ledger's placed requests, the newest), back into the
        consumer index, which lives in memory. A schedule request for one of
        them is then refused as before a restart (a child checks only its own
        consumers), not placed in a second zone."""
        rows = await self._read(partial(ledger.placed_parts, limit=subtree.Owners.MAX,
                                        leave_out=(LOCAL, shared.POOL, shared.POOL_DONE)))
        for child, consumers in rows:
            for c in consumers:
                self.consumer_zones.learn(c, child)

    async def open_sweep(self) -> None:
        """At start-up, before any request: note the sweep owed for parts that
        may have been lost with the machine (zone/sweep.py)."""
        names = [c.name for c in await self.children()]
        self._sweep = await self._write(partial(
            sweep.plan, children=names, now=time.time(),
            beat_s=self.recovery_interval(), request_s=self.config.request_timeout))
        if self._sweep is not None:
            log.info("asking %d child zone(s) for parts this zone may have lost the record "
                     "of (made from %.0f s ago, until %.0f s from now)",
                     len(self._sweep.children), time.time() - self._sweep.start,
                     max(0.0, self._sweep.end - time.time()))

    def made_by(self, zone: str, newer_than: datetime, older_than: datetime,
                after: tuple[datetime, str] | None, limit: int
                ) -> list[tuple[str, datetime]]:
        """Requests here that `zone` sent (GET /strato/v1/requests; a thread)."""
        with self.db.read() as conn:
            return ledger.made_by(conn, zone, newer_than, older_than, after, limit)

    async def known_parts(self, child: str, since: float) -> set[str]:
        """The parts asked of `child` since then that this zone knows of: in
        its ledger, or held in memory by a request at work (read first: one
        that finishes meanwhile is in the ledger by the time that is read)."""
        held = {p.part_id for a in list(self._open.values()) for p in a.pending
                if p.child == child}
        stamp = datetime.fromtimestamp(since, UTC).replace(tzinfo=None)
        return held | await self._read(partial(ledger.known_parts, child=child, since=stamp))

    async def cancel_part(self, child: Child, pid: str, why: str) -> None:
        """Cancel the part `pid` at `child`, or record it in doubt there (cancelled
        when it answers again)."""
        failed = await self._send_cancel(child, pid)
        if failed is not None:
            await self.note_in_doubt(child.name, pid, [], f"{why}; cancel not "
                                     f"done: {failed.why}")

    async def write_meta(self, job: Callable[[Connection], T]) -> T:
        """A write of this zone's own facts (waits for the disk)."""
        return await self._write(job)


class _Duplicate(Exception):
    """Another request reserved this request's id first."""


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A cancel a child has not carried out in its whole subtree, and why;
    `answered`: the child took it, a zone below it has yet to."""

    why: str
    answered: bool = False


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    body: Any


@dataclass(slots=True)
class Undone:
    released: list[str] = field(default_factory=list)
    forwarded: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)


def _replay(entry: ledger.Entry) -> dict[str, Any]:
    """The answer an earlier request with this id got."""
    if entry.state == State.PLACED:
        return {**entry.body, "replayed": True}
    if entry.state == State.CANCELLED:
        raise _cancelled(entry.request_id)
    raise NoValidPlacement(entry.body.get("detail", "no valid placement"),
                           entry.body.get("explain") or {}, replayed=True)


def _cancelled(request_id: str) -> errors.Conflict:
    return errors.Conflict(f"request_id {request_id} was cancelled: whatever it placed was "
                           "undone; send a new request_id to place again",
                           errors.REQUEST_CANCELLED)


def _mean_score(answer: dict[str, Any]) -> float:
    ps = answer.get("placements", [])
    return sum(float(p.get("score", 0.0)) for p in ps) / len(ps) if ps else 0.0


def _error(body: Any) -> dict[str, Any]:
    """The first error of a child's error body, whatever shape the body has."""
    errs = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errs, list) and errs and isinstance(errs[0], dict):
        return errs[0]
    try:
        shown = json.dumps(body)[:300] if body is not None else ""
    except (TypeError, ValueError):
        shown = type(body).__name__
    return {"detail": shown}


def _status_error(status: int, err: dict[str, Any]) -> errors.StratoError:
    detail = str(err.get("detail", "rejected by a child zone"))
    code = str(err.get("code", errors.DEFAULT))
    cls: type[errors.StratoError] = {400: errors.BadRequest, 403: errors.Forbidden,
                                     404: errors.NotFound, 409: errors.Conflict}.get(
        status, errors.BadRequest)
    return cls(detail, code)
