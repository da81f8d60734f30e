"""Allocation candidates from an index snapshot: pure, no database.

Semantics are Placement's (GET /allocation_candidates up to 1.39):

* a granular group is served by one provider that itself has the resources,
  traits and aggregates; the unsuffixed group may be spread over providers of
  one tree plus sharing providers, and its traits are checked on the union of
  the providers it uses;
* every candidate has an *anchor* tree: the tree of its non-sharing
  providers. Sharing providers serve the trees they share an aggregate with;
* ``root_required`` filters anchors; ``group_policy=isolate`` wants distinct
  providers for the granular groups; ``same_subtree`` wants one of the named
  groups' providers to be an ancestor (or self) of all the others;
* the merged candidate must still fit: used + amount <= capacity, and
  amount <= max_unit, per provider and class.

How it stays fast: trees made of a single provider with no sharing provider
involved (the vast majority) are decided and scored with numpy over all
providers at once. Only the remaining "complex" trees (nested providers or
sharing providers) are enumerated in Python; with a limit, they are visited
best bound first and the walk stops once no tree can beat the current
k-th candidate.

How it stays bounded: the enumeration is a product of each group's options,
which grows as (providers per tree) ** (groups): 4 granular groups over a
host with 40 children are 2.56 million combinations. A request examines at
most `Budget.combinations` of them, and one tree at most `Budget.per_tree`
(so the walk goes on to other trees: breadth across roots, as Placement's
breadth-first generation strategy does). A tree whose product is over the
per-tree cap has each group's options ordered best first, so the
combinations that are examined are the likeliest to rank. The budget is the
request's, set by the caller (`budget()`), shared by every `build` of it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strato.engine import filters
from strato.engine.filters import GroupMasks
from strato.engine.index import BoolArray, ProviderIndex
from strato.engine.request import CandidateRequest, GroupPolicy, RequestGroup
from strato.engine.weighers import FloatArray, Scorer

# (position, resource class, amount)
Item = tuple[int, str, int]
NEG_INF = -np.inf
# Scores are means of item scores; a bound is a max of item scores. Rounding
# could put a mean a hair above the max: compare bounds with this slack.
EPS = 1e-9


# Defaults: about a second of enumeration on this project's reference machine
# (~20 µs a combination), and enough for every tree of real hardware (8 NUMA
# nodes x 8 devices x 4 groups is 4,096 combinations).
MAX_COMBINATIONS = 100_000
MAX_PER_TREE = 10_000
# What a request may examine on an event loop (about 20 ms) before it is moved
# to a worker thread: the scheduler's plans, and candidates with a limit.
INLINE_COMBINATIONS = 1_000


class TooBig(Exception):
    """A budget that escalates ran out: plan this request where it may take longer."""


class Budget:
    """Combinations one request may examine (see the module's docstring).

    Spent, it stops the enumeration (what was found so far is the answer), or,
    with `escalate`, raises `TooBig`: an event loop plans a cheap request
    itself and hands an expensive one to a worker thread."""

    __slots__ = ("allowed", "combinations", "escalate", "exhausted", "per_tree")

    def __init__(self, combinations: int = MAX_COMBINATIONS, per_tree: int = MAX_PER_TREE,
                 *, escalate: bool = False) -> None:
        self.allowed = self.combinations = combinations
        self.per_tree = max(1, min(per_tree, combinations))
        self.escalate = escalate
        self.exhausted = False

    def cut(self) -> None:
        """A tree's share is spent: the search is no longer complete."""
        self.exhausted = True
        if self.escalate:
            raise TooBig()

    def take(self, n: int = 1) -> bool:
        """Spend `n`; False (or TooBig) when nothing is left."""
        if self.combinations < n:
            self.exhausted = True
            if self.escalate:
                raise TooBig()
            return False
        self.combinations -= n
        return True


_BUDGET: ContextVar[Budget | None] = ContextVar("strato_candidate_budget", default=None)


@contextmanager
def budget(b: Budget | None = None, *, combinations: int | None = None
           ) -> Iterator[Budget]:
    """Every `build` inside shares `b` (contextvars follow worker threads).
    Without `b`: the budget already set, else a new one of `combinations`."""
    if b is None:
        current = _BUDGET.get()
        if current is not None:
            yield current
            return
        b = Budget(MAX_COMBINATIONS if combinations is None else combinations)
    token = _BUDGET.set(b)
    try:
        yield b
    finally:
        _BUDGET.reset(token)


def spent() -> int | None:
    """How many combinations the current budget let the request examine, if
    the search was cut short by it (in all, or on one tree)."""
    b = _BUDGET.get()
    return b.allowed - b.combinations if b is not None and b.exhausted else None


def _spend() -> Budget:
    b = _BUDGET.get()
    if b is None:  # a caller outside build(): the per-tree cap still holds
        b = Budget()
    return b


@dataclass(frozen=True, slots=True)
class Candidate:
    # Consolidated: one item per (provider, class), sorted.
    items: tuple[Item, ...]
    # suffix -> positions of the providers serving that group (sorted).
    mappings: tuple[tuple[str, tuple[int, ...]], ...]
    score: float
    # Deterministic tie-break (provider uuids by group), or random.
    key: tuple[str, ...]

    @property
    def identity(self) -> tuple[tuple[Item, ...], tuple[tuple[str, tuple[int, ...]], ...]]:
        return self.items, self.mappings

    def sort_key(self) -> tuple[float, tuple[str, ...]]:
        return -self.score, self.key


@dataclass(slots=True)
class _Context:
    """Per-request work done once, before the stages (kube-scheduler's CycleState)."""

    index: ProviderIndex
    request: CandidateRequest
    scorer: Scorer
    groups: list[RequestGroup]
    masks: list[GroupMasks]
    anchor_ok: BoolArray
    anchors: dict[int, npt.NDArray[np.int32]]
    # Per group: sharing providers eligible for that group (position -> anchors).
    sharing_single: list[list[int]]
    sharing_entry: list[dict[str, list[int]]]
    rng: np.random.Generator | None
    max_candidates: int


def build(index: ProviderIndex, request: CandidateRequest, scorer: Scorer, *,
          max_candidates: int = -1, seed: int | None = None,
          exclude: BoolArray | None = None) -> list[Candidate]:
    """Candidates for `request`, best first, at most `request.limit` of them.

    `exclude` (a mask over index rows) leaves providers out as if they did not
    exist: the scheduler's zone rules (stale hosts, location, tags, spread).
    """
    fast = _plain(index, request, scorer, exclude)
    if fast is not None:
        return fast
    with budget():
        return _build(index, request, scorer, max_candidates, seed, exclude)


def _build(index: ProviderIndex, request: CandidateRequest, scorer: Scorer,
           max_candidates: int, seed: int | None, exclude: BoolArray | None
           ) -> list[Candidate]:
    ctx = _prepare(index, request, scorer, max_candidates, seed, exclude)
    if ctx is None:
        return []
    complex_roots = _complex_roots(ctx)
    simple = _simple_positions(ctx, complex_roots)
    simple_scores = _simple_scores(ctx, simple)
    viable, bounds = _complex_viable(ctx, complex_roots)
    limit = request.limit
    if limit is not None:
        ranked = _ranked_with_limit(ctx, _top_simple(ctx, simple, simple_scores, limit),
                                    viable, bounds, limit)
        assert ranked is not None  # exhaustive
        return ranked
    return _all_ranked(ctx, simple, simple_scores, viable)


def _all_ranked(ctx: _Context, simple: npt.NDArray[np.int64], simple_scores: FloatArray,
                viable: npt.NDArray[np.int64]) -> list[Candidate]:
    """Every candidate, best first (no limit)."""
    simple_sorted = _sorted_simple(ctx, simple, simple_scores)
    complex_cands = _dedupe(c for t in viable.tolist() for c in _enumerate_tree(ctx, t))
    complex_cands.sort(key=Candidate.sort_key)
    merged = list(heapq.merge(simple_sorted, complex_cands, key=Candidate.sort_key))
    return _cap(ctx, merged)


def _plain(index: ProviderIndex, request: CandidateRequest, scorer: Scorer,
           exclude: BoolArray | None) -> list[Candidate] | None:
    """The most common request, answered in a few vector operations: one group
    of resources only (no traits, aggregates or tree), a limit, deterministic
    ties, over an index of single-provider trees with no sharing provider.
    The general path gives the same answer for it, with more steps. None:
    not that request, or not that index."""
    if len(request.groups) != 1 or request.limit is None or scorer.config.randomize:
        return None
    g = request.groups[0]
    if (g.required or g.forbidden or g.member_of or g.forbidden_aggs
            or g.in_tree is not None or request.root_required or request.root_forbidden):
        return None
    n = index.size
    if index.layout().nested_root[:n].any() or index.sharing_anchors():
        return None
    if any(index.rc_columns(rc) is None for rc, _ in g.resources):
        return []
    ctx = _Context(index=index, request=request, scorer=scorer, groups=[g], masks=[],
                   anchor_ok=np.zeros(0, dtype=bool), anchors={}, sharing_single=[[]],
                   sharing_entry=[{}], rng=None, max_candidates=-1)
    # What fits and its score, before exclusions, are kept until the index
    # moves: the scheduler asks again with fewer exclusions when the first
    # ask finds nothing (spare hosts, then all), and other zones' requests
    # come between a zone's own.
    key = (index.version, index.structure_version, n, g, scorer.config.name,
           tuple(sorted(scorer.config.class_weights.items())))
    kept = index.derived.get(_PLAIN_KEY)
    if kept is not None and kept[0] == key:
        fit, scores = kept[1], kept[2]
    else:
        fit = index.live().copy()  # every live provider is a root here
        for rc, amount in g.resources:
            fit &= filters.fits(index, rc, amount)
        positions = np.flatnonzero(fit)
        scores = np.zeros(n, dtype=np.float64)
        scores[positions] = _simple_scores(ctx, positions)
        index.derived[_PLAIN_KEY] = (key, fit, scores)
    ok = fit if exclude is None else fit & ~exclude[:n]
    positions = np.flatnonzero(ok)
    return _top_simple(ctx, positions, scores[positions], request.limit)


_PLAIN_KEY = "plain-fit"


# -- preparation -------------------------------------------------------------

def _groups(index: ProviderIndex, request: CandidateRequest
            ) -> list[tuple[RequestGroup, int | None]] | None:
    """The groups in suffix order, each with its in_tree root position; None
    when nothing can match (a class no provider has, an unknown in_tree)."""
    groups = sorted(request.groups, key=lambda g: g.suffix)
    if any(index.rc_columns(rc) is None for g in groups for rc in g.resource_classes):
        return None
    out: list[tuple[RequestGroup, int | None]] = []
    for g in groups:
        root: int | None = None
        if g.in_tree is not None:
            p = index.pos.get(g.in_tree)
            if p is None or not index.alive[p]:
                return None  # no such provider: nothing can match (as Placement)
            root = int(index.root[p])
        out.append((g, root))
    return out


def _prepare(index: ProviderIndex, request: CandidateRequest, scorer: Scorer,
             max_candidates: int, seed: int | None,
             exclude: BoolArray | None = None,
             statics: Sequence[filters.GroupStatic] | None = None) -> _Context | None:
    found = _groups(index, request)
    if found is None:
        return None
    groups = [g for g, _ in found]
    masks: list[GroupMasks] = [
        filters.group_masks(index, g, root, statics[i] if statics is not None else None)
        for i, (g, root) in enumerate(found)]
    anchor_ok = filters.anchor_roots(index, request.root_required, request.root_forbidden)
    if exclude is not None:
        _apply_exclude(masks, exclude)
        anchor_ok = anchor_ok & ~exclude
    anchors = index.sharing_anchors()
    sharing_single: list[list[int]] = []
    sharing_entry: list[dict[str, list[int]]] = []
    for m in masks:
        sharing_single.append([s for s in anchors if m.single[s]] if m.group.granular else [])
        sharing_entry.append({rc: [s for s in anchors if mask[s]]
                              for rc, mask in m.shared_entry.items()})
    rng = np.random.default_rng(seed) if scorer.config.randomize else None
    return _Context(index=index, request=request, scorer=scorer, groups=groups, masks=masks,
                    anchor_ok=anchor_ok, anchors=anchors, sharing_single=sharing_single,
                    sharing_entry=sharing_entry, rng=rng, max_candidates=max_candidates)


def _apply_exclude(masks: list[GroupMasks], exclude: BoolArray) -> None:
    keep = ~exclude
    for m in masks:
        m.fit = {rc: mask & keep for rc, mask in m.fit.items()}
        m.single = m.single & keep
        m.entry = {rc: mask & keep for rc, mask in m.entry.items()}
        m.shared_entry = {rc: mask & keep for rc, mask in m.shared_entry.items()}


def _complex_roots(ctx: _Context) -> BoolArray:
    """Trees that need enumeration: nested ones, and those a sharing provider
    eligible for some group may serve."""
    out = ctx.index.layout().nested_root[: ctx.index.size].copy()
    for i in range(len(ctx.groups)):
        for s in _all_sharing(ctx, i):
            out[ctx.anchors[s]] = True
    return out


def _all_sharing(ctx: _Context, i: int) -> set[int]:
    found = set(ctx.sharing_single[i])
    for lst in ctx.sharing_entry[i].values():
        found.update(lst)
    return found


# -- the vectorised path: single-provider trees ------------------------------

def _demand(groups: Sequence[RequestGroup]) -> dict[str, int]:
    """Total amount per class over all groups (what one provider must take)."""
    out: dict[str, int] = {}
    for g in groups:
        for rc, amount in g.resources:
            out[rc] = out.get(rc, 0) + amount
    return out


def _simple_positions(ctx: _Context, complex_roots: BoolArray) -> npt.NDArray[np.int64]:
    index, req = ctx.index, ctx.request
    if req.group_policy is GroupPolicy.ISOLATE and req.granular_count > 1:
        return np.zeros(0, dtype=np.int64)  # one provider cannot isolate two groups
    ok = ctx.anchor_ok & ~complex_roots
    for m in ctx.masks:
        ok &= m.single
    for rc, total in _demand(ctx.groups).items():
        if sum(1 for g in ctx.groups if rc in g.resource_classes) > 1:
            col = index.rc_columns(rc)
            assert col is not None  # every group with rc passed `fits`
            ok &= filters.takes(col, slice(0, index.size), total)
    return np.flatnonzero(ok)


def _simple_scores(ctx: _Context, positions: npt.NDArray[np.int64]) -> FloatArray:
    if len(positions) == 0:
        return np.zeros(0, dtype=np.float64)
    columns: dict[str, FloatArray] = {}
    for rc, total in _demand(ctx.groups).items():
        col = ctx.index.rc_columns(rc)
        assert col is not None
        cap = col.capacity[positions].astype(np.float64)
        free_after = cap - col.used[positions] - total
        columns[rc] = ctx.scorer.weigher.item_scores(free_after, cap)
    return ctx.scorer.combine(columns)


def _simple_candidate(ctx: _Context, p: int, score: float,
                      demand: Sequence[tuple[str, int]]) -> Candidate:
    items = tuple((p, rc, amount) for rc, amount in demand)
    mappings = tuple((g.suffix, (p,)) for g in ctx.groups)
    uuid = ctx.index.uuids[p]
    return Candidate(items=items, mappings=mappings, score=score,
                     key=_random_key(ctx) or (uuid,) * len(ctx.groups))


def _random_key(ctx: _Context) -> tuple[str, ...] | None:
    if ctx.rng is None:
        return None
    return (f"{int(ctx.rng.integers(0, 2**62)):019d}",)


def _tiebreak(ctx: _Context, positions: npt.NDArray[np.int64]
              ) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]:
    if ctx.rng is not None:
        r = ctx.rng.permutation(len(positions)).astype(np.uint64)
        return r, r
    return ctx.index.uuid_hi[positions], ctx.index.uuid_lo[positions]


