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

from strato.engine.hosts import HostArrays
from strato.engine.index import BoolArray, ProviderIndex

# `freed` tokens stay below 2**53: exact in JSON for every client.
TOKEN_MOD = 2**53
# The summary of a zone without providers of its own.
EMPTY: dict[str, Any] = {"providers": 0, "classes": {}, "traits": [], "tags_present": [],
                         "freed": 0}


def own_summary(index: ProviderIndex, hosts: HostArrays, excluded: BoolArray
                ) -> dict[str, Any]:
    """Summary of this zone's own providers (stale ones count as unusable)."""
    n = index.size
    live = index.live()[:n] & ~excluded[:n]
    roots = index.root[:n]
    classes: dict[str, dict[str, Any]] = {}
    for rc, col in index.rc.items():
        has = col.has[:n] & index.live()[:n]
        if not has.any():
            continue
        capacity = int(col.capacity[:n][has].sum())
        used = int(col.used[:n][has].sum())
        free = np.where(live & col.has[:n], col.capacity[:n] - col.used[:n], 0)
        # Free room of each whole tree (a host with its nested providers).
        per_root = np.bincount(roots, weights=np.maximum(free, 0), minlength=n)
        cap = col.capacity[:n]
        usable = live & col.has[:n] & (cap > 0)
        share = (float(np.max(np.clip(free[usable] / cap[usable], 0.0, 1.0)))
                 if usable.any() else 0.0)
        classes[rc] = {"capacity": capacity, "used": used,
                       "largest_free": int(per_root.max()) if n else 0,
                       "best_share": round(share, 6),
                       "max_capacity": int(cap[usable].max()) if usable.any() else 0}
    traits = sorted(t for t, col in index.trait_cols.items() if (col[:n] & live).any())
    tags = sorted(t for t, col in hosts.tags.items() if (col[:n] & live).any())
    # Moves whenever room may have grown here: a release, an inventory change,
    # or a different set of stale hosts (see strato/zone/failures.py).
    freed = (index.freed * 1_000_003 + zlib.crc32(np.flatnonzero(excluded[:n]).tobytes())
             ) % TOKEN_MOD
    return {"providers": int(np.count_nonzero(index.live()[:n])), "classes": classes,
            "traits": traits, "tags_present": tags, "freed": freed}


def merge(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary for several pools: sums, maxima of largest_free, unions."""
    providers = 0
    freed = 0
    classes: dict[str, dict[str, Any]] = {}
    traits: set[str] = set()
    tags: set[str] = set()
    for part in parts:
        providers += int(part.get("providers", 0))
        freed += int(part.get("freed", 0))
        traits.update(part.get("traits", []))
        tags.update(part.get("tags_present", []))
        for rc, c in part.get("classes", {}).items():
            acc = classes.setdefault(rc, {"capacity": 0, "used": 0, "largest_free": 0,
                                          "best_share": 0.0, "max_capacity": 0})
            acc["capacity"] += int(c.get("capacity", 0))
            acc["used"] += int(c.get("used", 0))
            acc["largest_free"] = max(acc["largest_free"], int(c.get("largest_free", 0)))
            for k in ("best_share", "max_capacity"):
                # Unknown in one part (an older zone): unknown for the whole.
                v = c.get(k)
                acc[k] = None if v is None or acc[k] is None else max(acc[k], v)
    return {"providers": providers, "classes": classes, "traits": sorted(traits),
            "tags_present": sorted(tags), "freed": freed % TOKEN_MOD}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
