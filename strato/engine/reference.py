"""A slow, obviously-correct allocation candidates implementation, for tests.

Plain Python over provider records, following Placement's algorithm step by
step: candidates per request group, each tied to an anchor tree; merged per
anchor; then group policy, same_subtree, capacity, ranking and limit. It
shares no code with the engine except the record and request types.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strato.engine.records import ProviderRecord
from strato.engine.request import CandidateRequest, GroupPolicy, RequestGroup

SHARING = "MISC_SHARES_VIA_AGGREGATE"


@dataclass(frozen=True, slots=True)
class RefCandidate:
    # ((provider uuid, class, amount), ...) sorted
    items: tuple[tuple[str, str, int], ...]
    # ((suffix, (provider uuids sorted)), ...) sorted by suffix
    mappings: tuple[tuple[str, tuple[str, ...]], ...]
    score: float


@dataclass(frozen=True, slots=True)
class _Part:
    anchor: str
    items: tuple[tuple[str, str, int], ...]
    providers: frozenset[str]


class _World:
    def __init__(self, records: Iterable[ProviderRecord]) -> None:
        self.p = {r.uuid: r for r in records}

    def root(self, u: str) -> str:
        return self.p[u].root

    def roots(self) -> list[str]:
        return sorted(u for u in self.p if self.p[u].parent_uuid is None)

    def ancestors(self, u: str) -> set[str]:
        out = {u}
        while self.p[u].parent_uuid is not None:
            u = self.p[u].parent_uuid  # type: ignore[assignment]
            out.add(u)
        return out

    def fits(self, u: str, rc: str, amount: int) -> bool:
        inv = self.p[u].inventories.get(rc)
        if inv is None:
            return False
        used = self.p[u].used.get(rc, 0)
        return (used + amount <= inv.capacity and inv.min_unit <= amount <= inv.max_unit
                and amount % inv.step_size == 0)

    def has_all(self, traits: frozenset[str], required: tuple[tuple[str, ...], ...]) -> bool:
        return all(any(t in traits for t in anyof) for anyof in required)

    def in_aggs(self, u: str, member_of: tuple[tuple[str, ...], ...]) -> bool:
        return all(any(a in self.p[u].aggregates for a in anyof) for anyof in member_of)

    def bad(self, u: str, forbidden_aggs: tuple[str, ...]) -> bool:
        return any(a in self.p[u].aggregates for a in forbidden_aggs)

    def no_forbidden(self, u: str, forbidden: tuple[str, ...]) -> bool:
        return not any(t in self.p[u].traits for t in forbidden)

    def anchors_of_sharing(self, s: str) -> set[str]:
        aggs = self.p[s].aggregates
        return {self.root(q) for q in self.p if self.p[q].aggregates & aggs}


def reference_candidates(records: Iterable[ProviderRecord], request: CandidateRequest, *,
                         weigher: str = "spread",
                         class_weights: Mapping[str, float] | None = None
                         ) -> list[RefCandidate]:
    w = _World(records)
    anchors_ok = {t for t in w.roots()
                  if w.has_all(w.p[t].traits, request.root_required)
                  and w.no_forbidden(t, request.root_forbidden)}
    per_group: dict[str, list[_Part]] = {}
    for g in request.groups:
        tree_root: str | None = None
        if g.in_tree is not None:
            if g.in_tree not in w.p:
                return []
            tree_root = w.root(g.in_tree)
        if g.granular or not g.resources:
            parts = _single_parts(w, g, tree_root, anchors_ok)
        else:
            parts = _tree_parts(w, g, tree_root, anchors_ok)
        if not parts:
            return []
        per_group[g.suffix] = parts
    merged = _merge(w, request, per_group)
    weights = dict(class_weights or {})
    scored = [RefCandidate(items=i, mappings=m, score=_score(w, i, weigher, weights))
              for i, m in merged]
    scored.sort(key=lambda c: (-c.score, _key(c)))
    if request.limit is not None:
        scored = scored[: request.limit]
    return scored


def _single_parts(w: _World, g: RequestGroup, tree_root: str | None,
                  anchors_ok: set[str]) -> list[_Part]:
    parts = []
    for u in sorted(w.p):
        if tree_root is not None and w.root(u) != tree_root:
            continue
        if not all(w.fits(u, rc, a) for rc, a in g.resources):
            continue
        if not (w.has_all(w.p[u].traits, g.required) and w.no_forbidden(u, g.forbidden)):
            continue
        if not w.in_aggs(u, g.member_of) or w.bad(u, g.forbidden_aggs):
            continue
        anchors = {w.root(u)}
        if SHARING in w.p[u].traits:
            anchors |= w.anchors_of_sharing(u)
        items = tuple((u, rc, a) for rc, a in g.resources)
        parts += [_Part(t, items, frozenset({u})) for t in sorted(anchors) if t in anchors_ok]
    return parts


def _tree_parts(w: _World, g: RequestGroup, tree_root: str | None,
                anchors_ok: set[str]) -> list[_Part]:
    parts = []
    for t in w.roots():
        if t not in anchors_ok or (tree_root is not None and t != tree_root):
            continue
        options: list[list[str]] = []
        for rc, a in g.resources:
            opts = [u for u in sorted(w.p) if w.root(u) == t and w.fits(u, rc, a)
                    and (w.in_aggs(u, g.member_of) or w.in_aggs(t, g.member_of))
                    and not w.bad(u, g.forbidden_aggs) and not w.bad(t, g.forbidden_aggs)
                    and w.no_forbidden(u, g.forbidden)]
            if tree_root is None:
                opts += [s for s in sorted(w.p) if s not in opts and SHARING in w.p[s].traits
                         and t in w.anchors_of_sharing(s) and w.fits(s, rc, a)
                         and w.in_aggs(s, g.member_of) and not w.bad(s, g.forbidden_aggs)
                         and not w.bad(t, g.forbidden_aggs) and w.no_forbidden(s, g.forbidden)]
            options.append(opts)
        for combo in itertools.product(*options):
            union = frozenset().union(*(w.p[u].traits for u in combo))
            if not w.has_all(union, g.required):
                continue
            items = tuple((u, rc, a) for u, (rc, a) in zip(combo, g.resources, strict=True))
            parts.append(_Part(t, items, frozenset(combo)))
    return parts


_Items = tuple[tuple[str, str, int], ...]
_Maps = tuple[tuple[str, tuple[str, ...]], ...]


def _merge(w: _World, request: CandidateRequest, per_group: dict[str, list[_Part]]
           ) -> list[tuple[_Items, _Maps]]:
    suffixes = sorted(per_group)
    anchors = set.intersection(*({p.anchor for p in per_group[s]} for s in suffixes))
    seen: dict[tuple[_Items, _Maps], None] = {}
    for t in sorted(anchors):
        lists = [[p for p in per_group[s] if p.anchor == t] for s in suffixes]
        for combo in itertools.product(*lists):
            mapping = dict(zip(suffixes, combo, strict=True))
            if request.group_policy is GroupPolicy.ISOLATE:
                gran = [next(iter(mapping[s].providers)) for s in suffixes if s]
                if len(set(gran)) != len(gran):
                    continue
            if not all(_same_subtree(w, {u for s in sub for u in mapping[s].providers})
                       for sub in request.same_subtree):
                continue
            totals: dict[tuple[str, str], int] = {}
            for part in combo:
                for u, rc, a in part.items:
                    totals[(u, rc)] = totals.get((u, rc), 0) + a
            if not all(_fits_total(w, u, rc, a) for (u, rc), a in totals.items()):
                continue
            provs = {u for u, _ in totals}
            if not request.nested_aware and len({w.root(u) for u in provs}) != len(provs):
                continue
            items = tuple(sorted((u, rc, a) for (u, rc), a in totals.items()))
            maps = tuple((s, tuple(sorted(mapping[s].providers))) for s in suffixes)
            seen[(items, maps)] = None
    return list(seen)


def _fits_total(w: _World, u: str, rc: str, amount: int) -> bool:
    inv = w.p[u].inventories[rc]
    return w.p[u].used.get(rc, 0) + amount <= inv.capacity and amount <= inv.max_unit


def _same_subtree(w: _World, providers: set[str]) -> bool:
    if len(providers) <= 1:
        return True
    common = set.intersection(*(w.ancestors(u) for u in providers))
    return bool(common & providers)


def _score(w: _World, items: tuple[tuple[str, str, int], ...], weigher: str,
           weights: Mapping[str, float]) -> float:
    num = den = 0.0
    for u, rc, a in items:
        inv = w.p[u].inventories[rc]
        cap = inv.capacity
        share = min(max((cap - w.p[u].used.get(rc, 0) - a) / cap, 0.0), 1.0) if cap > 0 else 0.0
        s = share if weigher == "spread" else 1.0 - share
        num += weights.get(rc, 1.0) * s
        den += weights.get(rc, 1.0)
    return num / den if den > 0 else 0.0


def _key(c: RefCandidate) -> tuple[str, ...]:
    return tuple(u for _, provs in c.mappings for u in provs)
