"""The engine's columnar index of a zone's providers, held in numpy arrays.

One row per provider (a *position*); per resource class a set of columns
(capacity, used, min/max/step, ...); per trait and per aggregate a boolean
column. Rows of deleted providers are marked dead and reused only by a full
rebuild, so positions stay stable between rebuilds.

The index is mutated only by `apply` (incremental refresh from the change
log) and read by the pure candidate builder; the caller serialises the two.
"""

from __future__ import annotations

import secrets
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from strato.engine.records import ProviderRecord

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
# One empty set for every provider without traits or aggregates (each
# `frozenset()` is a new 216-byte object: 2 MiB at 10,000 providers).
EMPTY: frozenset[str] = frozenset()

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
PosArray = npt.NDArray[np.int32]

# The most capacity or usage one row holds; larger figures are held as this.
# Placement accepts capacities up to (2**31 - 1) * 3.4e38, far beyond int64:
# 2**53 is far beyond any real inventory, exact in float64 (the weighers'
# shares) and in JSON, the most a zone sends of one figure (MAX_COUNT in
# strato/zone/protocol.py), and leaves a row's used + amount far from 2**63.
# A sum over rows may still exceed int64: see `held_sum`. The store checks
# claims against the exact capacity, so clamping only makes the engine
# offer less of a provider that has more than 2**53 to give.
MAX_HELD = 2**53
# Rows whose held figures int64 sums without overflow, whatever their sign.
_SUM_CHUNK = 2**62 // MAX_HELD


def held(amount: int) -> int:
    """`amount` (a capacity or a usage) as a row holds it."""
    return 0 if amount < 0 else MAX_HELD if amount > MAX_HELD else amount


def held_sum(values: IntArray) -> int:
    """The exact sum of held figures (each within +-MAX_HELD): at once when
    int64 cannot overflow (the common case), else in chunks that cannot."""
    if len(values) <= _SUM_CHUNK or float(np.abs(values).sum(dtype=np.float64)) < 2**62:
        return int(values.sum())
    return sum(int(values[i:i + _SUM_CHUNK].sum()) for i in range(0, len(values), _SUM_CHUNK))