def _sorted_simple(ctx: _Context, positions: npt.NDArray[np.int64], scores: FloatArray
                   ) -> list[Candidate]:
    return _simple_candidates(ctx, *_in_order(ctx, positions, scores))


def _in_order(ctx: _Context, positions: npt.NDArray[np.int64], scores: FloatArray
              ) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """`positions` and their scores, best first (ties by the tie-break key)."""
    hi, lo = _tiebreak(ctx, positions)
    order = np.lexsort((lo, hi, -scores))
    return positions[order], scores[order]


def _simple_candidates(ctx: _Context, positions: npt.NDArray[np.int64], scores: FloatArray
                       ) -> list[Candidate]:
    demand = sorted(_demand(ctx.groups).items())
    return [_simple_candidate(ctx, p, s, demand)
            for p, s in zip(positions.tolist(), scores.tolist(), strict=True)]


def _top_simple(ctx: _Context, positions: npt.NDArray[np.int64], scores: FloatArray,
                k: int) -> list[Candidate]:
    """The k best single-provider candidates."""
    return _simple_candidates(ctx, *_top_order(ctx, positions, scores, k))


def _top_order(ctx: _Context, positions: npt.NDArray[np.int64], scores: FloatArray,
               k: int) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The k best of `positions` and their scores, best first, in O(n): ties at
    the k-th score are resolved by the tie-break key on the tied providers only."""
    if len(positions) <= k:
        return _in_order(ctx, positions, scores)
    if k == 1:
        # The scheduler's usual ask: one pass for the best score, then the
        # tie-break among the providers that share it.
        kth = scores[int(np.argmax(scores))]
        tied = np.flatnonzero(scores == kth)
        if len(tied) > 1:
            hi, lo = _tiebreak(ctx, positions[tied])
            first = np.flatnonzero(hi == hi.min())
            if len(first) > 1:
                first = first[np.argmin(lo[first])][None]
            tied = tied[first[:1]]
        return _in_order(ctx, positions[tied], scores[tied])
    # The k-th best score: the best itself when k providers share it (an idle
    # cloud of like hosts: two passes), else a partition of the values (no
    # index array: several times cheaper than argpartition at 100,000).
    best = scores.max()
    top = scores == best
    if np.count_nonzero(top) >= k:
        kth = best
        above = np.zeros(0, dtype=np.int64)
        tied = np.flatnonzero(top)
    else:
        n = len(scores)
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
    need = k - len(above)
    if len(tied) > need:
        hi, lo = _tiebreak(ctx, positions[tied])
        cut = np.partition(hi, need - 1)[need - 1]
        keep = hi <= cut
        tied, hi, lo = tied[keep], hi[keep], lo[keep]
        tied = tied[np.lexsort((lo, hi))[:need]]
    chosen = np.concatenate([above, tied])
    return _in_order(ctx, positions[chosen], scores[chosen])


# -- the enumerated path: nested trees and sharing providers -----------------

def _complex_viable(ctx: _Context, complex_roots: BoolArray
                    ) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Complex roots where every group has at least one option, with an upper
    bound of the score of any candidate anchored there."""
    viable, best = _complex_state(ctx, complex_roots)
    positions = np.flatnonzero(viable)
    return positions, _bound(ctx, {rc: b[positions] for rc, b in best.items()})


