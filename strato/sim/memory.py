"""Strato's decisions on in-memory zones: the engine and the planner, no store.

A server's zone claims in a store transaction (1-2 ms each) and, at 100,000
providers in one zone, scans every row per decision (about 6 ms). A run of
1,000,000 requests in minutes needs well under a millisecond per request, so
these targets keep what decides and drop what persists:

* the same as a server: the provider index (`ProviderIndex`), host arrays
  (locations, tags, failure domains), and the `Planner` (candidates, rule
  masks, solver, relaxation, explain). In the tree, a parent prunes and ranks
  its children by their summaries as `ZoneTree` does in delegate mode (the
  rules of `prune_reason` and `predicted_fit`, vectorised over the children;
  tests hold the two to the same answers), skips the children that refused as
  much before with nothing freed since (`strato.zone.failures`), then asks
  the best child first.
* left out: the store (a claim goes straight into the index, as a server's
  own claims do with `Engine.own_claim`), HTTP, request ids, staleness and
  concurrency (one thread decides, so no claim can lose a race).

Summaries are always fresh here (a server's are refreshed with each answer),
so the tree's "widen" step, which re-reads the summaries of pruned children,
would find nothing new and is skipped. Hosts are root providers (scenarios
have no nested ones), so a zone's largest free room per class is the largest
of its hosts'.

Policies: `strato-memory` (one zone over every host) and `strato-tree-memory`
(the scenario's zone tree).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from strato.engine.hosts import HostArrays, HostView
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.model.inventory import MAX_INT
from strato.model.schedule import LocationRule, ScheduleRequest, SpreadRuleSpec, TagsRule
from strato.sim.cluster import HostSpec
from strato.sim.inprocess import schedule_body
from strato.sim.invariants import StoreSnapshot
from strato.sim.scenario import Scenario
from strato.sim.target import Outcome, Placed, reason_from_explain
from strato.sim.tree import zone_prefix
from strato.sim.workload import SimRequest
from strato.zone.attempt import Outcome as ZoneOutcome
from strato.zone.attempt import Result
from strato.zone.failures import FailureMemory, Refusal, Shape, shape_of
from strato.zone.prune import predicted_fit, prefix_compatible, prune_reason
from strato.zone.scheduler import NoValidPlacement, Plan, Planner, option_allocations
from strato.zone.tree import LOCAL, REFUSED_BEFORE

Vector = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def _records(hosts: Sequence[HostSpec]) -> list[ProviderRecord]:
    out = []
    for h in hosts:
        invs = {rc: InventoryRecord(total=inv.total, reserved=inv.reserved,
                                    min_unit=inv.min_unit,
                                    max_unit=inv.max_unit or inv.total or MAX_INT,
                                    step_size=inv.step_size,
                                    allocation_ratio=inv.allocation_ratio)
                for rc, inv in h.inventory.items()}
        out.append(ProviderRecord(uuid=h.uuid, root_uuid=h.uuid, inventories=invs,
                                  traits=frozenset(h.traits)))
    return out


class _Node:
    """What a parent sees of a child zone: its summary, as vectors over the classes."""

    name: str
    prefix: str | None
    zone_tags: tuple[str, ...]
    capacity: Vector
    present: Mask  # the class exists among the zone's providers
    used: Vector
    traits: frozenset[str]
    tags_present: frozenset[str]
    parent: tuple[MemoryRouter, int] | None = None

    def largest(self) -> Vector:
        raise NotImplementedError

    def freed(self) -> int:
        """The summary's `freed` token: moves whenever room grew below."""
        raise NotImplementedError

    def summary(self, classes: Sequence[str]) -> dict[str, Any]:
        """The summary as a server sends it (for explaining a refusal)."""
        largest = self.largest()
        return {"classes": {rc: {"capacity": int(self.capacity[j]), "used": int(self.used[j]),
                                 "largest_free": int(largest[j])}
                            for j, rc in enumerate(classes) if self.present[j]},
                "traits": sorted(self.traits), "tags_present": sorted(self.tags_present)}

    def _moved(self, delta: Vector, released: bool) -> None:
        """Usage moved by `delta` (`released`: room grew): tell every ancestor."""
        up = self.parent
        while up is not None:
            router, row = up
            router.child_moved(row, delta, released)
            up = router.parent


