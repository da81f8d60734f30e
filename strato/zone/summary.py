"""Zone summaries: what a parent sees of a child — one resource pool.

Per resource class: capacity, used, and ``largest_free``, the most that one
root provider (a host with its nested providers) could still take — the
figure that lets a parent prune a child that cannot fit one instance; and
``best_share`` (the largest free/capacity of one provider) with
``max_capacity`` (the largest capacity of one provider), which bound the
score any candidate of the child could have under the spread weigher, so
that a parent merging candidates asks only the children that can rank.
A parent's summary covers its whole subtree: its own providers plus its
children's summaries. Summaries are hints: a stale one costs efficiency,
never correctness, because the child re-checks everything when it claims.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from strato.engine.hosts import HostArrays
from strato.engine.index import BoolArray, ProviderIndex, held_sum
from strato.zone.protocol import MAX_COUNT

FloatArray = npt.NDArray[np.float64]

# `freed` tokens stay below 2**53: exact in JSON for every client.
TOKEN_MOD = 2**53
# The summary of a zone without providers of its own.
EMPTY: dict[str, Any] = {"providers": 0, "classes": {}, "traits": [], "tags_present": [],
                         "freed": 0}


def own_summary(index: ProviderIndex, hosts: HostArrays, excluded: BoolArray
                ) -> dict[str, Any]:
    """Summary of this zone's own providers (stale ones count as unusable).

    A zone sends it up with every placement its parent asked for, so it is
    kept on the index (`_Kept`) and, after usage alone moved, brought up to
    date on the rows that changed: a 100,000-host zone recomputed it in
    6.5 ms for every such claim."""
    n = index.size
    excluded = excluded[:n]
    stale = np.flatnonzero(excluded)
    key = (index.structure_version, index.inventory_version, n, stale.tobytes())
    kept: _Kept | None = index.derived.get(_KEPT)
    if kept is None or kept.key != key:
        kept = _Kept.build(index, excluded, key)
        index.derived[_KEPT] = kept
    else:
        kept.catch_up(index)
    live = kept.live
    tags = sorted(t for t, col in hosts.tags.items() if (col[:n] & live).any())
    # Moves whenever room may have grown here: a release, an inventory change,
    # or a different set of stale hosts (see strato/zone/failures.py).
    freed = (index.freed * 1_000_003 + zlib.crc32(stale.tobytes())) % TOKEN_MOD
    return {"providers": kept.providers, "classes": kept.classes(), "traits": kept.traits,
            "tags_present": tags, "freed": freed}


_KEPT = "zone-summary"
# Up to this many changed rows are caught up one by one (see _Class).
FEW_ROWS = 8


class _Class:
    """One class's sums and maxima, and the per-row state they come from."""

    def __init__(self, index: ProviderIndex, rc: str, live: BoolArray) -> None:
        n = index.size
        col = index.rc[rc]
        cap = col.capacity[:n]
        self.rc = rc
        self.counted = col.has[:n] & index.live()[:n]  # capacity and usage
        self.free_here = live & col.has[:n]  # room, where not stale
        self.usable = self.free_here & (cap > 0)
        self.capacity = held_sum(cap[self.counted])
        self.max_capacity = int(cap[self.usable].max()) if self.usable.any() else 0
        self.used_seen = col.used[:n].copy()
        self.used = held_sum(self.used_seen[self.counted])
        self.roots = index.root[:n]
        self.row_free = self._row_free(index, np.arange(n))
        # Free room of each whole tree (a host with its nested providers).
        self.tree_free = np.bincount(self.roots, weights=self.row_free, minlength=n)
        self.share = np.full(n, -np.inf)
        self.share[self.usable] = np.clip(self.row_free[self.usable] / cap[self.usable],
                                          0.0, 1.0)

    def _row_free(self, index: ProviderIndex, rows: npt.NDArray[np.int64]) -> FloatArray:
        col = index.rc[self.rc]
        free = np.where(self.free_here[rows], col.capacity[rows] - col.used[rows], 0)
        return np.maximum(free, 0).astype(np.float64)

    def catch_up(self, index: ProviderIndex, rows: npt.NDArray[np.int64]) -> None:
        col = index.rc[self.rc]
        if len(rows) <= FEW_ROWS:
            self._catch_up_rows(col.capacity, col.used, rows.tolist())
            return
        used = col.used[rows]
        counted = self.counted[rows]
        self.used += held_sum(used[counted] - self.used_seen[rows][counted])
        self.used_seen[rows] = used
        free = self._row_free(index, rows)
        np.add.at(self.tree_free, self.roots[rows], free - self.row_free[rows])
        self.row_free[rows] = free
        usable = rows[self.usable[rows]]
        self.share[usable] = np.clip(self.row_free[usable] / col.capacity[usable], 0.0, 1.0)

    def _catch_up_rows(self, capacity: npt.NDArray[np.int64], used_now: npt.NDArray[np.int64],
                       rows: list[int]) -> None:
        """`catch_up` for a few rows (a claim's hosts), one by one: the same
        figures, without a dozen array operations on one element each."""
        for p in rows:
            used = int(used_now[p])
            if self.counted[p]:
                self.used += used - int(self.used_seen[p])
            self.used_seen[p] = used
            cap = int(capacity[p])
            free = float(max(cap - used, 0)) if self.free_here[p] else 0.0
            self.tree_free[self.roots[p]] += free - self.row_free[p]
            self.row_free[p] = free
            if self.usable[p]:
                self.share[p] = min(max(free / cap, 0.0), 1.0)

    def figures(self) -> dict[str, Any]:
        share = float(self.share.max()) if self.usable.any() else 0.0
        largest = int(self.tree_free.max()) if len(self.tree_free) else 0
        return _sendable({"capacity": self.capacity, "used": self.used,
                          "largest_free": largest, "best_share": round(share, 6),
                          "max_capacity": self.max_capacity})