def _complex_state(ctx: _Context, complex_roots: BoolArray
                   ) -> tuple[BoolArray, dict[str, FloatArray]]:
    """Per root: viable (a complex root where every group has an option), and
    per class the best item score any eligible provider could give it."""
    index = ctx.index
    n = index.size
    candidates = complex_roots & ctx.anchor_ok
    if not candidates.any():
        return candidates, {}
    in_complex = candidates[index.root[:n]]
    viable = candidates.copy()
    # Per class: the best item score any eligible provider could give each tree.
    best: dict[str, FloatArray] = {}
    for i, m in enumerate(ctx.masks):
        g = m.group
        single = g.granular or not g.resources
        if single:
            viable &= _reached(ctx, m.single & in_complex, ctx.sharing_single[i])
        for rc, amount in g.resources:
            members = m.single if single else m.entry[rc]
            sharing = ctx.sharing_single[i] if single else ctx.sharing_entry[i][rc]
            if not single:
                viable &= _reached(ctx, members & in_complex, sharing)
            _raise_bound(ctx, best.setdefault(rc, np.full(n, NEG_INF)), members & in_complex,
                         sharing, rc, amount)
    for b in best.values():
        viable &= b > NEG_INF
    return viable, best


def _bound(ctx: _Context, best: dict[str, FloatArray]) -> FloatArray:
    """Upper bound of a candidate's score from the best item score per class.

    When each class is asked by one group only, a candidate has exactly one
    item per class and its score is the weighted mean of those items, so the
    weighted mean of the per-class bests bounds it. Otherwise the number of
    items per class varies, and only the largest per-class best is safe.
    """
    if not best:
        return np.zeros(0, dtype=np.float64)
    counts: dict[str, int] = {}
    for g in ctx.groups:
        for rc in g.resource_classes:
            counts[rc] = counts.get(rc, 0) + 1
    if all(c == 1 for c in counts.values()):
        return ctx.scorer.combine(best)
    return np.max(np.vstack(list(best.values())), axis=0)