class MemoryZone(_Node):
    """One zone's own providers: index, host arrays and planner; claims in memory."""

    def __init__(self, name: str, hosts: Sequence[HostSpec], *, levels: tuple[str, ...],
                 classes: Sequence[str], prefix: str | None = None,
                 zone_tags: tuple[str, ...] = (), path: str | None = None) -> None:
        self.name = name
        self.path = path or name
        self.prefix = prefix
        self.zone_tags = zone_tags
        self.classes = list(classes)
        self.col = {rc: j for j, rc in enumerate(self.classes)}
        self.index = ProviderIndex.build(_records(hosts))
        self.view = HostView(levels=levels, zone_tags=zone_tags,
                             zone_location=tuple(prefix.split("/")) if prefix else None)
        self.view.load_static((h.uuid, h.location, h.tags) for h in hosts)
        self.planner = Planner(zone=name, levels=levels)
        n = self.index.size
        self._no_stale = np.zeros(n, dtype=bool)
        # Free room per host and class (-1 where the host has no such inventory),
        # kept beside the index: the pre-check and largest-free read it.
        self.free_m = np.full((n, len(self.classes)), -1, dtype=np.int64)
        for j, rc in enumerate(self.classes):
            col = self.index.rc_columns(rc)
            if col is not None:
                has = col.has[:n]
                self.free_m[has, j] = col.capacity[:n][has] - col.used[:n][has]
        self.capacity = np.zeros(len(self.classes), dtype=np.int64)
        self.present = np.zeros(len(self.classes), dtype=bool)
        for j, rc in enumerate(self.classes):
            col = self.index.rc_columns(rc)
            if col is not None and col.has[:n].any():
                self.present[j] = True
                self.capacity[j] = int(col.capacity[:n][col.has[:n]].sum())
        self.used = np.zeros(len(self.classes), dtype=np.int64)
        self.traits = frozenset(t for t, c in self.index.trait_cols.items() if c[:n].any())
        self.tags_present = frozenset(t for h in hosts for t in h.tags) | frozenset(zone_tags)
        # Largest free per class, kept up to date: a release can only raise it
        # (to that host's free), a claim only lower it when it took from a host
        # that had the most (then that class is counted again when asked).
        self._largest = np.zeros(len(self.classes), dtype=np.int64)
        self._recount: set[int] = set(range(len(self.classes)))
        # group -> consumer -> roots, as the store's member_roots reads it
        self.members: dict[str, dict[str, set[str]]] = {}
        # consumer -> (allocations, group)
        self.held: dict[str, tuple[dict[str, dict[str, int]], str | None]] = {}
        # Host rows in the order releases gave them room, and per request shape
        # the length of that log when `_surely_refused` last said yes: claims
        # only take room, so only the rows released since can change the answer.
        self._released: list[int] = []
        self._refused_at: dict[tuple[Any, ...], int] = {}

    def largest(self) -> Vector:
        if self.index.size:
            for j in self._recount:
                self._largest[j] = max(int(self.free_m[:, j].max()), 0)
        self._recount.clear()
        return self._largest

    def freed(self) -> int:
        return self.index.freed

    def plan(self, req: ScheduleRequest, *, explain: bool = True) -> Plan:
        """The planner's answer on this zone as it is now; raises NoValidPlacement
        (explained only if `explain`)."""
        hosts = self.view.arrays(self.index)
        if not explain and self._surely_refused(req, hosts):
            raise NoValidPlacement(f"no valid placement for {len(req.consumers)} "
                                   f"consumer(s) in zone {self.name}", {})
        groups = {c.group or req.group for c in req.constraints
                  if isinstance(c, SpreadRuleSpec)}
        members = {g: self.members.get(g, {}) for g in groups if g}
        return self.planner.plan(req, self.index, hosts, self._no_stale, members,
                                 explain_failure=explain)

    def _surely_refused(self, req: ScheduleRequest, hosts: HostArrays) -> bool:
        """A necessary condition, checked in a few vector operations before the
        planner runs: some host has every class free and the required traits
        (hosts are roots here), and, under hard anti-affinity among the new
        instances, such hosts span enough domains. False proves nothing."""
        index, n = self.index, self.index.size
        total: dict[int, int] = {}
        traits: list[str] = []
        for g in req.groups:
            for rc, amount in g.resources.items():
                j = self.col.get(rc)
                if j is None:
                    return True
                total[j] = total.get(j, 0) + amount
            traits += [t for t in g.required if not t.startswith(("!", "in:"))]
        count = len(req.consumers)
        levels: tuple[str, ...] = ()
        if req.atomic and count > 1 and req.group:
            levels = tuple(c.level for c in req.constraints
                           if isinstance(c, SpreadRuleSpec) and c.hard
                           and c.type == "anti_affinity" and (c.group or req.group) == req.group)
        key = (tuple(total.items()), tuple(traits), levels, count if levels else 0)
        cols, need = list(total), list(total.values())
        mark = self._refused_at.get(key)
        if mark is not None:
            # Refused before: still refused unless a host released since fits
            # (the hosts that fit can only have shrunk otherwise).
            since = self._released[mark:]
            if len(since) < n // 8:
                free = self.free_m
                masks = [index.trait_mask(t) for t in traits]
                if not any(all(free[p, j] >= a for j, a in total.items())
                           and all(m[p] for m in masks) for p in since):
                    self._refused_at[key] = len(self._released)
                    return True
        fit = (self.free_m[:, cols] >= need).all(axis=1)
        for t in traits:
            fit &= index.trait_mask(t)[:n]
        refused = not fit.any() or any(
            np.unique(hosts.domains[level][:n][fit]).size < count for level in levels)
        if refused:
            self._refused_at[key] = len(self._released)
        else:
            self._refused_at.pop(key, None)
        return refused

    def claim(self, req: ScheduleRequest, plan: Plan) -> list[Placed]:
        """Apply the plan: all of it, or nothing if it no longer fits."""
        chosen = [(c, plan.options[i]) for c, i in
                  zip(req.consumers, plan.assignment.choices, strict=False)]
        need: dict[tuple[str, str], int] = {}
        for _, o in chosen:
            for rp, rc, amount in o.items:
                need[(rp, rc)] = need.get((rp, rc), 0) + amount
        index = self.index
        for (rp, rc), amount in need.items():
            col, p = index.rc[rc], index.pos[rp]
            if col.used[p] + amount > col.capacity[p]:
                raise RuntimeError(f"zone {self.name}: the plan overfills {rp} {rc}")
        delta = np.zeros(len(self.classes), dtype=np.int64)
        for (rp, rc), amount in need.items():
            col, p, j = index.rc[rc], index.pos[rp], self.col[rc]
            if col.capacity[p] - col.used[p] >= self._largest[j]:
                self._recount.add(j)  # it had the most free: count again
            col.used[p] += amount
            index.touch(p)
            self.free_m[p, j] -= amount
            delta[j] += amount
        placed = []
        for consumer, o in chosen:
            allocs = option_allocations(o)
            self.held[consumer] = (allocs, req.group)
            if req.group:
                self.members.setdefault(req.group, {})[consumer] = {o.host}
            placed.append(Placed(consumer=consumer, host=o.host, allocations=allocs))
        self._changed(delta, False)
        return placed

    def release(self, consumer: str) -> None:
        got = self.held.pop(consumer, None)
        if got is None:
            return
        allocs, group = got
        delta = np.zeros(len(self.classes), dtype=np.int64)
        for rp, per in allocs.items():
            p = self.index.pos[rp]
            for rc, amount in per.items():
                col, j = self.index.rc[rc], self.col[rc]
                col.used[p] -= amount
                self.index.touch(p)
                self.free_m[p, j] += amount
                delta[j] -= amount
                self._largest[j] = max(self._largest[j], int(self.free_m[p, j]))
            self._released.append(p)
        if group:
            members = self.members.get(group, {})
            members.pop(consumer, None)
            if not members:
                self.members.pop(group, None)
        self.index.freed += 1
        self._changed(delta, True)

    def _changed(self, delta: Vector, released: bool) -> None:
        self.used += delta
        self._moved(delta, released)

    def snapshot(self) -> StoreSnapshot:
        """Capacities from the index, allocations as held; raises if the index's
        usage drifted from the sum of what is held."""
        index, n = self.index, self.index.size
        snap = StoreSnapshot(zone=self.path)
        summed: dict[tuple[str, str], int] = {}
        for consumer, (allocs, _) in self.held.items():
            snap.allocations[consumer] = {rp: dict(per) for rp, per in allocs.items()}
            for rp, per in allocs.items():
                for rc, amount in per.items():
                    summed[(rp, rc)] = summed.get((rp, rc), 0) + amount
        for rc, col in index.rc.items():
            for p in np.flatnonzero(col.has[:n]):
                uuid = index.uuids[int(p)]
                snap.capacity.setdefault(uuid, {})[rc] = int(col.capacity[p])
                if int(self.free_m[p, self.col[rc]]) != int(col.capacity[p] - col.used[p]):
                    raise RuntimeError(f"zone {self.name}: free room of {uuid} {rc} drifted")
                if int(col.used[p]) != summed.get((uuid, rc), 0):
                    raise RuntimeError(f"zone {self.name}: index usage of {uuid} {rc} is "
                                       f"{int(col.used[p])}, held allocations sum to "
                                       f"{summed.get((uuid, rc), 0)}")
        return snap


