"""The zone tree: schedule over this zone's own providers and its children.

A zone knows its own providers (through ``LocalScheduler``) and its direct
children (by URL, with a cached summary each). A schedule request:

1. prunes children whose static metadata (location prefix, tags) or summary
   (classes, largest free, traits) cannot satisfy it, and unhealthy ones;
2. orders the rest, and its own providers, by predicted fit;
3. ``delegate``: hands the whole request to the first; on failure, the next.
   ``best``: asks all concurrently for a dry-run plan, then claims the best
   plan at the zone that owns it (``POST /strato/v1/claims`` routed down the
   zone path), moving to the next plan on conflict;
4. answers with the zone path of every placement, and explains per child.

A child that does not answer in time is marked unhealthy and skipped until
a probe (with backoff) finds it answering again. Nothing here is the truth
for any claim: the owning zone's store is.

A claiming request whose answer was lost after it was sent (timeout, broken
connection) is *in doubt*: the child may have committed it. The zone records
it (``store.in_doubt``) before going on elsewhere, and asks the child to
cancel it, by request id, as soon as the child answers again; the child
undoes the claim or, if the request never arrived, refuses it should it
arrive late. So a consumer is never left placed in two zones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.model.location import location_matches, location_pattern
from strato.model.schedule import LocationRule, ScheduleRequest, TagsRule
from strato.store import children as child_store
from strato.store import in_doubt, schedule_requests
from strato.store.children import Child
from strato.store.db import Database
from strato.store.util import utcnow
from strato.zone import protocol, shared
from strato.zone import summary as summaries
from strato.zone.failures import FailureMemory, Refusal, shape_of
from strato.zone.scheduler import LocalScheduler, NoValidPlacement
from strato.zone.transport import Malformed, Transport, Unreachable

log = logging.getLogger("strato.zone")
LOCAL = ""  # the key of this zone's own providers among the options
REFUSED_BEFORE = "refused as much before, and nothing was freed there since"
# Worker threads per planner for schedule calls on this zone's own providers:
# one plans while the others claim (wait for their commit).
LOCAL_THREADS_PER_PLANNER = 8
# Children are read from the store at most this often per process (other
# processes of the zone see a change within this delay; this one at once).
CHILDREN_TTL_S = 5.0
# Whether the zone has providers of its own is looked up at most this often.
OWN_TTL_S = 1.0
MAX_BACKOFF_S = 60.0
# Old answers kept by request id are purged this often.
PURGE_EVERY_S = 300.0


@dataclass(slots=True)
class Health:
    healthy: bool = True
    failures: int = 0
    last_error: str | None = None
    last_ok: float | None = None
    next_probe: float = 0.0

    def failed(self, why: str) -> None:
        self.healthy = False
        self.failures += 1
        self.last_error = why
        delay = min(MAX_BACKOFF_S, 0.5 * 2 ** min(self.failures, 10))
        self.next_probe = time.monotonic() + delay * (0.8 + 0.4 * random.random())

    def ok(self) -> None:
        self.healthy = True
        self.failures = 0
        self.last_error = None
        self.last_ok = time.monotonic()

    def due(self) -> bool:
        return self.healthy or time.monotonic() >= self.next_probe

    def as_dict(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"healthy": self.healthy, "failures": self.failures,
                "last_error": self.last_error,
                "seconds_since_ok": None if self.last_ok is None else round(now - self.last_ok,
                                                                            3),
                "next_probe_in": (None if self.healthy
                                  else round(max(0.0, self.next_probe - now), 3))}


@dataclass(slots=True)
class Cached:
    body: dict[str, Any]
    fetched: float


@dataclass(slots=True)
class Outcome:
    zone: str
    # pruned | unhealthy | no_valid_placement | timeout | unreachable | in_doubt | error
    # | faulty (answered, but not as a zone does: discarded)
    outcome: str
    reason: str
    explain: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"zone": self.zone or "(own providers)",
                               "outcome": self.outcome, "reason": self.reason}
        if self.explain:
            out["explain"] = self.explain
        return out


@dataclass(slots=True)
class TreeConfig:
    name: str = "local"
    location_prefix: str | None = None
    tags: tuple[str, ...] = ()
    summary_interval: float = 5.0
    child_timeout: float = 5.0
    fanout: int = 16
    # Cross-zone placements: how long a held part lives unless confirmed.
    hold_ttl: float = 30.0
    # Answers kept by request id are forgotten after this long.
    request_retention: float = 7 * 86400.0
    schedule_concurrency: int = 1


@dataclass
class ZoneTree:
    db: Database
    local: LocalScheduler
    transport: Transport
    config: TreeConfig = field(default_factory=TreeConfig)
    health: dict[str, Health] = field(default_factory=dict)
    cache: dict[str, Cached] = field(default_factory=dict)
    # What each child refused, until its summary says room grew there.
    failures: FailureMemory = field(default_factory=FailureMemory)
    _kids: tuple[float, list[Child]] | None = None
    _own: tuple[float, bool] | None = None
    # Children with requests in doubt (None: not read from the store yet).
    _doubtful: set[str] | None = None
    _reconciling: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _local_gate: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        # Schedule calls on this zone's own providers in worker threads at once;
        # the rest wait on the event loop. The scheduler itself lets
        # `schedule_concurrency` of them plan at a time; the others here wait
        # for their commits, which overlap and share transactions.
        self._local_gate = asyncio.Semaphore(LOCAL_THREADS_PER_PLANNER
                                             * max(1, self.config.schedule_concurrency))

    # -- children --------------------------------------------------------------------

    async def children(self) -> list[Child]:
        """This zone's children (cached briefly: read on every request otherwise)."""
        now = time.monotonic()
        if self._kids is not None and now - self._kids[0] < CHILDREN_TTL_S:
            return self._kids[1]

        def read() -> list[Child]:
            with self.db.read() as conn:
                return child_store.list_children(conn)
        kids = await run_in_threadpool(read)
        self._kids = (now, kids)
        return kids

    def forget_children(self) -> None:
        """After this process changed the children: read them again."""
        self._kids = None

    def _health(self, name: str) -> Health:
        return self.health.setdefault(name, Health())

    async def fetch_summary(self, child: Child, *, fresh: bool = False
                            ) -> dict[str, Any] | None:
        """Ask one child for its summary; updates health either way. `fresh`
        makes the child refresh its own children's summaries first."""
        h = self._health(child.name)
        path = "/strato/v1/summary?fresh=1" if fresh else "/strato/v1/summary"
        try:
            reply = await self.transport.call(child.url, "GET", path,
                                              token=child.credential,
                                              timeout=self.config.child_timeout)
        except Unreachable as exc:
            h.failed(exc.why)
            return None
        if reply.status != 200 or not isinstance(reply.body, dict):
            h.failed(f"summary answered {reply.status}")
            return None
        try:
            body = protocol.read_summary(reply.body)
        except protocol.Faulty as exc:
            h.failed(f"faulty: {exc.reason}")
            return None
        was_down = not h.healthy
        h.ok()
        self.cache[child.name] = Cached(body, time.monotonic())
        if was_down and self._doubtful and child.name in self._doubtful:
            self.spawn(self.reconcile(child.name))
        return body

    async def refresh(self, kids: Sequence[Child] | None = None, *, only_stale: bool = False,
                      fresh: bool = False) -> None:
        """Refresh children's summaries concurrently (those due for a probe)."""
        kids = await self.children() if kids is None else kids
        now = time.monotonic()
        todo = [c for c in kids if (fresh or self._health(c.name).due()) and not (
            only_stale and c.name in self.cache
            and now - self.cache[c.name].fetched < self.config.summary_interval)]
        if todo:
            await asyncio.gather(*(self.fetch_summary(c, fresh=fresh) for c in todo))

    async def run_refresher(self) -> None:
        """Background loop (HTTP servers): keep summaries and health fresh, and
        cancel requests left in doubt at children that answer again."""
        purged_at = 0.0
        while True:
            try:
                await self.refresh()
                if self._doubtful is None or self._doubtful:
                    await self.reconcile()
                if time.monotonic() - purged_at > PURGE_EVERY_S:
                    purged_at = time.monotonic()
                    await run_in_threadpool(self.purge_requests)
            except Exception:  # keep the loop alive whatever one round does
                log.exception("summary refresh failed")
            await asyncio.sleep(self.config.summary_interval)

    def purge_requests(self) -> int:
        """Forget answers kept by request id for longer than the retention."""
        before = utcnow() - timedelta(seconds=self.config.request_retention)
        total = 0
        while True:
            with self.db.write() as conn:
                n = schedule_requests.purge(conn, before)
            total += n
            if n < 10_000:
                return total

    def spawn(self, coro: Any) -> None:
        """Run `coro` in the background (kept referenced until it ends)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- requests in doubt ---------------------------------------------------------------

    async def note_in_doubt(self, child: str, request_id: str, consumers: Sequence[str],
                            why: str) -> None:
        """Record, durably and before going elsewhere, that `child` may have
        acted on `request_id`."""
        def write() -> None:
            with self.db.write() as conn:
                in_doubt.add(conn, child, request_id, consumers, why)
        await run_in_threadpool(write)
        if self._doubtful is None:
            self._doubtful = set()
        self._doubtful.add(child)
        log.warning("request %s is in doubt at child %s (%s): cancelled there when it "
                    "answers again", request_id, child, why)

    async def in_doubt_counts(self) -> dict[str, int]:
        def read() -> dict[str, int]:
            with self.db.read() as conn:
                return in_doubt.counts(conn)
        counts = await run_in_threadpool(read)
        self._doubtful = set(counts)
        return counts

    async def reconcile(self, only: str | None = None) -> int:
        """Ask children that answer to cancel the requests in doubt there.
        Returns how many were settled; the rest wait for the next round."""
        async with self._reconciling:
            def read() -> list[in_doubt.InDoubt]:
                with self.db.read() as conn:
                    return in_doubt.pending(conn, only)
            rows = await run_in_threadpool(read)
            kids = {c.name: c for c in await self.children()}
            settled = 0
            down: set[str] = set()
            for row in rows:
                child = kids.get(row.child)
                if (child is None or row.child in down
                        or (only is None and not self._health(row.child).due())):
                    continue  # removed (kept for the operator), or not answering
                why = await self._send_cancel(child, row.request_id)
                if why is None:
                    settled += 1
                    await run_in_threadpool(self._settle, row.id, None)
                    log.info("request %s cancelled at child %s", row.request_id, row.child)
                else:
                    down.add(row.child)
                    await run_in_threadpool(self._settle, row.id, why)
            await self.in_doubt_counts()
            return settled

    def _settle(self, row_id: int, error: str | None) -> None:
        with self.db.write() as conn:
            if error is None:
                in_doubt.resolved(conn, row_id)
            else:
                in_doubt.attempt_failed(conn, row_id, error)

    async def _send_cancel(self, child: Child, request_id: str) -> str | None:
        """None once `child` confirmed the cancel, else why not."""
        try:
            reply = await self.transport.call(
                child.url, "POST", "/strato/v1/requests/cancel", token=child.credential,
                json={"request_id": request_id}, timeout=self.config.child_timeout)
        except Unreachable as exc:
            self._health(child.name).failed(exc.why)
            return exc.why
        self._health(child.name).ok()
        if reply.status != 200:
            return f"cancel answered {reply.status}: {_error(reply.body).get('detail', '')}"
        return None

    async def cancel(self, request_id: str) -> dict[str, Any]:
        """Our parent lost the answer to `request_id`: undo what it placed here
        (or refuse it if it comes late), and pass the cancel to every child
        (which may have got it as ``{request_id}@{this zone}``)."""
        answer = await run_in_threadpool(self.local.cancel_request, request_id)
        sub = child_request_id(request_id, self.config.name)
        kids = await self.children()
        whys = await asyncio.gather(*(self._send_cancel(c, sub) for c in kids))
        deferred = []
        for c, why in zip(kids, whys, strict=True):
            if why is not None:
                deferred.append(c.name)
                await self.note_in_doubt(c.name, sub, [], f"cancel not delivered: {why}")
        return {"request_id": request_id,
                "released": [] if answer is None else answer.get("released", []),
                "forwarded": [c.name for c in kids if c.name not in deferred],
                "deferred": deferred}

    # -- summary -------------------------------------------------------------------------

    async def has_providers(self, *, fresh: bool = False) -> bool:
        """Whether this zone has providers of its own (looked up at most once a
        second: a zone that only routes to its children pays little for it)."""
        now = time.monotonic()
        if not fresh and self._own is not None and now - self._own[0] < OWN_TTL_S:
            return self._own[1]
        has = await run_in_threadpool(self.local.has_providers)
        self._own = (now, has)
        return has

    async def summary(self, *, fresh: bool = False,
                      own: dict[str, Any] | None = None) -> dict[str, Any]:
        if own is None:
            if not await self.has_providers(fresh=fresh):
                own = summaries.EMPTY
            else:
                own = await run_in_threadpool(self.local.summary)
        kids = await self.children()
        await self.refresh(kids, only_stale=not fresh, fresh=fresh)
        parts = [own]
        child_rows = []
        for c in kids:
            cached = self.cache.get(c.name)
            h = self._health(c.name)
            if cached is not None and h.healthy:
                parts.append(cached.body)
            child_rows.append({"name": c.name, "healthy": h.healthy,
                               "age_s": None if cached is None
                               else round(time.monotonic() - cached.fetched, 3)})
        merged = summaries.merge(parts)
        return {"zone": self.config.name, "location_prefix": self.config.location_prefix,
                "tags": list(self.config.tags), "health": "ok", "as_of": summaries.now_iso(),
                **merged, "children": child_rows}

    # -- scheduling ----------------------------------------------------------------------

    async def schedule(self, req: ScheduleRequest) -> dict[str, Any]:
        kids = await self.children()
        if not kids:
            only: dict[str, Any]
            if self.local.plans_inline:
                only = await self.local.schedule_with_summary_async(req)
            else:
                async with self._local_gate:
                    only = await run_in_threadpool(self.local.schedule_with_summary, req)
            own = only.pop("own_summary", None)
            if own is None:
                return only
            return {**only, "zone_summary": await self.summary(own=own)}
        client_id = req.request_id
        if client_id is not None and req.hops == 0:
            found = await run_in_threadpool(self._stored, client_id)
            if found is not None:
                return found
        if not req.dry_run and client_id is None:
            # Children get a request id even when the caller gave none: a
            # request in doubt at a child is cancelled by it.
            req = req.model_copy(update={"request_id": f"auto-{uuid.uuid4().hex}"})
        await self.refresh(kids, only_stale=True)
        outcomes: list[Outcome] = []
        answer = None
        if not req.dry_run and shared.shared_classes(self, req):
            answer = await shared.schedule_split(self, req, outcomes)
        if answer is None:
            answer = await self._decide(req, kids, outcomes)
        pruned = [c for c in kids if any(o.zone == c.name and o.outcome == "pruned"
                                         for o in outcomes)]
        if answer is None and pruned:
            # Summaries are hints and may be stale: before giving up, look again
            # at the children they pruned (widen), with fresh summaries.
            await asyncio.gather(*(self.fetch_summary(c, fresh=True) for c in pruned))
            retry: list[Outcome] = []
            answer = await self._decide(req, pruned, retry, local=False)
            outcomes = [o for o in outcomes if o.outcome != "pruned"] + retry
        if answer is None:
            explain = {"zone": self.config.name,
                       "summary": "; ".join(f"{o.zone or 'own providers'}: {o.reason}"
                                            for o in outcomes) or "no zone to ask",
                       "children": [o.as_dict() for o in outcomes]}
            raise NoValidPlacement(
                f"no valid placement for {len(req.consumers)} consumer(s) under zone "
                f"{self.config.name}: {explain['summary']}", explain)
        if req.explain:
            answer["explain"] = {"zone": self.config.name, "placed_by": answer.get("explain"),
                                 "children": [o.as_dict() for o in outcomes]}
        answer["request_id"] = client_id
        if client_id is not None and req.hops == 0 and not req.dry_run:
            # Only the zone the caller asked keeps the answer for a repeat; a
            # parent never repeats a request to its child.
            await run_in_threadpool(self._store, client_id, answer)
        return await self._with_summary(req, answer)

    async def _with_summary(self, req: ScheduleRequest, answer: dict[str, Any]
                            ) -> dict[str, Any]:
        """A parent asked (hops > 0) and capacity moved: send our summary along."""
        if req.hops == 0 or req.dry_run:
            return answer
        return {**answer, "zone_summary": await self.summary()}

    async def decide_children(self, req: ScheduleRequest, outcomes: list[Outcome]
                              ) -> dict[str, Any] | None:
        """Place `req` in the children only (not this zone's own providers)."""
        kids = await self.children()
        return await self._decide(req, kids, outcomes, local=False)

    async def _decide(self, req: ScheduleRequest, kids: Sequence[Child],
                      outcomes: list[Outcome], *, local: bool = True) -> dict[str, Any] | None:
        options = await self._options(req, kids, outcomes, local=local)
        if req.mode == "best":
            return await self._best(req, options, outcomes)
        return await self._delegate(req, options, outcomes)

    def _stored(self, request_id: str) -> dict[str, Any] | None:
        with self.db.read() as conn:
            found = schedule_requests.get_answer(conn, request_id)
        if found is None:
            return None
        status, body = found
        if status != 200:
            raise NoValidPlacement(body.get("detail", "no valid placement"),
                                   body.get("explain") or {})
        return {**body, "replayed": True}

    def _store(self, request_id: str, answer: dict[str, Any]) -> None:
        with self.db.write() as conn:
            if schedule_requests.reserve(conn, request_id):
                schedule_requests.finish(conn, request_id, 200, answer)

    async def _options(self, req: ScheduleRequest, kids: Sequence[Child],
                       outcomes: list[Outcome], *, local: bool = True
                       ) -> list[tuple[float, str, Child | None]]:
        """(predicted fit, name, child) of everything worth asking, best first."""
        scored: list[tuple[float, str, Child | None]] = []
        shape = shape_of(req)
        if local and await self.has_providers():
            own = await run_in_threadpool(self.local.summary)
            why = prune_reason(req, own, None, ())
            if why is None:
                scored.append((predicted_fit(req, own), LOCAL, None))
            else:
                outcomes.append(Outcome(LOCAL, "pruned", why))
        for c in kids:
            h = self._health(c.name)
            if not h.due():
                outcomes.append(Outcome(c.name, "unhealthy",
                                        f"skipped: unhealthy ({h.last_error})"))
                continue
            cached = self.cache.get(c.name)
            why = prune_reason(req, cached.body if cached else None, c.location_prefix,
                               c.tags)
            if why is not None:
                down = [k.get("name") for k in (cached.body.get("children", [])
                                                if cached else []) if not k.get("healthy")]
                if down:
                    why += f" (unreachable below it: {', '.join(map(str, down))})"
                outcomes.append(Outcome(c.name, "pruned", why))
                continue
            refused = (self.failures.blocks(c.name, shape, cached.body.get("freed"))
                       if cached else None)
            if refused is not None:
                outcomes.append(Outcome(c.name, "pruned", f"pruned: {REFUSED_BEFORE} "
                                        f"({refused.reason})", refused.explain))
                continue
            fit = predicted_fit(req, cached.body) if cached else 0.0
            scored.append((fit, c.name, c))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return scored

    async def _ask(self, child: Child, req: ScheduleRequest) -> dict[str, Any] | Outcome:
        """One schedule call to a child: its answer, or why it failed."""
        body = req.model_copy(update={"hops": req.hops + 1,
                                      "request_id": self._child_id(req.request_id)})
        h = self._health(child.name)
        try:
            reply = await self.transport.call(
                child.url, "POST", "/strato/v1/schedule", token=child.credential,
                json=body.model_dump(mode="json"), timeout=self.config.child_timeout)
        except Unreachable as exc:
            h.failed(exc.why)
            faulty = isinstance(exc, Malformed)
            if exc.maybe_delivered and not req.dry_run and body.request_id is not None:
                await self.note_in_doubt(child.name, body.request_id, req.consumers, exc.why)
                return Outcome(child.name, "faulty" if faulty else "in_doubt",
                               f"{exc.why}; whatever it claimed is cancelled when it answers "
                               "again")
            kind = ("faulty" if faulty
                    else "timeout" if "timed out" in exc.why else "unreachable")
            return Outcome(child.name, kind, exc.why)
        h.ok()
        try:
            if reply.status == 200:
                answer = protocol.read_schedule_answer(req, reply.body,
                                                       self._own_name(child))
                self._note_answer(child.name, answer.pop("zone_summary", None))
                return answer
            if reply.status in (400, 409):
                # Acted on below: an error body must be one.
                protocol.read_error(reply.body)
        except protocol.Faulty as exc:
            return await self._faulty(child, body, exc.reason)
        err = _error(reply.body)
        if reply.status == 409 and err.get("code") == "strato.no_valid_placement":
            explain = reply.body.get("explain") if isinstance(reply.body, dict) else None
            why = str((explain or {}).get("summary", err.get("detail", "no capacity")))
            cached = self.cache.get(child.name)
            if cached is not None:
                self.failures.note(child.name, shape_of(req), cached.body.get("freed"),
                                   Refusal(str(why), explain))
            return Outcome(child.name, "no_valid_placement", why, explain)
        if reply.status in (400, 409):
            # The request itself is at fault (bad input, consumer exists):
            # every child would say the same.
            raise _status_error(reply.status, err)
        return Outcome(child.name, "error", f"answered {reply.status}: "
                       f"{err.get('detail', '')}"[:300])

    async def _faulty(self, child: Child, sent: ScheduleRequest, reason: str) -> Outcome:
        """`child` answered `sent` with something no zone says: its answer is
        discarded and it is marked failed. Whatever it may have claimed under
        that answer is cancelled, as for an answer lost on the way."""
        why = f"faulty: {reason}"
        self._health(child.name).failed(why)
        log.warning("child %s answered a request faultily: %s", child.name, reason)
        if not sent.dry_run and sent.request_id is not None:
            await self.note_in_doubt(child.name, sent.request_id, sent.consumers, why)
            return Outcome(child.name, "faulty", f"{why}; whatever it claimed is cancelled "
                           "when it answers again")
        return Outcome(child.name, "faulty", why)

    def _own_name(self, child: Child) -> str:
        """The name `child` gives itself (its zone paths start with it): what its
        summary says, else the name it registered under."""
        cached = self.cache.get(child.name)
        return str(cached.body.get("zone", child.name)) if cached else child.name

    def _note_answer(self, name: str, summary: Any) -> None:
        """A child answered a claim: its summary comes with the answer (no extra
        round trip); without one, or with one that is not a summary, refresh it
        at the next request."""
        if summary is not None:
            try:
                self.cache[name] = Cached(protocol.read_summary(summary), time.monotonic())
                return
            except protocol.Faulty as exc:
                self._health(name).failed(f"faulty: {exc.reason}")
        cached = self.cache.get(name)
        if cached is not None:
            cached.fetched = 0.0

    async def _run_local(self, req: ScheduleRequest) -> dict[str, Any] | Outcome:
        try:
            if self.local.plans_inline:
                return await self.local.schedule_async(req)
            return await run_in_threadpool(self.local.schedule, req)
        except NoValidPlacement as exc:
            return Outcome(LOCAL, "no_valid_placement", exc.explain.get("summary", exc.detail),
                           exc.explain)

    async def _delegate(self, req: ScheduleRequest,
                        options: Sequence[tuple[float, str, Child | None]],
                        outcomes: list[Outcome]) -> dict[str, Any] | None:
        for _, name, child in options:
            got = await (self._run_local(req) if child is None else self._ask(child, req))
            if isinstance(got, Outcome):
                outcomes.append(got)
                continue
            return self._prefixed(got, name)
        return None

    async def _best(self, req: ScheduleRequest,
                    options: Sequence[tuple[float, str, Child | None]],
                    outcomes: list[Outcome]) -> dict[str, Any] | None:
        dry = req.model_copy(update={"dry_run": True, "request_id": None})
        sem = asyncio.Semaphore(self.config.fanout)

        async def plan(name: str, child: Child | None) -> tuple[str, dict[str, Any] | Outcome]:
            async with sem:
                got = await (self._run_local(dry) if child is None else self._ask(child, dry))
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
        if req.dry_run:
            return self._prefixed(plans[0][2], plans[0][1]) if plans else None
        for _, name, got in plans:
            claimed = await self._claim_plan(req, name, got)
            if isinstance(claimed, Outcome):
                outcomes.append(claimed)
                continue
            return claimed
        return None

    async def _claim_plan(self, req: ScheduleRequest, name: str, plan: dict[str, Any]
                          ) -> dict[str, Any] | Outcome:
        """Claim exactly `plan` at the zone that owns it ("go with allocate")."""
        placements = plan.get("placements", [])
        path = str(placements[0]["zone"]).split("/")[1:] if placements else []
        child_id = self._child_id(req.request_id)
        body = {"path": path, "project_id": req.project_id, "user_id": req.user_id,
                "consumer_type": req.consumer_type, "group": req.group,
                "hold_ttl": req.hold_ttl, "request_id": child_id,
                "placements": [{"consumer_uuid": p["consumer_uuid"],
                                "allocations": p["allocations"]} for p in placements]}
        if name == LOCAL:
            try:
                # Kept under the request's own id, as a local schedule would be.
                await run_in_threadpool(self.local.claim_placements,
                                        {**body, "request_id": req.request_id})
            except errors.Conflict as exc:
                return Outcome(LOCAL, "conflict", exc.detail)
            return self._prefixed({**plan, "dry_run": False}, LOCAL)
        child = next(c for c in await self.children() if c.name == name)
        try:
            reply = await self.transport.call(child.url, "POST", "/strato/v1/claims",
                                              token=child.credential, json=body,
                                              timeout=self.config.child_timeout)
        except Unreachable as exc:
            self._health(name).failed(exc.why)
            if exc.maybe_delivered and child_id is not None:
                await self.note_in_doubt(name, child_id,
                                         [p["consumer_uuid"] for p in placements], exc.why)
                return Outcome(name, "in_doubt", f"{exc.why}; whatever it claimed is "
                               "cancelled when it answers again")
            return Outcome(name, "unreachable", exc.why)
        if reply.status == 200:
            consumers = [p["consumer_uuid"] for p in placements]
            try:
                claimed = protocol.read_claim_answer(consumers, reply.body)
            except protocol.Faulty as exc:
                why = f"faulty: {exc.reason}"
                self._health(name).failed(why)
                if child_id is not None:
                    await self.note_in_doubt(name, child_id, consumers, why)
                return Outcome(name, "faulty", f"{why}; whatever it claimed is cancelled "
                               "when it answers again")
            self._note_answer(name, claimed.get("zone_summary"))
            return self._prefixed({**plan, "dry_run": False}, name)
        err = _error(reply.body)
        return Outcome(name, "conflict", f"claim refused ({reply.status}): "
                       f"{err.get('detail', '')}"[:300])

    def _child_id(self, request_id: str | None) -> str | None:
        return None if request_id is None else child_request_id(request_id, self.config.name)

    def _prefixed(self, answer: dict[str, Any], child: str) -> dict[str, Any]:
        """Zone paths seen from here: this zone's name first."""
        out = dict(answer)
        out["placements"] = [{**p, "zone": f"{self.config.name}/{p['zone']}" if child
                              else p["zone"]} for p in answer.get("placements", [])]
        return out


# -- pruning and prediction --------------------------------------------------------------

def _demand(req: ScheduleRequest) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in req.groups:
        for rc, n in g.resources.items():
            out[rc] = out.get(rc, 0) + n
    return out


def prune_reason(req: ScheduleRequest, summary: dict[str, Any] | None,
                 prefix: str | None, zone_tags: Sequence[str]) -> str | None:
    """Why a zone cannot satisfy `req`, or None when it might."""
    for c in req.constraints:
        if not c.hard:
            continue
        if (isinstance(c, LocationRule) and prefix
                and not prefix_compatible(c.pattern, prefix)):
            return f"pruned: location prefix {prefix} cannot match {c.pattern}"
        if isinstance(c, TagsRule):
            present = set(zone_tags) | set((summary or {}).get("tags_present", []))
            missing = [t for t in c.required if t not in present]
            if missing and (summary is not None or zone_tags):
                return f"pruned: no provider tagged {', '.join(missing)}"
            clash = [t for t in c.forbidden if t in zone_tags]
            if clash:
                return f"pruned: zone is tagged {', '.join(clash)}"
    if summary is None:
        return None
    classes = summary.get("classes", {})
    traits = set(summary.get("traits", []))
    for g in req.groups:
        for rc, amount in g.resources.items():
            c = classes.get(rc)
            if c is None:
                return f"pruned: no {rc}"
            if int(c.get("largest_free", 0)) < amount:
                return (f"pruned: no capacity ({rc} largest free {c.get('largest_free', 0)}"
                        f" < {amount})")
        for t in g.required:
            if t.startswith("!"):
                continue
            names = t[3:].split(",") if t.startswith("in:") else [t]
            if not any(n in traits for n in names):
                return f"pruned: no {' or '.join(names)}"
    count = len(req.consumers)
    if req.atomic:
        for rc, amount in _demand(req).items():
            c = classes.get(rc, {})
            if int(c.get("capacity", 0)) - int(c.get("used", 0)) < amount * count:
                return f"pruned: not enough {rc} for {count} instance(s)"
    return None


def prefix_compatible(pattern: str, prefix: str) -> bool:
    """Could a location under `prefix` match `pattern`? (segment-wise, both ways)."""
    segments, exact = location_pattern(pattern)
    pre = tuple(prefix.strip("/").split("/"))
    n = min(len(segments), len(pre))
    head = (segments[:n], False)
    if not location_matches(head, pre[:n]):
        return False
    return not (exact and len(pre) > len(segments))


def predicted_fit(req: ScheduleRequest, summary: dict[str, Any]) -> float:
    """Higher is better: free share after the request (spread) or its opposite (pack)."""
    classes = summary.get("classes", {})
    shares = []
    count = len(req.consumers)
    for rc, amount in _demand(req).items():
        c = classes.get(rc)
        if not c or not c.get("capacity"):
            continue
        free = int(c["capacity"]) - int(c["used"]) - amount * count
        shares.append(free / int(c["capacity"]))
    if not shares:
        return 0.0
    share = sum(shares) / len(shares)
    return 1.0 - share if req.weigher.name == "pack" else share


def child_request_id(request_id: str, zone: str) -> str:
    """The id a child knows a request by: the parent's id, then the parent's name
    (hashed when that would not fit the 255 characters an id may have)."""
    out = f"{request_id}@{zone}"
    if len(out) <= 255:
        return out
    return f"h-{hashlib.sha256(request_id.encode()).hexdigest()}@{zone}"[:255]


def _mean_score(answer: dict[str, Any]) -> float:
    ps = answer.get("placements", [])
    return sum(float(p.get("score", 0.0)) for p in ps) / len(ps) if ps else 0.0


def _error(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and body.get("errors"):
        first = body["errors"][0]
        if isinstance(first, dict):
            return first
    return {"detail": json.dumps(body)[:300] if body is not None else ""}


def _status_error(status: int, err: dict[str, Any]) -> errors.StratoError:
    detail = str(err.get("detail", "rejected by a child zone"))
    code = str(err.get("code", errors.DEFAULT))
    cls: type[errors.StratoError] = {400: errors.BadRequest, 403: errors.Forbidden,
                                     404: errors.NotFound, 409: errors.Conflict}.get(
        status, errors.BadRequest)
    return cls(detail, code)