def _reached(ctx: _Context, members: BoolArray, sharing: list[int]) -> BoolArray:
    """Roots with an option: a qualifying member, or a sharing provider serving them."""
    out = np.zeros(ctx.index.size, dtype=bool)
    out[ctx.index.root[: ctx.index.size][members]] = True
    for s in sharing:
        out[ctx.anchors[s]] = True
    return out


def _raise_bound(ctx: _Context, best: FloatArray, members: BoolArray, sharing: list[int],
                 rc: str, amount: int) -> None:
    col = ctx.index.rc_columns(rc)
    if col is None:
        return
    idx = np.flatnonzero(members)
    sidx = np.asarray(sharing, dtype=np.int64)
    both = np.concatenate([idx, sidx])
    if len(both) == 0:
        return
    raw = _item_bounds(ctx, rc, amount, both)
    if len(idx):
        # Per tree, the best of its members' scores: one segmented max over the
        # members grouped by root (np.maximum.at was most of this function).
        lay = ctx.index.layout()
        vals = np.full(ctx.index.size, NEG_INF)
        vals[idx] = raw[: len(idx)]
        starts = lay.offsets[:-1]
        roots = np.flatnonzero(lay.offsets[1:] > starts)
        per_root = np.maximum.reduceat(vals[lay.members], starts[roots])
        best[roots] = np.maximum(best[roots], per_root)
    for j, s in enumerate(sharing):
        targets = ctx.anchors[s]
        best[targets] = np.maximum(best[targets], raw[len(idx) + j])