@dataclass(frozen=True, slots=True)
class _Ranking:
    """A router's kept state for ranking one request shape (MemoryRouter._for)."""

    static: Mask  # the children the request's static rules allow
    cap: Matrix  # capacity of the classes asked, per child
    counted: npt.NDArray[np.bool_]  # cap > 0
    divisor: Matrix  # cap, at least 1
    classes: Vector  # classes counted, at least 1
    any_counted: Mask  # the child has capacity in some class asked
    refused: Vector | None  # the vector failure memory of the shape


_idents = itertools.count()


@dataclass(frozen=True, slots=True)
class _Demand:
    """A request as the children's summaries are tested against it."""

    groups: tuple[tuple[tuple[int, int], ...], ...]  # per group: (class column, amount)
    traits: tuple[tuple[str, ...], ...]  # per required trait: any of these names
    total: tuple[tuple[int, int], ...]  # (class column, amount summed over groups)
    count: int
    atomic: bool
    pack: bool
    locations: tuple[str, ...]  # hard location patterns
    tags: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # hard (required, forbidden)
    unknown: bool  # a class no zone has
    shape: Shape | None  # for the failure memory
    ident: int  # distinct per demand, for the routers' kept rankings
    # The same as arrays: every class asked (columns, amount for all instances).
    total_cols: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    total_need: Vector = field(default_factory=lambda: np.zeros(0, np.int64))
    # Per group, one instance's amounts over every class (0 where not asked).
    group_need: tuple[Vector, ...] = ()

    @property
    def static(self) -> tuple[Any, ...]:
        """The key of the per-child tests that depend on the request alone."""
        return ("static", self.locations, self.tags, self.traits)


