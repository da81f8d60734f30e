"""Schedule and claim in one call, inside one zone.

    request -> candidates (engine, with the zone's rules as masks)
            -> assignment (solver: several instances, spread rules)
            -> claim (store, one transaction) -> answer

Soft rules are first enforced like hard ones ("perfect matches first"); when
nothing fits they are dropped one at a time, lowest weight first, and the
answer lists what was dropped. A claim that loses a race to another writer
is retried on a fresh view, a bounded number of times. When nothing fits,
the answer explains why, stage by stage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool

from strato import trace
from strato.engine import cache as kept
from strato.engine import candidates as builder
from strato.engine import explain as explainer
from strato.engine.constraints import Feature, RuleMask, rule_masks, spare_mask
from strato.engine.hosts import HostArrays, HostView
from strato.engine.index import BoolArray, ProviderIndex
from strato.engine.request import CandidateRequest, GroupPolicy, RequestGroup
from strato.engine.service import Engine
from strato.engine.solver import Assignment, Option, SpreadKind, SpreadRule, solve
from strato.engine.weighers import Scorer, WeigherConfig
from strato.model import errors
from strato.model.schedule import (
    DEFAULT_LEVELS,
    ScheduleRequest,
    SpreadRuleSpec,
    TagsRule,
    check_claim,
)
from strato.observe import NOBODY, Observer
from strato.store import groups as group_store
from strato.store import ledger, provisional
from strato.store import meta as meta_store
from strato.store.allocations import ConsumerClaim, claim, held, placed_by
from strato.zone.summary import own_summary

# Combinations a plan may examine on the event loop before it is moved to a
# worker thread (engine/candidates.py).
INLINE_COMBINATIONS = builder.INLINE_COMBINATIONS

NO_VALID_PLACEMENT = "strato.no_valid_placement"
MAX_CLAIM_RETRIES = 8
# Candidates asked of the engine per instance, then widened when too few.
CANDIDATES_PER_INSTANCE = 8
MIN_CANDIDATES = 64


class NoValidPlacement(errors.Conflict):
    """Nothing fits; carries the explanation for the answer body."""

    CODE = NO_VALID_PLACEMENT

    def __init__(self, detail: str, explain: dict[str, Any], *,
                 replayed: bool = False) -> None:
        super().__init__(detail, NO_VALID_PLACEMENT)
        self.explain = explain
        # The answer kept for the request id, given again (the body says so).
        self.replayed = replayed


def _moved(claims: Sequence[ConsumerClaim],
           before: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None
           ) -> dict[str, dict[str, int]]:
    """Usage moved by `claims` (provider uuid -> class -> amount): what they
    allocate, less what their consumers held `before` (consumer -> usage)."""
    out: dict[str, dict[str, int]] = {}
    for c in claims:
        old = (before or {}).get(c.consumer_uuid, {})
        for sign, usage in ((-1, old), (1, c.allocations)):
            for rp, per in usage.items():
                moved = out.setdefault(rp, {})
                for rc, n in per.items():
                    moved[rc] = moved.get(rc, 0) + sign * n
    return out


class _LostRace(Exception):
    """The claim's transaction refused what the snapshot offered: try again."""


@dataclass(slots=True)
class Plan:
    """What the solver chose on one snapshot, ready to claim."""

    options: list[Option]
    assignment: Assignment
    relaxed: list[RuleMask]
    explain: dict[str, Any] | None
    rows: dict[str, int] = field(default_factory=dict)