def _item_bounds(ctx: _Context, rc: str, amount: int, rows: npt.NDArray[np.int64]
                 ) -> FloatArray:
    """The best item score each of `rows` could give `rc` in a candidate."""
    col = ctx.index.rc_columns(rc)
    assert col is not None
    cap = col.capacity[rows].astype(np.float64)
    free = cap - col.used[rows]
    # Merged groups may take more than `amount`; a weigher is monotone in the
    # amount, so the larger of the two extremes bounds every case.
    total = _demand(ctx.groups)[rc]
    return np.maximum(ctx.scorer.weigher.item_scores(free - amount, cap),
                      ctx.scorer.weigher.item_scores(free - total, cap))


# One way to serve a group: its items, and the providers it maps to.
_Choice = tuple[tuple[Item, ...], tuple[int, ...]]


def _enumerate_tree(ctx: _Context, t: int) -> Iterator[Candidate]:
    members = ctx.index.tree_members(t)
    options: list[list[_Choice]] = []
    for i, m in enumerate(ctx.masks):
        opts = _group_options(ctx, i, m, t, members)
        if not opts:
            return
        options.append(opts)
    spend = _spend()
    if math.prod(len(o) for o in options) <= spend.per_tree:
        combos: Iterator[Sequence[_Choice]] = itertools.product(*options)
    else:
        combos = _diverse([_best_first(ctx, o) for o in options])
    for n, combo in enumerate(combos):
        if n >= spend.per_tree:
            spend.cut()
            return
        if not spend.take():
            return
        cand = _merge(ctx, combo)
        if cand is not None:
            yield cand