def demand_of(req: ScheduleRequest, col: dict[str, int]) -> _Demand:
    groups = []
    traits: list[tuple[str, ...]] = []
    total: dict[int, int] = {}
    unknown = False
    for g in req.groups:
        cols = []
        for rc, amount in g.resources.items():
            j = col.get(rc)
            if j is None:
                unknown = True
                continue
            cols.append((j, amount))
            total[j] = total.get(j, 0) + amount
        groups.append(tuple(cols))
        for t in g.required:
            if not t.startswith("!"):
                traits.append(tuple(t[3:].split(",")) if t.startswith("in:") else (t,))
    hard = [c for c in req.constraints if c.hard]
    return _Demand(groups=tuple(groups), traits=tuple(traits), total=tuple(sorted(total.items())),
                   count=len(req.consumers), atomic=req.atomic,
                   pack=req.weigher.name == "pack",
                   locations=tuple(c.pattern for c in hard if isinstance(c, LocationRule)),
                   tags=tuple((tuple(c.required), tuple(c.forbidden)) for c in hard
                              if isinstance(c, TagsRule)),
                   unknown=unknown, shape=shape_of(req), ident=next(_idents),
                   total_cols=np.array(sorted(total), dtype=np.int64),
                   total_need=np.array([total[j] * len(req.consumers) for j in sorted(total)],
                                       dtype=np.int64),
                   group_need=tuple(_over(len(col), cols) for cols in groups if cols))