class Planner:
    """Planning on one view of a zone (index, host arrays, stale rows, group
    members): candidates, rules, solver, relaxation and explain. No store: the
    caller brings the view and claims the plan (LocalScheduler in a server; the
    simulator's in-memory zones)."""

    def __init__(self, *, zone: str, levels: tuple[str, ...]) -> None:
        self.zone = zone
        self.levels = levels

    def plan(self, req: ScheduleRequest, index: ProviderIndex, hosts: HostArrays,
             stale_rows: BoolArray, members: Mapping[str, Mapping[str, set[str]]], *,
             explain_failure: bool = True) -> Plan:
        """The plan for `req` on this view; raises NoValidPlacement with the explain
        (an empty one if not `explain_failure`: the funnel is costly to count)."""
        groups = candidate_groups(req)
        scorer = Scorer(WeigherConfig(name=req.weigher.name,
                                      class_weights=dict(req.weigher.class_weights)))
        masks = rule_masks(index, hosts, list(req.constraints), req.group, members,
                           self.levels)
        spare = (spare_mask(index, hosts, asked_features(req, groups))
                 if req.weigher.spare else None)
        return self._search(req, index, hosts, groups, scorer, stale_rows, masks,
                            explain_failure, spare)

    def _search(self, req: ScheduleRequest, index: ProviderIndex, hosts: HostArrays,
                groups: tuple[RequestGroup, ...], scorer: Scorer, stale_rows: BoolArray,
                masks: list[RuleMask], explain_failure: bool = True,
                spare: BoolArray | None = None) -> Plan:
        hard = [m for m in masks if m.hard]
        soft = sorted((m for m in masks if not m.hard), key=lambda m: (-m.weight, m.index))
        base = ~stale_rows
        for m in hard:
            base = base & m.allowed
        count = len(req.consumers)
        # Perfect matches first: every soft rule enforced; then drop the
        # lowest weight one at a time. Below every soft rule comes `spare`
        # (the hosts without a rare feature the request does not ask for): a
        # perfect match tries those hosts first, and it is the first dropped.
        # A soft rule never costs an instance either: atomic=false goes on
        # dropping while a plan leaves some out, and keeps the one that
        # places the most (the fewest rules dropped among equals).
        best: tuple[list[Option], Assignment, list[RuleMask], list[RuleMask]] | None = None
        for keep in range(len(soft), -1, -1):
            active, dropped = soft[:keep], soft[keep:]
            allowed = base
            for m in active:
                allowed = allowed & m.allowed
            found = None
            if spare is not None and keep == len(soft):
                found = self._assign(req, index, hosts, groups, scorer, allowed & spare,
                                     hard + active, dropped, count)
                # Sparing never costs an instance (atomic=false places what fits).
                if found is not None and len(found[1].choices) < count:
                    wider = self._assign(req, index, hosts, groups, scorer, allowed,
                                         hard + active, dropped, count)
                    if wider is not None and len(wider[1].choices) > len(found[1].choices):
                        found = wider
            if found is None:
                found = self._assign(req, index, hosts, groups, scorer, allowed,
                                     hard + active, dropped, count)
            if found is not None and (
                    best is None or len(found[1].choices) > len(best[1].choices)):
                best = (*found, active, dropped)
            if best is not None and len(best[1].choices) >= count:
                break
        if best is not None:
            options, assignment, active, dropped = best
            explain = (self._explain(index, groups, stale_rows, hard + active)
                       if req.explain else None)
            # In the order they were dropped: lowest weight first.
            return Plan(options, assignment, relaxed=dropped[::-1], explain=explain)
        spent = builder.spent()
        if spent is not None:
            # The search stopped before it could tell: say so, not a filter.
            why = (f"the search stopped after examining {spent} combinations of nested "
                   "providers (--max-combinations): fewer granular groups, or a higher "
                   "limit, would let it look further")
            raise NoValidPlacement(
                f"no valid placement for {count} consumer(s) in zone {self.zone}: {why}",
                {"zone": self.zone, "summary": why, "groups": []} if explain_failure else {})
        if not explain_failure:
            raise NoValidPlacement(f"no valid placement for {count} consumer(s) in zone "
                                   f"{self.zone}", {})
        explain = self._explain(index, groups, stale_rows, hard, hosts=hosts, count=count,
                                join_group=req.group)
        raise NoValidPlacement(
            f"no valid placement for {count} consumer(s) in zone {self.zone}: "
            f"{explain['summary']}", explain)

    def _assign(self, req: ScheduleRequest, index: ProviderIndex, hosts: HostArrays,
                groups: tuple[RequestGroup, ...], scorer: Scorer, allowed: BoolArray,
                enforced: Sequence[RuleMask], dropped: Sequence[RuleMask], count: int
                ) -> tuple[list[Option], Assignment] | None:
        rules = [_solver_rule(m, req.group, hard=True) for m in enforced if m.spread]
        rules += [_solver_rule(m, req.group, hard=False) for m in dropped if m.spread]
        bonus = [m for m in dropped if m.spread is None]
        # Options carry their failure domains at the levels the rules spread over.
        levels = tuple(sorted({r.level for r in rules}))
        # Spread rules need room to choose domains; otherwise a few per instance
        # is all the solver looks at. One instance under hard rules only needs
        # no room: the rules' masks already keep it out of (or in) the domains
        # the group's members hold.
        # Soft rules weigh score against spread: they get the most room. Hard
        # ones only need enough domains, and the greedy takes them best first;
        # too few candidates for that and the loop below widens.
        # Spread rules measure the skew over the domains of the candidates:
        # they get the most room too.
        soft = any(not r.hard or r.kind is SpreadKind.SPREAD for r in rules)
        if soft:
            limit = max(MIN_CANDIDATES, CANDIDATES_PER_INSTANCE * count)
        elif count == 1 and not bonus:
            # One instance, nothing to weigh but the score: the best candidate
            # is the answer (it fits: candidates are built on free capacity).
            limit = 1
        else:
            limit = max(8, CANDIDATES_PER_INSTANCE * count)
        while True:
            creq = CandidateRequest(groups=groups, group_policy=GroupPolicy(
                req.group_policy or "none"), limit=limit, skip_ties=True)
            cands = kept.build(index, creq, scorer, exclude=~allowed)
            if not cands:
                return None
            options = [_option(index, hosts, c, levels, bonus) for c in cands]
            free = _free(index, options)
            got = solve(options, free, count, rules, atomic=req.atomic)
            if got is not None and got.choices:
                return options, got
            if len(cands) < limit:
                return None  # the engine had no more to offer
            limit *= 8

    def _explain(self, index: ProviderIndex, groups: tuple[RequestGroup, ...],
                 stale_rows: BoolArray, rules: Sequence[RuleMask], *,
                 hosts: HostArrays | None = None, count: int = 0,
                 join_group: str | None = None) -> dict[str, Any]:
        """The funnel of each group; for a refusal (`hosts` given) whose
        groups each still have providers that fit, the cause is not a filter
        but what the instances need together: said first, as `cause`."""
        cuts = explainer.zone_cuts(index, stale_rows, rules)
        funnels = [(g.suffix, explainer.group_funnel(index, g, cuts)) for g in groups]
        out = {
            "zone": self.zone,
            "summary": explainer.summary(funnels),
            "groups": [{"suffix": s, **f.as_dict()} for s, f in funnels],
        }
        if hosts is not None and funnels and all(f.remaining for _, f in funnels):
            cause = _together(index, hosts, [f for _, f in funnels], rules, count,
                              join_group)
            filtered = out["summary"] != explainer.NOTHING_FILTERED
            out["cause"] = cause
            out["summary"] = cause + (f"; left out: {out['summary']}" if filtered else "")
        return out