def _diverse(options: list[list[_Choice]]) -> Iterator[tuple[_Choice, ...]]:
    """Every combination of `options` (each list best first), in an order
    that is cut short: first the diagonals (group i takes option k + s*i),
    which put the groups on many different providers, and on the best ones
    first (s = 0 puts every group on its k-th best; s = 1 on consecutive
    ones, distinct as group_policy=isolate wants); then the rest in order.
    In plain product order, the first million combinations of 16 groups over
    40 providers would all put the first group on the same provider."""
    sizes = [len(o) for o in options]
    width = max(sizes)
    seen: set[tuple[int, ...]] = set()
    for shift in range(width):
        for k in range(width):
            at = tuple((k + shift * i) % n for i, n in enumerate(sizes))
            if at not in seen:
                seen.add(at)
                yield tuple(o[j] for o, j in zip(options, at, strict=True))
    for at in itertools.product(*(range(n) for n in sizes)):
        if at not in seen:
            yield tuple(o[j] for o, j in zip(options, at, strict=True))


def _best_first(ctx: _Context, options: list[_Choice]) -> list[_Choice]:
    """`options` by the score their own items would have alone, best first."""
    def score(choice: _Choice) -> float:
        rcs, free, caps = [], [], []
        for p, rc, a in choice[0]:
            col = ctx.index.rc_columns(rc)
            if col is None:
                continue
            cap = float(col.capacity[p])
            rcs.append(rc)
            free.append(cap - float(col.used[p]) - a)
            caps.append(cap)
        return ctx.scorer.items(rcs, free, caps)
    return sorted(options, key=score, reverse=True)