def _over(classes: int, amounts: Sequence[tuple[int, int]]) -> Vector:
    """(class column, amount) pairs as a vector over every class."""
    out = np.zeros(classes, dtype=np.int64)
    for j, a in amounts:
        out[j] = a
    return out


class MemoryRouter(_Node):
    """A parent zone: its children (and own providers) as rows of summary matrices."""

    def __init__(self, name: str, entries: Sequence[_Node], *, classes: Sequence[str],
                 prefix: str | None = None, zone_tags: tuple[str, ...] = ()) -> None:
        self.name = name
        self.prefix = prefix
        self.zone_tags = zone_tags
        self.classes = list(classes)
        self.entries = list(entries)
        for row, e in enumerate(self.entries):
            e.parent = (self, row)
        k = len(self.entries)
        self.cap: Matrix = np.stack([e.capacity for e in self.entries]).reshape(k, -1)
        self.has: npt.NDArray[np.bool_] = np.stack(
            [e.present for e in self.entries]).reshape(k, -1)
        self.used_m: Matrix = np.stack([e.used for e in self.entries]).reshape(k, -1)
        self.largest_m: Matrix = np.zeros_like(self.cap)
        self._dirty: set[int] = set(range(k))
        self._largest: Vector | None = None
        self.capacity = self.cap.sum(axis=0)
        self.present = np.asarray(self.has.any(axis=0), dtype=bool)
        self.used = self.used_m.sum(axis=0)
        self.traits = frozenset().union(*(e.traits for e in self.entries))
        self.tags_present = frozenset().union(*(e.tags_present for e in self.entries))
        # Ties go by name, as ZoneTree sorts its options.
        self._name_rank = np.argsort(np.argsort([e.name for e in self.entries], kind="stable"))
        self._static: dict[tuple[Any, ...], Mask] = {}
        self.failures = FailureMemory()
        # The failure memory as vectors, for `rank` to prune in one step: per
        # child, how many releases happened below it; per request shape, the
        # count each child was at when it refused that shape or a smaller one.
        self._releases = np.zeros(k, dtype=np.int64)
        self._refused: dict[Shape, Vector] = {}
        self._rankings: dict[int, _Ranking] = {}

    def child_moved(self, row: int, delta: Vector, released: bool) -> None:
        self.used_m[row] += delta
        self.used += delta
        self._dirty.add(row)
        self._largest = None
        if released:
            self._releases[row] += 1

    def _note_refusal(self, row: int, shape: Shape) -> None:
        """Child `row` refused `shape`: every shape known here that asks at least
        as much is refused there too, until a release below it."""
        if shape not in self._refused:
            self._refused[shape] = np.full(len(self.entries), -1, dtype=np.int64)
        for s, at in self._refused.items():
            if (s.key == shape.key and s.count >= shape.count
                    and all(a >= b for a, b in zip(s.amounts, shape.amounts, strict=True))):
                at[row] = self._releases[row]

    def _fresh(self) -> None:
        for row in self._dirty:
            self.largest_m[row] = self.entries[row].largest()
        self._dirty.clear()

    def freed(self) -> int:
        return sum(e.freed() for e in self.entries)

    def largest(self) -> Vector:
        if self._largest is None:
            self._fresh()
            self._largest = self.largest_m.max(axis=0)
        return self._largest

    def _mask(self, key: tuple[Any, ...]) -> Mask:
        """Per-child tests that depend on the request alone (cached)."""
        got = self._static.get(key)
        if got is None:
            kind = key[0]
            if kind == "loc":
                got = np.array([not e.prefix or prefix_compatible(key[1], e.prefix)
                                for e in self.entries])
            elif kind == "tags":
                required, forbidden = key[1], key[2]
                got = np.array([
                    not [t for t in required if t not in set(e.zone_tags) | e.tags_present]
                    and not [t for t in forbidden if t in e.zone_tags]
                    for e in self.entries])
            else:
                got = np.array([any(n in e.traits for n in key[1]) for e in self.entries])
            self._static[key] = got
        return got

    def _for(self, d: _Demand) -> _Ranking:
        """What `rank` keeps per request shape: the request-only tests and the
        capacity terms of the predicted fit (capacities never change here)."""
        got = self._rankings.get(d.ident)
        if got is not None:
            return got
        ok = self._static.get(d.static)
        if ok is None:
            ok = np.ones(len(self.entries), dtype=bool)
            for pattern in d.locations:
                ok &= self._mask(("loc", pattern))
            for required, forbidden in d.tags:
                ok &= self._mask(("tags", required, forbidden))
            for names in d.traits:
                ok &= self._mask(("trait", names))
            self._static[d.static] = ok
        cap = self.cap[:, d.total_cols]
        counted = cap > 0
        n = counted.sum(axis=1)
        refused = None
        if d.shape is not None:
            refused = self._refused.setdefault(
                d.shape, np.full(len(self.entries), -1, dtype=np.int64))
        got = self._rankings[d.ident] = _Ranking(
            static=ok, cap=cap, counted=counted, divisor=np.maximum(cap, 1),
            classes=np.maximum(n, 1), any_counted=n > 0, refused=refused)
        return got

    def rank(self, d: _Demand, *, remembered: bool = False) -> list[int]:
        """Rows of the children worth asking, best predicted fit first (ZoneTree's
        `prune_reason` and `predicted_fit` over every child at once). With
        `remembered`, also without the children that refused as much of this
        shape with nothing released below them since."""
        if d.unknown:
            return []
        self._fresh()
        r = self._for(d)
        ok = r.static
        # Amounts are at least 1, so a class a child lacks (largest 0) fails.
        for need in d.group_need:
            ok = ok & (self.largest_m >= need).all(axis=1)
        free = r.cap - self.used_m[:, d.total_cols]
        if d.atomic:
            ok = ok & (free >= d.total_need).all(axis=1)
        if remembered and r.refused is not None:
            ok = ok & (r.refused != self._releases)
        rows = np.flatnonzero(ok)
        if rows.size <= 1:
            return rows.tolist()
        # predicted_fit's share: the mean over counted classes of (free - need) / cap.
        shares = np.where(r.counted[rows], (free[rows] - d.total_need) / r.divisor[rows], 0.0)
        share = shares.sum(axis=1) / r.classes[rows]
        fit = np.where(r.any_counted[rows], 1.0 - share if d.pack else share, 0.0)
        order = np.lexsort((self._name_rank[rows], -fit))
        return rows[order].tolist()

    def schedule(self, req: ScheduleRequest, d: _Demand, outcomes: list[ZoneOutcome],
                 looked: list[MemoryZone] | None = None, *,
                 remembered: bool = False) -> tuple[MemoryZone, Plan] | None:
        """Delegate: ask the children best first; the first that plans wins.

        Zones refuse without counting their explain funnel (only the request's
        final refusal needs one); `looked` collects the zones that refused, now
        or before, in order, for the caller to explain. `remembered`: skip the
        children the vector failure memory rules out (`rank`), without listing
        them: a fast first pass, to be repeated without it if nothing is found,
        so that a refusal lists them as ZoneTree would.
        """
        looked = [] if looked is None else looked
        for row in self.rank(d, remembered=remembered):
            e = self.entries[row]
            freed = e.freed()
            refused = self.failures.blocks(e.name, d.shape, freed)
            if refused is not None:
                outcomes.append(ZoneOutcome(e.name, Result.PRUNED, f"pruned: {REFUSED_BEFORE} "
                                            f"({refused.reason})", refused.explain))
                if isinstance(e, MemoryZone):
                    looked.append(e)
                continue
            if isinstance(e, MemoryZone):
                try:
                    return e, e.plan(req, explain=False)
                except NoValidPlacement as exc:
                    looked.append(e)
                    out = ZoneOutcome(e.name, Result.NO_VALID_PLACEMENT, exc.detail, None)
            else:
                assert isinstance(e, MemoryRouter)
                below: list[ZoneOutcome] = []
                got = e.schedule(req, d, below, looked, remembered=remembered)
                if got is not None:
                    return got
                out = ZoneOutcome(e.name, Result.NO_VALID_PLACEMENT,
                                  "; ".join(o.reason for o in below),
                                  {"zone": e.name, "children": [o.as_dict() for o in below]})
            self.failures.note(e.name, d.shape, freed, Refusal(out.reason, out.explain))
            if d.shape is not None:
                self._note_refusal(row, d.shape)
            outcomes.append(out)
        return None

    def explain(self, req: ScheduleRequest, asked: list[ZoneOutcome]) -> dict[str, Any]:
        """A refusal's explain as ZoneTree writes it: the children asked, then the
        pruned ones with the reason `prune_reason` gives for each."""
        seen = {o.zone for o in asked}
        outcomes = list(asked)
        for e in self.entries:
            if e.name in seen:
                continue
            why = prune_reason(req, e.summary(self.classes), e.prefix, e.zone_tags)
            outcomes.append(ZoneOutcome(e.name, Result.PRUNED, why or "pruned"))
        return {"zone": self.name, "children": [o.as_dict() for o in outcomes]}

    def fits(self, req: ScheduleRequest) -> list[tuple[float, str]]:
        """(predicted fit, name) of the children ZoneTree would ask, best first,
        through its own functions (slow; for tests of `rank`)."""
        scored = []
        for e in self.entries:
            s = e.summary(self.classes)
            if prune_reason(req, s, e.prefix, e.zone_tags) is None:
                scored.append((predicted_fit(req, s), e.name))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return scored