@dataclass(frozen=True, slots=True)
class OwnHosts:
    """Where a zone's own hosts are: `where`, the location path all share above
    the host level (`dfw/room0` when every one is in that room; None when one
    has no location, of its own or the zone's), and `paths`, each host's
    location cut above the host level (a host with none is left out: its
    domain at every level is its own)."""

    has: bool
    where: str | None
    paths: frozenset[tuple[str, ...]]

    def may_be_in(self, domain: Sequence[str]) -> bool:
        """Whether one of the hosts may be in the failure domain `domain`."""
        d = tuple(domain)
        return any(p[: len(d)] == d for p in self.paths if len(p) >= len(d))


class LocalScheduler:
    """Schedules over one zone's own providers. Thread-safe."""

    def __init__(self, engine: Engine, *, zone: str = "local",
                 levels: tuple[str, ...] = DEFAULT_LEVELS,
                 stale_after: float = 90.0, zone_tags: tuple[str, ...] = (),
                 location_prefix: str | None = None, plan_concurrency: int = 0) -> None:
        self.engine = engine
        self.db = engine.db
        self.zone = zone
        self.levels = levels
        self.hosts = HostView(levels=levels, stale_after=stale_after, zone_tags=zone_tags,
                              zone_location=(tuple(location_prefix.split("/"))
                                             if location_prefix else None))
        self.planner = Planner(zone=zone, levels=levels)
        self.observer: Observer = NOBODY
        self._lock = threading.Lock()
        # At most this many requests plan at once (0: no limit). Planning is
        # CPU under the GIL: more planners only contend. Claims are not gated:
        # while one request waits for its commit, the next plans, and
        # concurrent claims share a transaction (Database.batched).
        self._plan_gate = (threading.BoundedSemaphore(plan_concurrency)
                           if plan_concurrency > 0 else None)
        # One planner on SQLite (the defaults): an event loop plans itself and
        # awaits the commit (schedule_async) instead of handing each request to
        # a worker thread. On PostgreSQL claims block in the caller's thread.
        self.plans_inline = self.db.is_sqlite and plan_concurrency == 1
        # The last summary() and what it was computed from: (the store's change
        # sequence, the stale set object, the summary). See summary_now().
        self._summary_kept: tuple[int, object, dict[str, Any]] | None = None
        # The classes this zone's sharing providers have, at a store sequence.
        self._pooled: tuple[int, frozenset[str]] | None = None

    # -- entry point -----------------------------------------------------------

    def schedule(self, req: ScheduleRequest) -> dict[str, Any]:
        """The answer body; raises NoValidPlacement or another StratoError."""
        found = self._start(req)
        if found is not None:
            return found
        retries = 0
        while True:
            if self._plan_gate is None:
                plan = self._plan(req)
            else:
                with self._plan_gate:
                    plan = self._plan(req)
            if req.dry_run:
                return self._answer(req, plan, retries)
            try:
                return self._claim(req, plan, retries)
            except _LostRace:
                self.observer.lost_race()
                retries = _lost(retries)

    async def schedule_async(self, req: ScheduleRequest) -> dict[str, Any]:
        """schedule() for an event loop on SQLite: plans in the caller's thread
        (the loop: planning is CPU under the GIL, a worker thread would only add
        a hop and contend) and writes the claim there too, in one transaction
        with the claims of the requests at work at once; the loop plans the
        next requests while it waits for that commit to reach the disk
        (`Database.written_here`)."""
        found = self._start(req)
        if found is not None:
            return found
        retries = 0
        if req.dry_run:
            return self._answer(req, await self._plan_async(req), retries)
        with self.db.expecting():
            while True:
                plan = await self._plan_async(req)
                try:
                    return await self._claim_async(req, plan, retries)
                except _LostRace:
                    self.observer.lost_race()
                    retries = _lost(retries)

    def _start(self, req: ScheduleRequest) -> dict[str, Any] | None:
        """Validate; a caller's repeat of a request id is answered before
        planning (None: plan). A parent zone never repeats itself: its ids are
        checked by the claim (reserve) alone."""
        self._validate(req)
        _check_deadline(req)
        if req.request_id is not None and req.hops == 0:
            with self.db.read() as conn:
                found = ledger.get_answer(conn, req.request_id)
            if found is not None:
                return self._replay(found)
        return None

    async def schedule_with_summary_async(self, req: ScheduleRequest) -> dict[str, Any]:
        return self._with_summary(req, await self.schedule_async(req))

    def explain(self, req: ScheduleRequest) -> dict[str, Any]:
        """A dry run that always explains (POST /strato/v1/explain)."""
        dry = req.model_copy(update={"dry_run": True, "explain": True, "request_id": None})
        try:
            return self.schedule(dry)
        except NoValidPlacement as exc:
            return {"placements": [], "relaxed": [], "retries": 0, "dry_run": True,
                    "request_id": None, "unplaced": list(req.consumers),
                    "explain": exc.explain, "detail": exc.detail}

    def group_members(self, group: str) -> list[dict[str, Any]]:
        """Members of server group `group` placed on this zone's own providers,
        with where they are: [{"consumer", "location"}] (location: the host's
        effective location, else this zone's prefix; None if neither)."""
        with self.db.read() as conn:
            roots = group_store.member_roots(conn, group)
            where: dict[str, str | None] = {}
            for root in {r for rs in roots.values() for r in rs}:
                try:
                    where[root] = meta_store.get_meta(conn, root).location
                except errors.NotFound:
                    where[root] = None
        zl = self.hosts.zone_location
        prefix = "/".join(zl) if zl else None
        return [{"consumer": c, "location": where.get(r) or prefix}
                for c, rs in sorted(roots.items()) for r in sorted(rs)]

    def summary(self) -> dict[str, Any]:
        """This zone's own providers as one pool (see zone/summary.py)."""
        stale, _ = self._host_state(set())
        with self.engine.fresh() as index:
            own = own_summary(index, self.hosts.arrays(index), _rows_of(index, stale))
            if self.hosts.seq == index.seq:  # the host view and the index agree
                self._summary_kept = (index.seq, stale, own)
            return own

    def summary_now(self) -> dict[str, Any] | None:
        """The summary `summary()` last returned if nothing it was computed from
        has changed since (the store's change sequence, the stale providers),
        found without a wait: for an event loop, which else hands summary() to
        a worker thread (a routing zone with providers of its own asks for it
        on every request). None when it may have changed, or when finding out
        would wait (PostgreSQL, or the engine busy). The caller must not
        change the dict."""
        kept = self._summary_kept
        if kept is None or self.hosts.stale_cached() is not kept[1]:
            return None
        seq = self.engine.store_seq_nowait()
        return kept[2] if seq is not None and seq == kept[0] else None

    def shared_pools(self, classes: dict[str, int], count: int
                     ) -> list[tuple[str, tuple[str, ...]]]:
        """Sharing providers here that can give every consumer `classes`, best first
        (most free room first): (provider uuid, its aggregates)."""
        return [(u, aggs) for u, aggs, _ in self.sharing_pools(classes, count)]

    def pooled_classes(self, classes: Collection[str]) -> set[str]:
        """Which of `classes` a live sharing provider here has (room or not)."""
        with self.engine.fresh() as index:
            seq = index.seq
            n = index.size
            sharing = index.live()[:n] & index.trait_mask("MISC_SHARES_VIA_AGGREGATE")[:n]
            have: set[str] = set()
            if sharing.any():
                for rc in list(index.rc):
                    col = index.rc_columns(rc)
                    if col is not None and bool((sharing & col.has[:n]).any()):
                        have.add(rc)
        self._pooled = (seq, frozenset(have))
        return have & set(classes)

    def pooled_classes_nowait(self, classes: Collection[str]) -> set[str] | None:
        """pooled_classes() for an event loop: None unless the last answer is
        still the store's (no change since) and that costs no wait."""
        kept = self._pooled
        if kept is None or self.engine.store_seq_nowait() != kept[0]:
            return None
        return set(kept[1] & set(classes))

    def sharing_pools(self, classes: dict[str, int], count: int
                      ) -> list[tuple[str, tuple[str, ...], frozenset[str]]]:
        """shared_pools(), each with its traits too."""
        with self.engine.fresh() as index:
            n = index.size
            ok = index.live()[:n] & index.trait_mask("MISC_SHARES_VIA_AGGREGATE")[:n]
            room = np.ones(n)
            for rc, amount in classes.items():
                col = index.rc_columns(rc)
                if col is None:
                    return []
                free = col.capacity[:n] - col.used[:n]
                ok &= col.has[:n] & (free >= amount * count)
                ok &= (col.min_unit[:n] <= amount) & (col.max_unit[:n] >= amount)
                ok &= (amount % col.step[:n]) == 0
                room = np.minimum(room, free / np.maximum(col.capacity[:n], 1))
            rows = [int(p) for p in np.flatnonzero(ok)]
            rows.sort(key=lambda p: (-float(room[p]), index.uuids[p]))
            return [(index.uuids[p], tuple(sorted(index.aggregates[p])), index.traits[p])
                    for p in rows]

    def hold_shared(self, consumers: list[str], provider: str, classes: dict[str, int],
                    req: ScheduleRequest, ttl: float, request_id: str,
                    attempt: str | None = None) -> None:
        """Claim `classes` on a sharing provider for every consumer, provisionally,
        under `request_id` (as this zone's ledger knows the request)."""
        claims = [ConsumerClaim(consumer_uuid=c, allocations={provider: dict(classes)},
                                project_id=req.project_id, user_id=req.user_id,
                                consumer_type=req.consumer_type, generation=None,
                                placed_by=request_id, spans_below=True)
                  for c in consumers]
        with self.db.write() as conn:
            claim(conn, claims)
            provisional.hold(conn, consumers, ttl, request_id, attempt)

    def has_providers(self) -> bool:
        with self.engine.fresh() as index:
            return bool(index.live()[: index.size].any())

    def own_hosts(self) -> OwnHosts:
        """Whether this zone has providers, and where its hosts are (see
        OwnHosts)."""
        self._host_state(set())
        with self.engine.fresh() as index:
            n = index.size
            live = index.live()[:n]
            if not live.any():
                return OwnHosts(False, None, frozenset())
            arrays = self.hosts.arrays(index)
            roots = np.flatnonzero(live & (index.root[:n] == np.arange(n)))
            locs = [arrays.locations[int(c)] for c in np.unique(arrays.loc_code[roots])]
        depth = len(self.levels) - 1  # the host level is the host itself
        known = [loc for loc in locs if loc is not None]
        paths = frozenset(loc[:depth] for loc in known)
        if not known or len(known) < len(locs):
            return OwnHosts(True, None, paths)
        common: list[str] = []
        for segs in zip(*known, strict=False):
            if len(set(segs)) != 1 or len(common) >= depth:
                break
            common.append(segs[0])
        return OwnHosts(True, "/".join(common) or None, paths)

    def schedule_with_summary(self, req: ScheduleRequest) -> dict[str, Any]:
        """schedule(), plus this zone's summary when a parent asked: one thread hop."""
        return self._with_summary(req, self.schedule(req))

    def _with_summary(self, req: ScheduleRequest, answer: dict[str, Any]) -> dict[str, Any]:
        if req.hops > 0 and not req.dry_run:
            answer["own_summary"] = self.summary()
        return answer

    # -- validation --------------------------------------------------------------

    def check_names(self, req: ScheduleRequest, *, also_classes: Collection[str] = (),
                    also_traits: Collection[str] = ()) -> None:
        """400 for a resource class (in a group, or in the class weights of a
        client's request) or trait this zone's registry does not know (nor
        `also_*`: at a zone with children, the names its children's summaries
        show: a zone run apart, another organisation's, may have custom names
        its parent never registered)."""
        classes = {rc for g in req.groups for rc in g.resources} - set(also_classes)
        # Weights are checked where the client asked: a parent passes them to
        # every child it asks, and a class one child has may be unknown to
        # another (it weighs nothing there).
        weighed = (set(req.weigher.class_weights) - set(also_classes) - classes
                   if req.hops == 0 else set())
        traits: set[str] = set()
        for g in req.groups:
            for t in g.required:
                names = t[3:].split(",") if t.startswith("in:") else [t.lstrip("!")]
                traits.update(n for n in names if n)
        traits -= set(also_traits)
        bad_rc, bad_tr = self.engine.unknown_names(classes | weighed, traits)
        if set(bad_rc) & classes:
            raise errors.BadRequest("groups: unknown resource class(es): "
                                    f"{', '.join(rc for rc in bad_rc if rc in classes)}")
        if bad_rc:
            raise errors.BadRequest("weigher.class_weights: unknown resource class(es): "
                                    f"{', '.join(bad_rc)}")
        if bad_tr:
            raise errors.BadRequest(f"groups: unknown trait(s): {', '.join(bad_tr)}")

    def _validate(self, req: ScheduleRequest) -> None:
        self.check_names(req)
        for c in req.constraints:
            if isinstance(c, SpreadRuleSpec) and c.level not in self.levels:
                raise errors.BadRequest(
                    f"constraints: unknown level {c.level!r}; this zone's levels are "
                    f"{', '.join(self.levels)}")

    # -- planning ----------------------------------------------------------------

    async def _plan_async(self, req: ScheduleRequest) -> Plan:
        """Plan on the event loop while the request is cheap; one that would
        examine more than INLINE_COMBINATIONS combinations of nested providers
        is planned again in a worker thread, so that the loop stays free."""
        most = self.engine.config.max_combinations
        if most <= INLINE_COMBINATIONS:
            return self._plan(req)
        try:
            with builder.budget(builder.Budget(INLINE_COMBINATIONS, escalate=True)):
                return self._plan_bounded(req)
        except builder.TooBig:
            return await run_in_threadpool(self._plan, req)

    def _plan(self, req: ScheduleRequest) -> Plan:
        with builder.budget(combinations=self.engine.config.max_combinations):
            return self._plan_bounded(req)

    def _plan_bounded(self, req: ScheduleRequest) -> Plan:
        start = time.perf_counter()
        with trace.span("strato.plan", consumers=len(req.consumers)):
            try:
                plan = self._plan_now(req)
            except NoValidPlacement:
                self._refuse_existing(req)
                raise
        self.observer.planned(time.perf_counter() - start)
        return plan

    def _refuse_existing(self, req: ScheduleRequest) -> None:
        """A consumer that already has allocations is a 409 concurrent_update
        (a schedule request places new consumers only), not "nothing fits": its
        own allocations may be what left no room. Looked for only when nothing
        fits (else the claim finds it)."""
        if req.dry_run:
            return
        with self.db.read() as conn:
            for c in req.consumers:
                if held(conn, c):
                    raise errors.Conflict(
                        f"consumer generation conflict - consumer {c} already has "
                        "allocations (a schedule request places new consumers only)",
                        errors.CONCURRENT_UPDATE)

    def _plan_now(self, req: ScheduleRequest) -> Plan:
        self.engine.settle()
        spread_groups = {c.group or req.group for c in req.constraints
                         if isinstance(c, SpreadRuleSpec)}
        stale, members = self._host_state(spread_groups)
        with self.engine.fresh() as index:
            hosts = self.hosts.arrays(index)
            return self.planner.plan(req, index, hosts, _rows_of(index, stale), members)

    def _host_state(self, spread_groups: set[str | None]
                    ) -> tuple[dict[str, float | None], dict[str, dict[str, set[str]]]]:
        """Stale providers, and where the members of `spread_groups` are. Without
        groups, and with nothing changed in the store since the host view last
        looked, no read transaction at all (the engine's change counter says so)."""
        groups = {g for g in spread_groups if g}
        if not groups:
            stale = self.hosts.stale_cached()
            if stale is not None and self.hosts.seq == self.engine.store_seq():
                return stale, {}
        with self.db.read() as conn:
            self.hosts.refresh(conn)
            stale = self.hosts.stale(conn)
            members = {g: group_store.member_roots(conn, g) for g in groups}
        return stale, members

    # -- claiming ------------------------------------------------------------------

    def _claim(self, req: ScheduleRequest, plan: Plan, retries: int) -> dict[str, Any]:
        start = time.perf_counter()
        with trace.span("strato.claim", consumers=len(req.consumers), retries=retries):
            job, applied, answer = self._claim_job(req, plan, retries)
            # Concurrent requests share one transaction (one fsync on SQLite).
            replay = self.db.batched(job, applied)
        self.observer.claimed(time.perf_counter() - start)
        return self._claimed(req, replay, answer)

    async def _claim_async(self, req: ScheduleRequest, plan: Plan, retries: int
                           ) -> dict[str, Any]:
        start = time.perf_counter()
        with trace.span("strato.claim", consumers=len(req.consumers), retries=retries):
            job, applied, answer = self._claim_job(req, plan, retries)
            replay = await self.db.written_here(job, applied)
        self.observer.claimed(time.perf_counter() - start)
        return self._claimed(req, replay, answer)

    def _claimed(self, req: ScheduleRequest, replay: dict[str, Any] | None,
                 answer: dict[str, Any]) -> dict[str, Any]:
        if replay is None:
            assert req.request_id is not None
            with self.db.read() as conn:
                found = ledger.get_answer(conn, req.request_id)
            if found is None:
                raise errors.Conflict("request_id is being processed by another request; "
                                      "retry", errors.REQUEST_IN_PROGRESS)
            return self._replay(found)
        return answer

    def _claim_job(self, req: ScheduleRequest, plan: Plan, retries: int
                   ) -> tuple[Callable[[Connection], dict[str, Any] | None],
                              Callable[[dict[str, Any] | None], None], dict[str, Any]]:
        """The claim as a write job, its post-commit hook, and the answer it gives."""
        chosen = plan.assignment.choices
        claims = [
            ConsumerClaim(consumer_uuid=consumer,
                          allocations=option_allocations(plan.options[i]),
                          project_id=req.project_id, user_id=req.user_id,
                          consumer_type=req.consumer_type, generation=None,
                          placed_by=req.request_id or "")
            for consumer, i in zip(req.consumers, chosen, strict=False)]
        answer = self._answer(req, plan, retries)
        committed: list[int] = []

        def job(conn: Connection) -> dict[str, Any] | None:
            # A zone that was paused (or slow) never acts on a request its
            # caller has given up on: past the deadline, nothing is written.
            _check_deadline(req)
            if req.request_id is not None and not ledger.reserve(
                    conn, req.request_id):
                return None  # another request with this id got there first
            try:
                result = claim(conn, claims)
            except errors.ConcurrentUpdate as exc:
                raise errors.Conflict(
                    f"consumers: {exc.detail.split(' - ', 1)[-1]} (a schedule request "
                    "places new consumers only)", errors.CONCURRENT_UPDATE) from None
            except errors.Conflict:
                # Capacity moved since the snapshot: another writer won.
                raise _LostRace() from None
            self._recheck_spread(conn, req, plan)
            if req.hold_ttl is not None:
                provisional.hold(conn, [c.consumer_uuid for c in claims], req.hold_ttl,
                                 req.request_id)
            if req.group:
                group_store.add_members(conn, req.group, [c.consumer_uuid for c in claims])
            if req.request_id is not None:
                ledger.finish(conn, req.request_id, 200, answer)
            committed[:] = [result.change_seq]
            return answer

        def applied(_: dict[str, Any] | None) -> None:
            # Our own write, once committed: into the index and host view without
            # reading it back (before the next request plans, so it need not read).
            if committed:
                self._own_write(committed[0], _moved(claims))

        return job, applied, answer

    def write_job(self, claims: Sequence[ConsumerClaim], *, release: bool = False
                  ) -> tuple[Callable[[Connection], bool], Callable[[bool], None]]:
        """An allocations write through the Placement API (each consumer's
        allocations replaced by its claim's; `release`: a DELETE, one consumer)
        as a job for the writer thread, and its post-commit hook, which takes
        what moved into the index and host view as a schedule's claim does: the
        next plan need not read the store back. The job answers False for a
        release of a consumer that held nothing (and writes nothing)."""
        done: list[tuple[int, dict[str, dict[str, int]]]] = []

        def job(conn: Connection) -> bool:
            before = {c.consumer_uuid: held(conn, c.consumer_uuid) for c in claims}
            if release and not any(before.values()):
                return False
            result = claim(conn, claims)
            done[:] = [(result.change_seq, _moved(claims, before))]
            return True

        def applied(_: bool) -> None:
            if done:
                self._own_write(*done[0])

        return job, applied

    def _own_write(self, seq: int, moved: Mapping[str, Mapping[str, int]]) -> None:
        """This process committed change `seq`, moving usage by `moved`
        (provider uuid -> class -> amount): into the index and host view
        without reading it back (before the next request plans)."""
        self.engine.own_claim(seq, moved)
        self.hosts.own_allocation_change(seq)

    def _recheck_spread(self, conn: Connection, req: ScheduleRequest, plan: Plan) -> None:
        """Hard affinity rules against the members as committed now, under the
        groups' locks: two requests planned on one snapshot cannot both win."""
        rules = [c for c in req.constraints if isinstance(c, SpreadRuleSpec) and c.hard]
        if not rules:
            return
        groups = {c.group or req.group or "" for c in rules}
        group_store.lock_groups(conn, groups)
        chosen = [plan.options[i] for i in plan.assignment.choices]
        # This claim's own consumers are not members already there: their
        # allocations in the store now are the ones it just wrote, and one may
        # still be listed in the group from a placement that was undone since
        # (a cancel takes allocations, not memberships).
        placing = set(req.consumers)
        for rule in rules:
            group = rule.group or req.group or ""
            members = {c: roots for c, roots in group_store.member_roots(conn, group).items()
                       if c not in placing}
            existing = {self.hosts.domain_of_root(root, rule.level)
                        for roots in members.values() for root in roots}
            mine = [o.domains.get(rule.level, o.host) for o in chosen]
            if rule.type == "spread":
                if rule.max_per_domain is not None:
                    now: dict[str, int] = {}
                    for roots in members.values():
                        for d in {self.hosts.domain_of_root(r, rule.level) for r in roots}:
                            now[d] = now.get(d, 0) + 1
                    for d in set(mine):
                        if now.get(d, 0) + mine.count(d) > rule.max_per_domain:
                            raise _LostRace()
                continue
            if rule.type == "anti_affinity" and any(d in existing for d in mine):
                raise _LostRace()
            if rule.type == "affinity" and existing and any(d not in existing for d in mine):
                raise _LostRace()
            if rule.type == "affinity" and group == req.group and len(existing) > 1:
                # Members joined elsewhere since the plan: every member in one
                # domain no longer holds (the plan on a fresh view refuses).
                raise _LostRace()

    def claim_placements(self, body: dict[str, Any], spans_below: Collection[str] = ()
                         ) -> dict[str, Any]:
        """Claim exactly the given placements (a parent zone chose them): all or
        nothing. With a `request_id`, a repeat answers as the first did.
        `spans_below`: consumers this zone's own write gives allocations in a
        zone below too (api/below.py's writes across zones)."""
        check_claim(body)
        request_id = body.get("request_id")
        claims = [ConsumerClaim(
            consumer_uuid=p["consumer_uuid"],
            allocations={rp: dict(a["resources"]) for rp, a in p["allocations"].items()},
            project_id=body["project_id"], user_id=body["user_id"],
            consumer_type=body.get("consumer_type"), generation=None,
            placed_by=request_id or "", spans_below=p["consumer_uuid"] in spans_below)
            for p in body["placements"]]
        with self.db.write() as conn:
            if body.get("deadline") is not None and time.time() > float(body["deadline"]):
                raise errors.ServiceUnavailable("the claim's deadline had passed: nothing "
                                                "was claimed", retry_after=0.0)
            if request_id is not None and not ledger.reserve(conn, request_id):
                found = ledger.get_answer(conn, request_id)
                if found is None:
                    raise errors.Conflict(f"request_id {request_id} is in progress",
                                          errors.REQUEST_IN_PROGRESS)
                if found[0] != ledger.State.PLACED:
                    raise errors.Conflict(f"request_id {request_id} was cancelled or "
                                          "refused", errors.REQUEST_CANCELLED)
                return {**found[1], "replayed": True}
            result = claim(conn, claims)
            if body.get("hold_ttl"):
                provisional.hold(conn, [c.consumer_uuid for c in claims],
                                 float(body["hold_ttl"]), request_id)
            if body.get("group"):
                group_store.add_members(conn, body["group"], [c.consumer_uuid for c in claims])
            answer = {"claimed": [c.consumer_uuid for c in claims],
                      "providers": list(result.touched_providers),
                      "placements": [{"consumer_uuid": c.consumer_uuid, "zone": self.zone}
                                     for c in claims]}
            if request_id is not None:
                ledger.finish(conn, request_id, 200, answer)
        return answer

    def cancel_request(self, request_id: str) -> dict[str, Any] | None:
        """Undo what `request_id` placed on this zone's own providers (a parent
        lost the answer and placed it elsewhere), or make sure it never will.

        Returns the request's answer as it was (None if it had placed nothing
        or never arrived): a routing zone forwards the cancel along it.
        """
        with self.db.write() as conn:
            answer = ledger.cancel(conn, request_id)
            if answer is None:
                return None
            # Only those still as it made them: one released since (DELETE
            # /allocations) may have been placed here again by another request.
            mine = placed_by(conn, [str(p["consumer_uuid"]) for p in answer.get("placements", [])
                                    if p.get("zone") == self.zone], request_id)
            if mine:
                claim(conn, [ConsumerClaim(c, {}) for c in mine])
                provisional.done(conn, mine)
        return {**answer, "released": mine}

    def _replay(self, found: tuple[int, dict[str, Any]]) -> dict[str, Any]:
        status, body = found
        if status == ledger.State.CANCELLED:
            raise errors.Conflict("request_id was cancelled: whatever it placed was undone; "
                                  "send a new request_id to place again",
                                  errors.REQUEST_CANCELLED)
        if status != 200:
            raise NoValidPlacement(body.get("detail", "no valid placement"),
                                   body.get("explain") or {}, replayed=True)
        return {**body, "replayed": True}

    def record_failure(self, req: ScheduleRequest, exc: NoValidPlacement) -> None:
        """Keep a failed answer under its request_id, so a retry repeats it."""
        if req.request_id is None or req.dry_run:
            return
        with self.db.write() as conn:
            if ledger.reserve(conn, req.request_id):
                ledger.finish(conn, req.request_id, 409,
                                         {"detail": exc.detail, "explain": exc.explain})

    def _answer(self, req: ScheduleRequest, plan: Plan, retries: int) -> dict[str, Any]:
        chosen = plan.assignment.choices
        placements = []
        for consumer, i in zip(req.consumers, chosen, strict=False):
            o = plan.options[i]
            placements.append({
                "consumer_uuid": consumer, "provider": o.host,
                "allocations": {rp: {"resources": res}
                                for rp, res in option_allocations(o).items()},
                "location": o.location,
                "score": round(o.score, 6), "zone": self.zone})
        return {
            "placements": placements,
            "relaxed": [{"index": m.index, "type": m.rule.type, "weight": m.weight,
                         "rule": m.reason} for m in plan.relaxed],
            "retries": retries,
            "dry_run": req.dry_run,
            "request_id": req.request_id,
            "unplaced": list(req.consumers[len(chosen):]),
            "explain": plan.explain,
        }