def _grow(a: npt.NDArray[np.generic], rows: int, fill: object = 0) -> npt.NDArray[np.generic]:
    out = np.full(rows, fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class RcColumns:
    """The inventory of one resource class across every provider."""

    __slots__ = ("capacity", "has", "max_unit", "min_unit", "ratio", "reserved", "step",
                 "total", "used")

    def __init__(self, rows: int) -> None:
        self.has: BoolArray = np.zeros(rows, dtype=bool)
        self.total: IntArray = np.zeros(rows, dtype=np.int64)
        self.reserved: IntArray = np.zeros(rows, dtype=np.int64)
        self.ratio = np.ones(rows, dtype=np.float64)
        # (total - reserved) * allocation_ratio, rounded down, precomputed;
        # at most MAX_HELD, as `used`.
        self.capacity: IntArray = np.zeros(rows, dtype=np.int64)
        self.used: IntArray = np.zeros(rows, dtype=np.int64)
        self.min_unit: IntArray = np.zeros(rows, dtype=np.int64)
        self.max_unit: IntArray = np.zeros(rows, dtype=np.int64)
        self.step: IntArray = np.ones(rows, dtype=np.int64)

    def grow(self, rows: int) -> None:
        for name in self.__slots__:
            arr = getattr(self, name)
            fill = 1 if name in ("ratio", "step") else 0
            setattr(self, name, _grow(arr, rows, fill))

    @property
    def free(self) -> IntArray:
        return self.capacity - self.used


@dataclass(frozen=True, slots=True)
class TreeLayout:
    """Derived tree structure, rebuilt only when the structure changes."""

    # Providers of each tree, grouped: members[offsets[r]:offsets[r + 1]] for root r.
    members: PosArray
    offsets: IntArray
    # Roots whose tree has more than one provider.
    nested_root: BoolArray
    # Per root: the smallest uuid_hi among its tree's providers (the largest
    # value for rows that root no tree): no candidate of the tree has a
    # tie-break key before that uuid's.
    min_hi: npt.NDArray[np.uint64]


class ProviderIndex:
    """Columnar view of every provider of a zone."""

    def __init__(self, rows: int = 1024) -> None:
        self.seq = 0
        self.n = 0
        self._rows = max(rows, 16)
        self.uuids: list[str] = []
        self.pos: dict[str, int] = {}
        self.alive: BoolArray = np.zeros(self._rows, dtype=bool)
        self.parent: PosArray = np.full(self._rows, -1, dtype=np.int32)
        self.root: PosArray = np.zeros(self._rows, dtype=np.int32)
        # The uuid as two big-endian 64-bit halves: ordering by (hi, lo) is
        # ordering by the canonical uuid string, vectorised.
        self.uuid_hi = np.zeros(self._rows, dtype=np.uint64)
        self.uuid_lo = np.zeros(self._rows, dtype=np.uint64)
        self.traits: list[frozenset[str]] = []
        self.aggregates: list[frozenset[str]] = []
        self.rc: dict[str, RcColumns] = {}
        self.trait_cols: dict[str, BoolArray] = {}
        self.agg_cols: dict[str, BoolArray] = {}
        # Bumped whenever tree, traits or aggregates change (not on usage).
        self.structure_version = 0
        # Bumped on every change of a row; row_version[p] is the value when row
        # p last changed (usage, inventory, liveness). Caches derived from the
        # columns (strato/engine/cache.py) redo just the rows changed since.
        self.version = 0
        self.row_version = np.zeros(self._rows, dtype=np.int64)
        # Bumped whenever inventories may have changed (every `apply`): what
        # depends on inventories alone (filters.fits_rows) is kept until then.
        self.inventory_version = 0
        # State other modules derive from this index and keep with it.
        self.derived: dict[str, Any] = {}
        # Bumped whenever room may have grown: usage went down, or providers or
        # inventories changed. A parent zone keeps a child's "could not fit"
        # answers while this stays put (strato/zone/failures.py). A new index
        # starts at a random value, so a restarted process never repeats one.
        self.freed = secrets.randbits(40)
        self._layout: tuple[int, TreeLayout] | None = None
        self._anchors: tuple[int, dict[int, PosArray]] | None = None

    # -- building and refreshing -------------------------------------------

    @classmethod
    def build(cls, records: Iterable[ProviderRecord], seq: int = 0) -> ProviderIndex:
        recs = list(records)
        index = cls(rows=int(len(recs) * 1.25) + 16)
        index.apply(recs, ())
        index.seq = seq
        index._own_copies()
        return index

    def _own_copies(self) -> None:
        """Keep fresh copies of the strings and sets taken from the records.

        Those were allocated among the load's temporaries (rows, records),
        one here and there; kept, each pins a block of Python's allocator
        that would otherwise be given back once the load is freed: 6 MiB of
        a 10,000-host zone's resident memory, half its index."""
        def fresh(text: str) -> str:
            return text.encode().decode()
        sets: dict[frozenset[str], frozenset[str]] = {EMPTY: EMPTY}

        def fresh_set(names: frozenset[str]) -> frozenset[str]:
            found = sets.get(names)
            if found is None:
                found = sets[names] = frozenset([fresh(t) for t in names])
            return found
        self.uuids = [fresh(u) for u in self.uuids]
        self.pos = {u: p for p, u in enumerate(self.uuids)}
        self.traits = [fresh_set(t) for t in self.traits]
        self.aggregates = [fresh_set(a) for a in self.aggregates]
        self.trait_cols = {fresh(k): v for k, v in self.trait_cols.items()}
        self.agg_cols = {fresh(k): v for k, v in self.agg_cols.items()}
        self.rc = {fresh(k): v for k, v in self.rc.items()}

    def apply(self, records: Iterable[ProviderRecord], removed: Iterable[str]) -> None:
        """Make the index reflect `records` (upserts) and drop `removed` uuids.

        A record is written only once all it needs is computed (`_upsert`)."""
        structural = False
        recs = list(records)
        self.freed += 1
        self.inventory_version += 1
        for rec in recs:
            structural |= self._upsert(rec)
        for rec in recs:
            structural |= self._link(rec)
        for u in removed:
            p = self.pos.pop(u, None)
            if p is not None:
                structural = True
                self._clear_row(p)
                self.alive[p] = False
        if structural:
            self.structure_version += 1

    def _ensure_rows(self, need: int) -> None:
        if need <= self._rows:
            return
        rows = max(need, self._rows * 2)
        self.alive = _grow(self.alive, rows, False)  # type: ignore[assignment]
        self.parent = _grow(self.parent, rows, -1)  # type: ignore[assignment]
        self.root = _grow(self.root, rows, 0)  # type: ignore[assignment]
        self.uuid_hi = _grow(self.uuid_hi, rows, 0)  # type: ignore[assignment]
        self.uuid_lo = _grow(self.uuid_lo, rows, 0)  # type: ignore[assignment]
        self.row_version = _grow(self.row_version, rows, 0)  # type: ignore[assignment]
        for col in self.rc.values():
            col.grow(rows)
        for d in (self.trait_cols, self.agg_cols):
            for k, v in d.items():
                d[k] = _grow(v, rows, False)  # type: ignore[assignment]
        self._rows = rows

    def _new_row(self, uuid: str, value: int) -> int:
        """A row for `uuid`, whose 128-bit value is `value`."""
        p = self.n
        self._ensure_rows(p + 1)
        self.n += 1
        self.uuids.append(uuid)
        self.traits.append(EMPTY)
        self.aggregates.append(EMPTY)
        self.pos[uuid] = p
        self.uuid_hi[p] = value >> 64
        self.uuid_lo[p] = value & 0xFFFFFFFFFFFFFFFF
        self.root[p] = p
        return p

    def _upsert(self, rec: ProviderRecord) -> bool:
        # What may fail (a malformed uuid, a capacity) is computed before any
        # column changes: a record that fails changes nothing. What is then
        # written is within int64: held figures, and the store's integers.
        p = self.pos.get(rec.uuid)
        uuid_value = uuidlib.UUID(rec.uuid).int if p is None else 0
        capacities = [held(inv.capacity) for inv in rec.inventories.values()]
        structural = p is None
        if p is None:
            p = self._new_row(rec.uuid, uuid_value)
        self.touch(p)
        self.alive[p] = True
        for name, col in self.rc.items():
            if name not in rec.inventories and col.has[p]:
                col.has[p] = False
                col.capacity[p] = 0
            col.used[p] = 0
        for (name, inv), cap in zip(rec.inventories.items(), capacities, strict=True):
            col = self._rc_column(name)
            col.has[p] = True
            col.total[p] = inv.total
            col.reserved[p] = inv.reserved
            col.ratio[p] = inv.allocation_ratio
            col.capacity[p] = cap
            col.min_unit[p] = inv.min_unit
            col.max_unit[p] = inv.max_unit
            col.step[p] = max(inv.step_size, 1)
        for name, amount in rec.used.items():
            # Usage without inventory is possible mid-reshape; keep it anyway.
            self._rc_column(name).used[p] = held(amount)
        if rec.traits != self.traits[p]:
            structural = True
            self._set_members(self.trait_cols, self.traits[p], rec.traits, p)
            self.traits[p] = rec.traits
        if rec.aggregates != self.aggregates[p]:
            structural = True
            self._set_members(self.agg_cols, self.aggregates[p], rec.aggregates, p)
            self.aggregates[p] = rec.aggregates
        return structural

    def set_usage(self, uuid: str, used: Mapping[str, int]) -> bool:
        """Replace one provider's usage (an allocation change); False if unknown."""
        p = self.pos.get(uuid)
        if p is None or not self.alive[p]:
            return False
        used = {name: held(amount) for name, amount in used.items()}
        self.touch(p)
        for name, col in self.rc.items():
            if used.get(name, 0) < col.used[p]:
                self.freed += 1
            col.used[p] = used.get(name, 0)
        for name, amount in used.items():
            if name not in self.rc:
                self._rc_column(name).used[p] = amount
        return True

    def add_usage(self, uuid: str, delta: Mapping[str, int]) -> bool:
        """Add to one provider's usage (a claim this process made); False if
        the provider or a class is unknown here."""
        p = self.pos.get(uuid)
        if p is None or not self.alive[p] or any(n not in self.rc for n in delta):
            return False
        self.touch(p)
        for name, amount in delta.items():
            col = self.rc[name]
            col.used[p] = held(int(col.used[p]) + amount)
            if amount < 0:
                self.freed += 1
        return True

    def _rc_column(self, name: str) -> RcColumns:
        col = self.rc.get(name)
        if col is None:
            col = self.rc[name] = RcColumns(self._rows)
        return col

    def _set_members(self, cols: dict[str, BoolArray], old: frozenset[str],
                     new: frozenset[str], p: int) -> None:
        for name in old - new:
            cols[name][p] = False
        for name in new - old:
            col = cols.get(name)
            if col is None:
                col = cols[name] = np.zeros(self._rows, dtype=bool)
            col[p] = True

    def _link(self, rec: ProviderRecord) -> bool:
        p = self.pos[rec.uuid]
        parent = self.pos.get(rec.parent_uuid, -1) if rec.parent_uuid else -1
        root = self.pos.get(rec.root, p)
        changed = bool(self.parent[p] != parent or self.root[p] != root)
        self.parent[p] = parent
        self.root[p] = root
        return changed

    def touch(self, p: int) -> None:
        """Row `p` changed (whoever writes the columns directly must say so)."""
        self.version += 1
        self.row_version[p] = self.version

    def changed_since(self, version: int) -> npt.NDArray[np.int64]:
        """Rows changed after `version` (a value of `self.version`)."""
        if version >= self.version:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.row_version[: self.n] > version)

    def _clear_row(self, p: int) -> None:
        self.touch(p)
        for col in self.rc.values():
            col.has[p] = False
            col.capacity[p] = 0
            col.used[p] = 0
        self._set_members(self.trait_cols, self.traits[p], EMPTY, p)
        self._set_members(self.agg_cols, self.aggregates[p], EMPTY, p)
        self.traits[p] = EMPTY
        self.aggregates[p] = EMPTY
        self.parent[p] = -1
        self.root[p] = p

    # -- reading -----------------------------------------------------------

    @property
    def size(self) -> int:
        return self.n

    def live(self) -> BoolArray:
        return self.alive[: self.n]

    def trait_mask(self, name: str) -> BoolArray:
        col = self.trait_cols.get(name)
        return col[: self.n] if col is not None else np.zeros(self.n, dtype=bool)

    def agg_mask(self, uuid: str) -> BoolArray:
        col = self.agg_cols.get(uuid)
        return col[: self.n] if col is not None else np.zeros(self.n, dtype=bool)

    def rc_columns(self, name: str) -> RcColumns | None:
        return self.rc.get(name)

    def layout(self) -> TreeLayout:
        """Tree membership, cached until the structure changes."""
        if self._layout is not None and self._layout[0] == self.structure_version:
            return self._layout[1]
        n = self.n
        live = np.flatnonzero(self.alive[:n]).astype(np.int32)
        roots = self.root[live]
        order = np.argsort(roots, kind="stable")
        members = live[order]
        counts = np.bincount(roots, minlength=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        min_hi = np.full(n, np.iinfo(np.uint64).max, dtype=np.uint64)
        rooted = np.flatnonzero(counts)
        if len(rooted):
            min_hi[rooted] = np.minimum.reduceat(self.uuid_hi[members], offsets[rooted])
        layout = TreeLayout(members=members, offsets=offsets, nested_root=counts > 1,
                            min_hi=min_hi)
        self._layout = (self.structure_version, layout)
        return layout

    def tree_members(self, root: int) -> PosArray:
        lay = self.layout()
        return lay.members[lay.offsets[root]: lay.offsets[root + 1]]

    def sharing_anchors(self) -> dict[int, PosArray]:
        """For each sharing provider: the roots of every provider it shares an
        aggregate with (itself included), i.e. the trees it may serve."""
        if self._anchors is not None and self._anchors[0] == self.structure_version:
            return self._anchors[1]
        out: dict[int, PosArray] = {}
        sharing = np.flatnonzero(self.trait_mask(SHARING_TRAIT) & self.live())
        for s in sharing.tolist():
            reach = np.zeros(self.n, dtype=bool)
            for agg in self.aggregates[s]:
                reach |= self.agg_mask(agg)
            reach &= self.live()
            roots = np.unique(self.root[: self.n][reach]).astype(np.int32)
            out[s] = roots
        self._anchors = (self.structure_version, out)
        return out

    def ancestors(self, p: int) -> list[int]:
        """`p` and every provider above it, nearest first."""
        chain = [p]
        parent = int(self.parent[p])
        while parent >= 0:
            chain.append(parent)
            parent = int(self.parent[parent])
        return chain