class MemoryTreeTarget:
    """The scenario's zone tree (or one zone), deciding in memory."""

    def __init__(self, hosts: Sequence[HostSpec], scenario: Scenario, *,
                 flat: bool = False) -> None:
        self.name = "strato-memory" if flat else "strato-tree-memory"
        levels = scenario.levels
        classes = sorted({rc for h in hosts for rc in h.inventory})
        self.col = {rc: j for j, rc in enumerate(classes)}
        self.zones: list[MemoryZone] = []
        if flat:
            zone = MemoryZone("sim", hosts, levels=levels, classes=classes)
            self.zones.append(zone)
            self.root = MemoryRouter("sim", [zone], classes=classes)
        else:
            self.root = self._build(scenario, hosts, levels, classes)
        # The root is a router even over one zone (which it then does not prune).
        self.owner: dict[str, MemoryZone] = {}
        self._templates: dict[tuple[str, int, bool], ScheduleRequest] = {}
        self._demands: dict[tuple[str, int, bool], _Demand] = {}

    def _build(self, scenario: Scenario, hosts: Sequence[HostSpec],
               levels: tuple[str, ...], classes: list[str]) -> MemoryRouter:
        zones = scenario.zones()
        by_zone: dict[str, list[HostSpec]] = {}
        for h in hosts:
            by_zone.setdefault(h.zone, []).append(h)
        nodes: dict[str, _Node] = {}
        # Depth first lists parents before children: build bottom-up.
        for path, z in reversed(zones):
            below = [h for p, hs in by_zone.items()
                     if p == path or p.startswith(path + "/") for h in hs]
            prefix = zone_prefix(z.site, below)
            own = by_zone.get(path, [])
            kids = [nodes[p] for p, _ in zones if p.rsplit("/", 1)[0] == path and p in nodes]
            if own and not kids:
                leaf = MemoryZone(z.name, own, levels=levels, classes=classes, prefix=prefix,
                                  zone_tags=tuple(z.tags), path=path)
                self.zones.append(leaf)
                nodes[path] = leaf
                continue
            entries: list[_Node] = []
            if own:
                local = MemoryZone(LOCAL, own, levels=levels, classes=classes, prefix=prefix,
                                   zone_tags=tuple(z.tags), path=path)
                # A zone prunes its own providers by their summary alone.
                local.prefix, local.zone_tags = None, ()
                self.zones.append(local)
                entries.append(local)
            entries += kids
            if entries:
                nodes[path] = MemoryRouter(z.name, entries, classes=classes, prefix=prefix,
                                           zone_tags=tuple(z.tags))
        root = nodes[zones[0][0]]
        if isinstance(root, MemoryZone):
            return MemoryRouter(root.name, [root], classes=classes)
        assert isinstance(root, MemoryRouter)
        return root

    def _request(self, request: SimRequest) -> ScheduleRequest:
        """The request body, validated once per shape (a shape's resources, traits,
        rules and weigher never change; consumers and group do)."""
        key = (request.shape, len(request.consumers), request.group is None)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = ScheduleRequest.model_validate(
                schedule_body(request))
            return template
        return template.model_copy(update={"consumers": list(request.consumers),
                                           "group": request.group})

    def schedule(self, request: SimRequest) -> Outcome:
        req = self._request(request)
        if len(self.zones) == 1:
            # One zone: no routing, as a server without children plans at once.
            zone = self.zones[0]
            try:
                plan = zone.plan(req)
            except NoValidPlacement as exc:
                return Outcome(reason=reason_from_explain(exc.explain), detail=exc.detail)
        else:
            asked: list[ZoneOutcome] = []
            looked: list[MemoryZone] = []
            key = (request.shape, len(request.consumers), request.group is None)
            d = self._demands.get(key)
            if d is None:
                d = self._demands[key] = demand_of(req, self.col)
            got = self.root.schedule(req, d, asked, looked, remembered=True)
            if got is None:
                # Nothing: again without the vector memory, for the refusal's
                # explain (the same children refuse; they are listed now).
                asked, looked = [], []
                got = self.root.schedule(req, d, asked, looked)
            if got is None:
                if looked:
                    # The first zone that looked says why (as ZoneTree's explain
                    # is read): its funnel, counted now, on the same state.
                    try:
                        looked[0].plan(req)
                    except NoValidPlacement as exc:
                        return Outcome(reason=reason_from_explain(exc.explain),
                                       detail=exc.detail)
                    raise RuntimeError(f"zone {looked[0].path} refused, then planned")
                return Outcome(reason=reason_from_explain(self.root.explain(req, asked)),
                               detail="no valid placement")
            zone, plan = got
        placed = zone.claim(req, plan)
        for p in placed:
            self.owner[p.consumer] = zone
        return Outcome(placements=tuple(placed), relaxed=len(plan.relaxed))

    def release(self, consumers: Sequence[str]) -> None:
        for c in consumers:
            zone = self.owner.pop(c, None)
            if zone is not None:
                zone.release(c)

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        return [z.snapshot() for z in self.zones]

    def close(self) -> None:
        self.owner.clear()