# -- helpers --------------------------------------------------------------------

def _check_deadline(req: ScheduleRequest) -> None:
    if req.deadline is not None and time.time() > req.deadline:
        raise errors.ServiceUnavailable(
            "the request's deadline passed before it was placed: nothing was claimed",
            retry_after=0.0)


def _lost(retries: int) -> int:
    """One more claim lost to a concurrent writer: the new count, or give up."""
    retries += 1
    if retries > MAX_CLAIM_RETRIES:
        raise errors.Conflict(
            f"gave up after {retries} claims lost to concurrent writers; retry",
            errors.CONCURRENT_UPDATE) from None
    return retries


def asked_features(req: ScheduleRequest, groups: Sequence[RequestGroup]) -> frozenset[Feature]:
    """What the request asks for, as features (constraints.rare_features): the
    classes and traits of its groups, the tags its rules require."""
    out: set[Feature] = set()
    for g in groups:
        out.update(("class", rc) for rc, _ in g.resources)
        out.update(("trait", t) for anyof in g.required for t in anyof)
    for c in req.constraints:
        if isinstance(c, TagsRule):
            out.update(("tag", t) for t in c.required)
    return frozenset(out)


def candidate_groups(req: ScheduleRequest) -> tuple[RequestGroup, ...]:
    out = []
    for suffix, g in req.suffixed_groups():
        required: list[tuple[str, ...]] = []
        forbidden: list[str] = []
        for t in g.required:
            if t.startswith("in:"):
                required.append(tuple(n for n in t[3:].split(",") if n))
            elif t.startswith("!"):
                forbidden.append(t[1:])
            else:
                required.append((t,))
        member_of: list[tuple[str, ...]] = []
        forbidden_aggs: list[str] = []
        for anyof in g.member_of:
            neg = [a[1:] for a in anyof if a.startswith("!")]
            pos = [a for a in anyof if not a.startswith("!")]
            if neg and pos:
                raise errors.BadRequest(
                    "groups.member_of: a list is either aggregates to be in (any of) or "
                    "'!'-aggregates to avoid, not both")
            forbidden_aggs += neg
            if pos:
                member_of.append(tuple(pos))
        out.append(RequestGroup(
            suffix=suffix, resources=tuple(sorted(g.resources.items())),
            required=tuple(required), forbidden=tuple(forbidden),
            member_of=tuple(member_of), forbidden_aggs=tuple(forbidden_aggs),
            in_tree=g.in_tree))
    return tuple(out)


