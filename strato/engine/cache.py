"""Candidate search state kept between requests of one shape.

A scheduler sees the same few request shapes over and over (a flavor, the
same exclusions), and between two of them only the rows its last claims
touched have changed. Recomputing every mask, score and tree bound over the
whole index for each request is the bulk of a plan's cost; this keeps them
per shape and redoes only the rows changed since (`ProviderIndex.row_version`)
and the rows whose exclusion changed, then ranks as `candidates.build` does.
The answer is the same list `build` gives (tests hold the two together).

Kept on the index (so a rebuilt index starts empty), at most MAX_ENTRIES
shapes, least recently used dropped first. A change of structure (trees,
traits, aggregates, providers added or removed) rebuilds an entry. Not used
with random tie-breaks or when sharing providers exist (a sharing provider's
row moves the bounds of every tree it serves).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from strato.engine import candidates as cb
from strato.engine import filters
from strato.engine.index import BoolArray, ProviderIndex
from strato.engine.request import CandidateRequest, GroupPolicy
from strato.engine.weighers import FloatArray, Scorer

MAX_ENTRIES = 16
# Past this share of changed rows, recomputing everything vectorised is cheaper.
FULL_SHARE = 0.25
# With a limit k, this many of the best single-provider rows are kept between
# requests (at least TOP_MIN): claims move the best rows down one by one, and
# a full pass is needed again only once fewer than k of them are left.
TOP_SHARE = 4
TOP_MIN = 32
_KEY = "candidate-cache"


@dataclass(slots=True)
class _Best:
    """The best rows of one kind, best first by key (a score, high first, then
    two tie-breaks, low first): exactly the rows of that kind whose key is at
    least `floor`, the last kept row's when the list was last cut; or every
    row of that kind (`complete`). Rows of `dropped` are not of that kind: a
    list built for requests that leave them out serves only those."""

    rows: npt.NDArray[np.int64]
    floor: tuple[float, int, int]
    complete: bool
    dropped: BoolArray | None = None


@dataclass(slots=True)
class _Entry:
    structure: int
    size: int
    version: int
    keep: BoolArray  # rows not excluded when last brought up to date
    ctx: cb._Context
    statics: list[filters.GroupStatic]
    anchor_static: BoolArray
    complex_roots: BoolArray
    simple_ok: BoolArray
    simple_score: FloatArray
    viable: BoolArray
    best: dict[str, FloatArray]
    multi: list[tuple[str, int]]  # classes asked by several groups: (class, total)
    bound: FloatArray  # per complex root: its score bound (NEG_INF: not viable)
    # With a limit: the best single-provider rows and the best trees, kept
    # between requests (None until first asked, or once too few are left).
    simple_top: _Best | None = None
    tree_top: _Best | None = None
    tree_keep: int = 0  # how many trees to keep (0: the default)


def build(index: ProviderIndex, request: CandidateRequest, scorer: Scorer, *,
          max_candidates: int = -1, seed: int | None = None,
          exclude: BoolArray | None = None) -> list[cb.Candidate]:
    """What `candidates.build` answers, from kept state where it can."""
    fast = cb._plain(index, request, scorer, exclude)
    if fast is not None:
        return fast
    with cb.budget():
        kept = build_kept(index, request, scorer, max_candidates=max_candidates,
                          exclude=exclude)
    if kept is not None:
        return kept
    return cb.build(index, request, scorer, max_candidates=max_candidates, seed=seed,
                    exclude=exclude)


def build_kept(index: ProviderIndex, request: CandidateRequest, scorer: Scorer, *,
               max_candidates: int = -1, exclude: BoolArray | None = None
               ) -> list[cb.Candidate] | None:
    """`candidates.build` from kept state; None when this request cannot use it."""
    if scorer.config.randomize or index.sharing_anchors():
        return None
    caches: OrderedDict[Any, _Entry] = index.derived.setdefault(_KEY, OrderedDict())
    weights = tuple(sorted(scorer.config.class_weights.items()))
    key = (request, scorer.config.name, weights, max_candidates)
    n = index.size
    keep = np.ones(n, dtype=bool)
    drop: BoolArray | None = None
    if exclude is not None and exclude[:n].any():
        ex = exclude[:n]
        if np.array_equal(ex, ex[index.root[:n]]):
            # Whole trees left out (the scheduler's rules, stale hosts): the
            # kept state stays as it is; the ranking skips those roots.
            drop = ex
        else:
            keep = ~ex
    entry = caches.get(key)
    if entry is not None and (entry.structure != index.structure_version or entry.size != n):
        entry = None
    if entry is None:
        entry = _new(index, request, scorer, max_candidates, keep)
        if entry is None:
            return []  # nothing can match (as build)
        caches[key] = entry
        while len(caches) > MAX_ENTRIES:
            caches.popitem(last=False)
    else:
        caches.move_to_end(key)
        rows = index.changed_since(entry.version)
        moved = np.flatnonzero(keep != entry.keep)
        if len(moved):
            rows = np.union1d(rows, moved)
        if len(rows) > FULL_SHARE * n:
            entry = _new(index, request, scorer, max_candidates, keep)
            if entry is None:
                return []
            caches[key] = entry
        elif len(rows):
            _update(entry, index, rows, keep)
        entry.version = index.version
    return _ranked(entry, drop)


def _new(index: ProviderIndex, request: CandidateRequest, scorer: Scorer,
         max_candidates: int, keep: BoolArray) -> _Entry | None:
    found = cb._groups(index, request)
    if found is None:
        return None
    statics = [filters.group_static(index, g, root) for g, root in found]
    exclude = None if keep.all() else ~keep
    ctx = cb._prepare(index, request, scorer, max_candidates, None, exclude, statics)
    if ctx is None:
        return None
    n = index.size
    complex_roots = cb._complex_roots(ctx)
    simple = cb._simple_positions(ctx, complex_roots)
    simple_ok = np.zeros(n, dtype=bool)
    simple_ok[simple] = True
    simple_score = np.zeros(n, dtype=np.float64)
    simple_score[simple] = cb._simple_scores(ctx, simple)
    viable, best = cb._complex_state(ctx, complex_roots)
    demand = cb._demand(ctx.groups)
    multi = [(rc, total) for rc, total in demand.items()
             if sum(1 for g in ctx.groups if rc in g.resource_classes) > 1]
    # Every class asked has a bound array, so that a tree can become viable later.
    for rc in demand:
        best.setdefault(rc, np.full(n, cb.NEG_INF))
    bound = np.full(n, cb.NEG_INF)
    roots = np.flatnonzero(viable)
    if len(roots):
        bound[roots] = cb._bound(ctx, {rc: b[roots] for rc, b in best.items()})
    return _Entry(structure=index.structure_version, size=n, version=index.version,
                  keep=keep, ctx=ctx, statics=statics,
                  anchor_static=filters.anchor_roots(index, request.root_required,
                                                     request.root_forbidden),
                  complex_roots=complex_roots, simple_ok=simple_ok,
                  simple_score=simple_score, viable=viable.copy(), best=best, multi=multi,
                  bound=bound)


def _update(e: _Entry, index: ProviderIndex, rows: npt.NDArray[np.int64],
            keep: BoolArray) -> None:
    """Bring masks, simple scores and tree bounds up to date on `rows`."""
    ctx = e.ctx
    k = keep[rows]
    for m, st in zip(ctx.masks, e.statics, strict=True):
        single = st.single[rows] & k
        for rc, amount in m.group.resources:
            fit = filters.fits_rows(index, rc, amount, rows) & st.tree[rows] & k
            m.fit[rc][rows] = fit
            single &= fit
            if st.tree_ok is not None and st.sharing is not None:
                m.entry[rc][rows] = fit & st.tree_ok[rows]
                m.shared_entry[rc][rows] = fit & st.sharing[rows]
        m.single[rows] = single
    ctx.anchor_ok[rows] = e.anchor_static[rows] & k
    e.keep = keep
    # Single-provider trees: as candidates._simple_positions and _simple_scores
    # (none for `isolate` over two granular groups: one provider cannot).
    ok = ctx.anchor_ok[rows] & ~e.complex_roots[rows]
    if ctx.request.group_policy is GroupPolicy.ISOLATE and ctx.request.granular_count > 1:
        ok[:] = False
    for m in ctx.masks:
        ok &= m.single[rows]
    for rc, total in e.multi:
        col = index.rc_columns(rc)
        assert col is not None
        ok &= filters.takes(col, rows, total)
    e.simple_ok[rows] = ok
    simple = rows[ok]
    if len(simple):
        e.simple_score[simple] = cb._simple_scores(ctx, simple)
    # Trees to enumerate: as candidates._complex_state, for the changed trees.
    trees = np.unique(index.root[rows])
    trees = trees[e.complex_roots[trees]]
    if len(trees):
        _trees_state(e, index, trees)
    limit = ctx.request.limit or 1
    e.simple_top = _renewed(e.simple_top, rows, e.simple_ok, _simple_key(e, index),
                            _keep_count(limit))
    e.tree_top = _renewed(e.tree_top, trees.astype(np.int64), e.viable, _tree_key(e, index),
                          e.tree_keep or _keep_count(limit))


def _trees_state(e: _Entry, index: ProviderIndex, trees: npt.NDArray[np.int32]) -> None:
    """Viable and per-class bounds of `trees` (complex roots), over their members
    gathered tree by tree: one segmented reduction per mask and class."""
    ctx = e.ctx
    lay = index.layout()
    starts = lay.offsets[trees]
    lens = lay.offsets[trees + 1] - starts
    seg = np.zeros(len(trees), dtype=np.int64)
    np.cumsum(lens[:-1], out=seg[1:])
    members = lay.members[np.repeat(starts - seg, lens) + np.arange(int(lens.sum()))
                          ].astype(np.int64)
    ok = ctx.anchor_ok[trees].copy()
    for b in e.best.values():
        b[trees] = cb.NEG_INF
    for m in ctx.masks:
        g = m.group
        single = g.granular or not g.resources
        if single:
            ok &= np.logical_or.reduceat(m.single[members], seg)
        for rc, amount in g.resources:
            mask = (m.single if single else m.entry[rc])[members]
            if not single:
                ok &= np.logical_or.reduceat(mask, seg)
            vals = np.full(len(members), cb.NEG_INF)
            chosen = np.flatnonzero(mask)
            if len(chosen):
                vals[chosen] = cb._item_bounds(ctx, rc, amount, members[chosen])
            best = e.best[rc]
            best[trees] = np.maximum(best[trees], np.maximum.reduceat(vals, seg))
    for b in e.best.values():
        ok &= b[trees] > cb.NEG_INF
    e.viable[trees] = ok
    e.bound[trees] = cb.NEG_INF
    if ok.any():
        e.bound[trees[ok]] = cb._bound(ctx, {rc: b[trees[ok]] for rc, b in e.best.items()})


# -- the best rows kept (with a limit) ----------------------------------------

_Keys = tuple[FloatArray, npt.NDArray[np.uint64], npt.NDArray[np.uint64]]
_KeyOf = Callable[[npt.NDArray[np.int64]], _Keys]


def _simple_key(e: _Entry, index: ProviderIndex) -> _KeyOf:
    """Single-provider rows rank by score, then uuid (as candidates._top_order)."""
    return lambda rows: (e.simple_score[rows], index.uuid_hi[rows], index.uuid_lo[rows])


def _tree_key(e: _Entry, index: ProviderIndex) -> _KeyOf:
    """Trees are searched by bound, then smallest uuid in the tree, then
    position (as candidates._ranked_with_limit)."""
    lay = index.layout()
    return lambda rows: (e.bound[rows], lay.min_hi[rows], rows.astype(np.uint64))


def _in_order(rows: npt.NDArray[np.int64], key: _KeyOf) -> npt.NDArray[np.int64]:
    a, b, c = key(rows)
    return rows[np.lexsort((c, b, -a))]


def _first(rows: npt.NDArray[np.int64], key: _KeyOf, m: int) -> npt.NDArray[np.int64]:
    """The best `m` of `rows`, in order, without sorting them all."""
    if len(rows) > m:
        a, b, c = key(rows)
        n = len(a)
        kth = np.partition(a, n - m)[n - m]
        above = np.flatnonzero(a > kth)
        tied = np.flatnonzero(a == kth)
        need = m - len(above)
        tied = tied[np.lexsort((c[tied], b[tied]))[:need]]
        rows = rows[np.concatenate([above, tied])]
    return _in_order(rows, key)


def _kept(rows: npt.NDArray[np.int64], complete: bool, key: _KeyOf, keep: int, least: int,
          dropped: BoolArray | None = None) -> _Best | None:
    """`rows` (in order) cut to `keep`; None when fewer than `least` are left
    of an incomplete list (it could no longer tell the best `least`)."""
    if len(rows) > keep:
        rows, complete = rows[:keep], False
    if not complete and (len(rows) < least or not len(rows)):
        return None
    floor = (0.0, 0, 0)
    if not complete:
        # Every row left out is below the last kept (below the old floor,
        # which that row passes).
        a, b, c = key(rows[-1:])
        floor = (float(a[0]), int(b[0]), int(c[0]))
    return _Best(rows=rows, floor=floor, complete=complete, dropped=dropped)


def _renewed(best: _Best | None, changed: npt.NDArray[np.int64], ok: BoolArray,
             key: _KeyOf, keep: int) -> _Best | None:
    """`best` after `changed` rows changed: they leave it, and those still of
    its kind (`ok`) whose key now passes the floor join it; every other row
    is below the floor, as before. None once nothing is left to tell by."""
    if best is None or not len(changed):
        return best
    stay = best.rows[~_among(best.rows, changed)]
    fresh = changed[ok[changed]]
    if best.dropped is not None:
        fresh = fresh[~best.dropped[fresh]]
    if len(fresh) and not best.complete:
        a, b, c = key(fresh)
        fa, fb, fc = best.floor
        fresh = fresh[(a > fa) | ((a == fa) & ((b < fb) | ((b == fb) & (c <= fc))))]
    if not len(fresh):
        if len(stay) == len(best.rows):
            return best
        rows = stay
    else:
        rows = _in_order(np.concatenate([stay, fresh]), key)
    return _kept(rows, best.complete, key, keep, 1, best.dropped)


def _among(rows: npt.NDArray[np.int64], changed: npt.NDArray[np.int64]) -> BoolArray:
    """np.isin(rows, changed): for the few rows a wave of claims changes, one
    comparison per changed row (np.isin sorts, ~15 µs however small)."""
    if len(changed) > 8:
        return np.isin(rows, changed)
    hit = rows == changed[0]
    for c in changed[1:]:
        hit |= rows == c
    return hit


def _keep_count(k: int) -> int:
    return max(TOP_SHARE * k, TOP_MIN)


def _best_simple(e: _Entry, index: ProviderIndex, drop: BoolArray | None, k: int
                 ) -> list[cb.Candidate] | None:
    """The k best single-provider candidates from the kept rows; None when
    they cannot tell (too many of them dropped)."""
    key = _simple_key(e, index)
    best = e.simple_top
    if best is not None and best.dropped is not None and (
            drop is None or bool((best.dropped & ~drop).any())):
        # Built without rows this request may use: rebuilt without only what
        # both leave out (what every request leaves out stays out; the rest,
        # a rule's hosts that differ from request to request, comes back).
        both = None if drop is None else best.dropped & drop
        best = e.simple_top = _best_of(e.simple_ok, key, _keep_count(k), k,
                                       both if both is not None and both.any() else None)
    elif best is None or (not best.complete and len(best.rows) < k):
        best = e.simple_top = _best_of(e.simple_ok, key, _keep_count(k), k,
                                       None if best is None else best.dropped)
    if best is None:
        return None
    top = best.rows if drop is None else best.rows[~drop[best.rows]]
    if len(top) < k and not best.complete:
        # The rows this request leaves out crowd the kept ones: hosts every
        # plan keeps spare (their rare features unasked), a hard rule, stale
        # hosts; the best rows move among them as the others fill. Keep the
        # best of the rest instead (for as long as requests leave those out).
        best = e.simple_top = _best_of(e.simple_ok, key, _keep_count(k), k, drop)
        if best is None:
            return None
        top = best.rows
    top = top[:k]
    return cb._simple_candidates(e.ctx, top, e.simple_score[top])


def _best_of(ok: BoolArray, key: _KeyOf, keep: int, least: int, drop: BoolArray | None
             ) -> _Best | None:
    """The best `keep` rows of `ok`, leaving out `drop` (kept with the list)."""
    rows = np.flatnonzero(ok if drop is None else ok & ~drop)
    return _kept(_first(rows, key, keep), len(rows) <= keep, key, keep, least,
                 None if drop is None else drop.copy())


def _best_trees(e: _Entry, index: ProviderIndex, drop: BoolArray | None, k: int
                ) -> tuple[npt.NDArray[np.int64], FloatArray, bool]:
    """The trees worth searching, from the kept ones: (roots, their bounds,
    whether they are all there are)."""
    key = _tree_key(e, index)
    if e.tree_top is None:
        viable = np.flatnonzero(e.viable)
        keep = e.tree_keep or _keep_count(k)
        e.tree_top = _kept(_first(viable, key, keep), len(viable) <= keep, key, keep, 0)
        assert e.tree_top is not None
    roots = e.tree_top.rows
    if drop is not None:
        roots = roots[~drop[roots]]
    return roots, e.bound[roots], e.tree_top.complete


def _ranked(e: _Entry, drop: BoolArray | None) -> list[cb.Candidate]:
    ctx = e.ctx
    limit = ctx.request.limit
    if limit is not None:
        best = _best_simple(e, ctx.index, drop, limit)
        if best is None:
            simple = _simple_rows(e, drop)
            best = cb._top_simple(ctx, simple, e.simple_score[simple], limit)
        roots, bounds, complete = _best_trees(e, ctx.index, drop, limit)
        found = cb._ranked_with_limit(ctx, best, roots, bounds, limit, exhaustive=complete)
        if found is not None:
            return found
        # The search went past the kept trees: keep twice as many from now on.
        e.tree_keep = 2 * len(e.tree_top.rows) if e.tree_top is not None else 0
        e.tree_top = None
        viable = _viable_rows(e, drop)
        ranked = cb._ranked_with_limit(ctx, best, viable, e.bound[viable], limit)
        assert ranked is not None
        return ranked
    simple = _simple_rows(e, drop)
    return cb._all_ranked(ctx, simple, e.simple_score[simple], _viable_rows(e, drop))


def _simple_rows(e: _Entry, drop: BoolArray | None) -> npt.NDArray[np.int64]:
    return np.flatnonzero(e.simple_ok if drop is None else e.simple_ok & ~drop)


def _viable_rows(e: _Entry, drop: BoolArray | None) -> npt.NDArray[np.int64]:
    return np.flatnonzero(e.viable if drop is None else e.viable & ~drop)