class _Kept:
    """What a summary is computed from, kept while the index's structure, its
    inventories and the stale set stay the same (usage is caught up)."""

    def __init__(self, key: tuple[Any, ...], version: int, live: BoolArray, providers: int,
                 traits: list[str], per_class: list[_Class]) -> None:
        self.key, self.version, self.live = key, version, live
        self.providers, self.traits, self.per_class = providers, traits, per_class

    @classmethod
    def build(cls, index: ProviderIndex, excluded: BoolArray, key: tuple[Any, ...]) -> _Kept:
        n = index.size
        live = index.live()[:n] & ~excluded
        per_class = [_Class(index, rc, live) for rc, col in index.rc.items()
                     if (col.has[:n] & index.live()[:n]).any()]
        traits = sorted(t for t, col in index.trait_cols.items() if (col[:n] & live).any())
        return cls(key, index.version, live, int(np.count_nonzero(index.live()[:n])),
                   traits, per_class)

    def catch_up(self, index: ProviderIndex) -> None:
        rows = index.changed_since(self.version)
        if len(rows):
            for c in self.per_class:
                c.catch_up(index, rows)
        self.version = index.version

    def classes(self) -> dict[str, dict[str, Any]]:
        return {c.rc: c.figures() for c in self.per_class}


def merge(parts: Iterable[Mapping[str, Any]],
          overlapping: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One summary for several pools: sums, maxima of largest_free, unions.

    `overlapping`: children that share zones with the children `parts` (a
    zone registered under two children, a diamond), whose shares of the
    sums cannot be told apart. `parts` are added up; each overlapping pool
    is then taken with them as a lower bound, not a sum (a zone's own
    providers are added to the result afterwards: no child counts them):
    per class, the larger capacity and the larger free room (capacity less
    usage) of the two, so the result never holds more than the pools
    together, and never less than any one of them. Maxima and unions merge
    as for any part (counting a zone twice does not change them)."""
    providers = 0
    freed = 0
    classes: dict[str, dict[str, Any]] = {}
    traits: set[str] = set()
    tags: set[str] = set()
    # Every part is added up first; then each overlapping pool raises the sum
    # where it is larger.
    for part, over in [*((p, False) for p in parts), *((p, True) for p in overlapping)]:
        n = int(part.get("providers", 0))
        providers = max(providers, n) if over else providers + n
        freed += int(part.get("freed", 0))
        traits.update(part.get("traits", []))
        tags.update(part.get("tags_present", []))
        for rc, c in part.get("classes", {}).items():
            acc = classes.setdefault(rc, {"capacity": 0, "used": 0, "largest_free": 0,
                                          "best_share": 0.0, "max_capacity": 0})
            cap, used = int(c.get("capacity", 0)), int(c.get("used", 0))
            if over:
                free = max(acc["capacity"] - acc["used"], cap - used)
                acc["capacity"] = max(acc["capacity"], cap)
                acc["used"] = max(0, acc["capacity"] - free)
            else:
                acc["capacity"] += cap
                acc["used"] += used
            acc["largest_free"] = max(acc["largest_free"], int(c.get("largest_free", 0)))
            for k in ("best_share", "max_capacity"):
                # Unknown in one part (an older zone): unknown for the whole.
                v = c.get(k)
                acc[k] = None if v is None or acc[k] is None else max(acc[k], v)
    return {"providers": providers,
            "classes": {rc: _sendable(c) for rc, c in classes.items()},
            "traits": sorted(traits), "tags_present": sorted(tags), "freed": freed % TOKEN_MOD}


def _sendable(figures: dict[str, Any]) -> dict[str, Any]:
    """`figures` within what a zone may send (protocol.ClassUsage): a pool of
    more than MAX_COUNT is said to hold MAX_COUNT (as much as it could ever
    be asked for), and one tree's free room is part of the pool's."""
    out = dict(figures)
    for k in ("capacity", "used", "max_capacity"):
        if out.get(k) is not None:
            out[k] = min(out[k], MAX_COUNT)
    out["largest_free"] = min(out["largest_free"], out["capacity"])
    return out


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