def _rows_of(index: ProviderIndex, uuids: dict[str, float | None]) -> BoolArray:
    rows = np.zeros(index.size, dtype=bool)
    for u in uuids:
        p = index.pos.get(u)
        if p is not None:
            rows[p] = True
    return rows


def _together(index: ProviderIndex, hosts: HostArrays, funnels: Sequence[explainer.Funnel],
              rules: Sequence[RuleMask], count: int, join_group: str | None) -> str:
    """Why no plan came although each group has providers that fit one
    instance: a hard rule that needs more failure domains than those
    providers are in, else room for the instances together."""
    alive = np.ones(index.size, dtype=bool)
    for f in funnels:
        if f.alive is not None:
            alive &= f.alive[: index.size]
    # Vectorised: a full zone refuses every request, each explained.
    roots = np.unique(index.root[: index.size][alive])
    for m in rules:
        s = m.spread
        if s is None or not m.hard or s.level not in hosts.domains:
            continue
        codes = np.unique(hosts.domains[s.level][roots])
        names = hosts.domain_names[s.level]
        doms = [names[int(c)] for c in codes]
        n, lv = len(doms), s.level
        if s.kind is SpreadKind.ANTI_AFFINITY:
            # Domains the group already holds are out (the rule's mask): the
            # new instances need one each, when they join the group.
            if s.name == join_group and count > n:
                return (f"{m.reason}: {count} instances need {count} {lv}s apart, and the "
                        f"providers that fit are in {n} {lv}(s)")
        elif s.kind is SpreadKind.SPREAD and s.max_per_domain is not None:
            room = sum(max(0, s.max_per_domain - s.counts.get(d, 0)) for d in doms)
            if count > room:
                return (f"{m.reason}: at most {s.max_per_domain} per {lv}, and the {n} "
                        f"{lv}(s) the providers that fit are in take {room} more")
        elif s.kind is SpreadKind.AFFINITY and count > 1:
            return (f"{m.reason}: no single {lv} among the {n} the providers that fit are "
                    f"in has room for all {count} instances")
    if count > 1:
        return (f"the {len(roots)} host(s) that fit one instance have room for fewer than "
                f"all {count} instances together")
    return ("the providers that fit cannot take the request's groups together (group "
            "policy or nested providers)")