def _served(ctx: _Context, t: int, members: npt.NDArray[np.int32], mask: BoolArray,
            sharing: list[int]) -> list[int]:
    found = [int(p) for p in members[mask[members]]]
    seen = set(found)
    found += [s for s in sharing if s not in seen and _anchors_contain(ctx, s, t)]
    return found


def _anchors_contain(ctx: _Context, s: int, t: int) -> bool:
    arr = ctx.anchors[s]
    i = int(np.searchsorted(arr, t))
    return i < len(arr) and int(arr[i]) == t


def _group_options(ctx: _Context, i: int, m: GroupMasks, t: int,
                   members: npt.NDArray[np.int32]) -> list[_Choice]:
    g = m.group
    if g.granular or not g.resources:
        provs = _served(ctx, t, members, m.single, ctx.sharing_single[i])
        return [(tuple((p, rc, a) for rc, a in g.resources), (p,)) for p in provs]
    per_rc: list[list[int]] = []
    for rc, _ in g.resources:
        sharing = [s for s in ctx.sharing_entry[i][rc] if not m.bad_anchor[t]]
        provs = _served(ctx, t, members, m.entry[rc], sharing)
        if not provs:
            return []
        per_rc.append(provs)
    out: list[_Choice] = []
    traits = ctx.index.traits
    spend = _spend()
    for n, combo in enumerate(itertools.product(*per_rc)):
        if n >= spend.per_tree:
            spend.cut()
            break
        if not spend.take():
            break
        if g.required:
            have = frozenset().union(*(traits[p] for p in set(combo)))
            if not all(have.intersection(anyof) for anyof in g.required):
                continue
        items = tuple((p, rc, a) for p, (rc, a) in zip(combo, g.resources, strict=True))
        out.append((items, tuple(sorted(set(combo)))))
    return out


def _merge(ctx: _Context, combo: Sequence[_Choice]) -> Candidate | None:
    req = ctx.request
    if req.group_policy is GroupPolicy.ISOLATE:
        granular = [provs[0] for g, (_, provs) in zip(ctx.groups, combo, strict=True)
                    if g.granular]
        if len(set(granular)) != len(granular):
            return None
    mappings = {g.suffix: provs for g, (_, provs) in zip(ctx.groups, combo, strict=True)}
    for suffixes in req.same_subtree:
        if not _same_subtree(ctx.index, {p for s in suffixes for p in mappings.get(s, ())}):
            return None
    totals: dict[tuple[int, str], int] = {}
    for items, _ in combo:
        for p, rc, a in items:
            totals[(p, rc)] = totals.get((p, rc), 0) + a
    if not req.nested_aware and not _one_per_tree(ctx.index, totals):
        return None
    rcs: list[str] = []
    free_after: list[float] = []
    caps: list[float] = []
    for (p, rc), amount in totals.items():
        col = ctx.index.rc_columns(rc)
        assert col is not None
        cap, used = int(col.capacity[p]), int(col.used[p])
        if used + amount > cap or amount > int(col.max_unit[p]):
            return None
        rcs.append(rc)
        free_after.append(float(cap - used - amount))
        caps.append(float(cap))
    score = ctx.scorer.items(rcs, free_after, caps)
    items_sorted = tuple(sorted((p, rc, a) for (p, rc), a in totals.items()))
    maps = tuple(sorted(mappings.items()))
    uuids = ctx.index.uuids
    key = _random_key(ctx) or tuple(uuids[p] for _, provs in maps for p in
                                    sorted(provs, key=lambda q: uuids[q]))
    return Candidate(items=items_sorted, mappings=maps, score=score, key=key)


def _same_subtree(index: ProviderIndex, providers: set[int]) -> bool:
    """One of `providers` is an ancestor-or-self of all the others."""
    if len(providers) <= 1:
        return True
    common: set[int] | None = None
    for p in providers:
        chain = set(index.ancestors(p))
        common = chain if common is None else common & chain
    return bool(common and common & providers)