def _solver_rule(m: RuleMask, join_group: str | None, *, hard: bool) -> SpreadRule:
    assert m.spread is not None
    s = m.spread
    return SpreadRule(kind=s.kind, level=s.level, hard=hard, weight=s.weight,
                      existing=s.existing, name=s.name,
                      # A spread rule is about this request's instances in any case.
                      among_new=s.kind is SpreadKind.SPREAD or (
                          bool(join_group) and s.name == join_group),
                      counts=s.counts, max_skew=s.max_skew, max_per_domain=s.max_per_domain)


def _option(index: ProviderIndex, hosts: HostArrays, c: builder.Candidate,
            levels: tuple[str, ...], bonus: Sequence[RuleMask]) -> Option:
    uuids = index.uuids
    items = tuple((uuids[p], rc, amount) for p, rc, amount in c.items)
    # The host: the root of the candidate's first provider that is not shared.
    roots = [int(index.root[p]) for p, _, _ in c.items]
    host_row = roots[0]
    for p, _, _ in c.items:
        if not index.trait_mask("MISC_SHARES_VIA_AGGREGATE")[p]:
            host_row = int(index.root[p])
            break
    domains = {level: hosts.domain_of(level, host_row) for level in levels}
    loc = hosts.locations[int(hosts.loc_code[host_row])]
    score = c.score + sum(m.weight for m in bonus if m.allowed[host_row])
    return Option(items=items, host=uuids[host_row], domains=domains, score=score,
                  location="/".join(loc) if loc else None)


def _free(index: ProviderIndex, options: Sequence[Option]) -> dict[tuple[str, str], int]:
    free: dict[tuple[str, str], int] = {}
    for o in options:
        for rp, rc, _ in o.items:
            if (rp, rc) in free:
                continue
            col = index.rc_columns(rc)
            p = index.pos[rp]
            free[(rp, rc)] = int(col.capacity[p] - col.used[p]) if col is not None else 0
    return free


def option_allocations(o: Option) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for rp, rc, amount in o.items:
        out.setdefault(rp, {})[rc] = out.get(rp, {}).get(rc, 0) + amount
    return out