def _one_per_tree(index: ProviderIndex, totals: dict[tuple[int, str], int]) -> bool:
    provs = {p for p, _ in totals}
    return len({int(index.root[p]) for p in provs}) == len(provs)


# -- ranking -----------------------------------------------------------------

def _dedupe(cands: Iterator[Candidate] | list[Candidate]) -> list[Candidate]:
    seen: dict[object, Candidate] = {}
    for c in cands:
        seen.setdefault(c.identity, c)
    return list(seen.values())


def _ranked_with_limit(ctx: _Context, best: list[Candidate],
                       viable: npt.NDArray[np.int64], bounds: FloatArray,
                       k: int, exhaustive: bool = True) -> list[Candidate] | None:
    """The k best: `best` (the k best single-provider candidates, in order)
    merged with what the trees at `viable` (their score bounds `bounds`) give.

    `exhaustive=False`: `viable` are only the first trees in search order
    (engine/cache.py keeps them); None if the search would go past them."""
    pool: dict[object, Candidate] = {c.identity: c for c in best}
    ranked = sorted(pool.values(), key=Candidate.sort_key)
    order = np.arange(len(bounds))
    if len(ranked) >= k:
        # Trees the loop below would stop at already: the k-th score only rises.
        kth = ranked[k - 1].score
        order = np.flatnonzero(bounds > kth + EPS if ctx.request.skip_ties
                               else bounds + EPS >= kth)
    # Ties: in a cloud of like hosts many trees share the best bound, and a
    # candidate that only ties the k-th enters the top k by its tie-break key
    # (provider uuids) alone. Trees of equal bound go smallest uuid first; at
    # the first whose bound does not pass the k-th score and whose every
    # provider's uuid sorts after the k-th's key, the search stops: none of
    # its candidates, nor any later tree's, can do better than tie the k-th,
    # and each would lose the tie. (Exact: a candidate's score is at most its
    # tree's bound, not just within rounding; weighers.Scorer.) Not with
    # random tie-breaks, nor where a sharing provider from outside the tree
    # may come first in a key.
    by_key = (ctx.rng is None and not any(ctx.sharing_single)
              and not any(any(e.values()) for e in ctx.sharing_entry))
    tree_hi = ctx.index.layout().min_hi[viable[order]]
    perm = np.lexsort((tree_hi, -bounds[order]))
    order, tree_hi = order[perm], tree_hi[perm]
    kth_hi: tuple[str, int] | None = None  # (the k-th's key, that uuid's uuid_hi)
    for i, j in enumerate(order.tolist()):
        if len(ranked) >= k:
            last = ranked[k - 1]
            if bounds[j] + EPS < last.score:
                break  # no candidate of this or any later tree can enter the top k
            if ctx.request.skip_ties and bounds[j] <= last.score + EPS:
                break  # at best a tie with the k-th: not worth enumerating
            if by_key and last.key and bounds[j] <= last.score:
                if bounds[j] < last.score:
                    break  # nothing here or after can reach the k-th score
                if kth_hi is None or kth_hi[0] != last.key[0]:
                    kth_hi = (last.key[0], int(ctx.index.uuid_hi[ctx.index.pos[last.key[0]]]))
                if int(tree_hi[i]) > kth_hi[1]:
                    # It can only tie the k-th, and loses the tie; so does every
                    # tree after it (the same bound and larger uuids, or less).
                    break
        added = False
        for c in _enumerate_tree(ctx, int(viable[j])):
            if c.identity not in pool:
                pool[c.identity] = c
                added = True
            if 0 <= ctx.max_candidates <= len(pool):
                break
        if added:
            ranked = sorted(pool.values(), key=Candidate.sort_key)[: max(k, 1) * 4]
            pool = {c.identity: c for c in ranked}
        if 0 <= ctx.max_candidates <= len(pool):
            break
    else:
        # Not stopped: a later tree might still count, unless one of these
        # was left out above (every later tree would be too: its bound is
        # at most that one's).
        if not exhaustive and len(order) == len(bounds):
            return None
    return sorted(pool.values(), key=Candidate.sort_key)[:k]


def _cap(ctx: _Context, cands: list[Candidate]) -> list[Candidate]:
    if ctx.max_candidates >= 0:
        return cands[: ctx.max_candidates]
    return cands
