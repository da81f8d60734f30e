"""Where each provider is: locations, tags, failure domains and staleness.

Kept beside the provider index (not in it) because it changes on other
writes: provider metadata (location, tags) and the clock (heartbeats). The
arrays are aligned with an index's rows and rebuilt only when the index
structure or the metadata changed, so a schedule request pays for a lookup.

Failure domains per level: with levels ``site, room, rack, host``, a provider
located at ``dfw/room1/rack3/m7`` is in domain ``dfw`` at site level,
``dfw/room1`` at room level and so on. The last level is always the host: the
root provider itself. A provider whose location is shorter than a level (or
has none) is a domain of its own at that level, so it never counts as
"together" with another unknown.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.engine.index import BoolArray, ProviderIndex
from strato.model.schedule import DEFAULT_LEVELS
from strato.store import changes
from strato.store import meta as meta_store
from strato.store.db import release_memory
from strato.store.schema import provider_meta, resource_providers

IntArray = npt.NDArray[np.int32]
# Change kinds that can move a provider's location or tags.
_META_KINDS = frozenset({"meta", "provider", "provider_deleted", "bulk_load"})
# How long a computed set of stale providers is reused (heartbeats are ~30 s).
STALE_TTL_S = 1.0


@dataclass(slots=True)
class HostArrays:
    """Per index row: location code, domain codes per level, tags."""

    locations: list[tuple[str, ...] | None]
    loc_code: IntArray
    domains: dict[str, IntArray]
    domain_names: dict[str, list[str]]
    tags: dict[str, BoolArray]
    # Facts computed from these arrays and their index, kept as long as they
    # are (the rare features, spare masks per request: constraints.spare_mask).
    derived: dict[Any, Any] = field(default_factory=dict)

    def domain_of(self, level: str, row: int) -> str:
        return self.domain_names[level][int(self.domains[level][row])]


@dataclass(slots=True)
class _Meta:
    location: tuple[str, ...] | None
    tags: frozenset[str]


@dataclass(slots=True)
class HostView:
    levels: tuple[str, ...] = DEFAULT_LEVELS
    stale_after: float = meta_store.DEFAULT_STALE_AFTER
    # The zone's own static metadata: its tags hold for every provider in it,
    # and a provider with no location (nor its root) is at the zone's prefix.
    zone_tags: tuple[str, ...] = ()
    zone_location: tuple[str, ...] | None = None
    seq: int = -1
    version: int = 0
    _meta: dict[str, _Meta] = field(default_factory=dict)
    _arrays: tuple[tuple[int, int, int, int], HostArrays] | None = None
    _stale: tuple[float, frozenset[str], dict[str, float | None]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Allocation-only changes this process committed, not yet passed by `seq`.
    _own: set[int] = field(default_factory=set)

    # -- freshness ---------------------------------------------------------

    def own_allocation_change(self, seq: int) -> None:
        """This process committed change `seq` and it moved allocations only (no
        location or tags): the next refresh need not read it."""
        with self._lock:
            if self.seq < 0 or seq <= self.seq:
                return
            self._own.add(seq)
            while self.seq + 1 in self._own:
                self.seq += 1
                self._own.discard(self.seq)
            self._own = {s for s in self._own if s > self.seq}

    def refresh(self, conn: Connection) -> None:
        """Catch up with metadata writes committed since the last refresh."""
        with self._lock:
            if self.seq < 0:
                self.seq = changes.current_seq(conn)
                self._load(conn, None)
                return
            rows = changes.since(conn, self.seq)
            if not rows:
                return
            touched: set[str] = set()
            whole = False
            for _, uuid, kind in rows:
                if kind not in _META_KINDS:
                    continue
                if uuid is None:
                    whole = True
                    break
                touched.add(uuid)
            if whole:
                self._meta.clear()
                self._load(conn, None)
            elif touched:
                self._load(conn, touched)
            if whole or touched:
                # A heartbeat that revives a provider writes a meta change.
                self._stale = None
            self.seq = max(r[0] for r in rows)

    def _load(self, conn: Connection, uuids: Iterable[str] | None) -> None:
        pm, rp = provider_meta, resource_providers
        q = sa.select(rp.c.uuid, pm.c.location, pm.c.tags).join(
            pm, pm.c.resource_provider_id == rp.c.id)
        wanted = None if uuids is None else sorted(set(uuids))
        rows: list[tuple[str, str | None, str | None]] = []
        if wanted is not None:
            for u in wanted:
                self._meta.pop(u, None)
            for i in range(0, len(wanted), 900):
                rows += [(r[0], r[1], r[2])
                         for r in conn.execute(q.where(rp.c.uuid.in_(wanted[i:i + 900])))]
        else:
            rows = [(r[0], r[1], r[2]) for r in conn.execute(q)]
        # Shared, not one per provider: the location's parts (a site's name
        # is in every location under it) and each distinct tag set.
        sets: dict[str, frozenset[str]] = {}
        for uuid, location, tags in rows:
            loc = tuple(map(sys.intern, location.split("/"))) if location else None
            key = tags or "[]"
            tagset = sets.get(key)
            if tagset is None:
                tagset = sets[key] = frozenset(json.loads(key))
            self._meta[uuid] = _Meta(loc, tagset)
        self.version += 1
        if wanted is None:
            release_memory(conn)

    def load_static(self, items: Iterable[tuple[str, Sequence[str] | None, Iterable[str]]]
                    ) -> None:
        """Metadata given directly, not read from a store: (uuid, location, tags)
        per provider (the simulator's in-memory zones)."""
        with self._lock:
            for uuid, location, tags in items:
                self._meta[uuid] = _Meta(tuple(location) if location else None,
                                         frozenset(tags))
            self.version += 1

    def stale_cached(self) -> dict[str, float | None] | None:
        """The stale providers if computed recently enough, else None."""
        cached = self._stale
        if cached is not None and time.monotonic() - cached[0] < STALE_TTL_S:
            return cached[2]
        return None

    def stale(self, conn: Connection) -> dict[str, float | None]:
        """Stale provider uuid -> seconds since its last report (None: never)."""
        now = time.monotonic()
        cached = self._stale
        if cached is not None and now - cached[0] < STALE_TTL_S:
            return cached[2]
        found = meta_store.stale_providers(conn, datetime.now(UTC).replace(tzinfo=None),
                                           self.stale_after)
        self._stale = (now, frozenset(found), found)
        return found

    def domain_of_root(self, root_uuid: str, level: str) -> str:
        """The failure domain of a host (root provider) at `level`, from its metadata
        alone: the same answer as the arrays give, without an index."""
        if level == self.levels[-1]:
            return root_uuid
        m = self._meta.get(root_uuid)
        loc = m.location if m is not None and m.location is not None else self.zone_location
        depth = self.levels.index(level) + 1
        if loc is None or len(loc) < depth:
            return root_uuid
        return "/".join(loc[:depth])

    # -- arrays over an index -----------------------------------------------

    def arrays(self, index: ProviderIndex) -> HostArrays:
        key = (id(index), index.size, index.structure_version, self.version)
        cached = self._arrays
        if cached is not None and cached[0] == key:
            return cached[1]
        built = self._build(index)
        self._arrays = (key, built)
        return built

    def _build(self, index: ProviderIndex) -> HostArrays:
        n = index.size
        uuids = index.uuids
        roots = index.root[:n]
        codes: dict[tuple[str, ...] | None, int] = {None: 0}
        locations: list[tuple[str, ...] | None] = [None]
        loc_code = np.zeros(n, dtype=np.int32)
        tags: dict[str, BoolArray] = {}
        for p in range(n):
            m = self._meta.get(uuids[p])
            loc = m.location if m is not None else None
            if loc is None:
                rm = self._meta.get(uuids[int(roots[p])])
                loc = rm.location if rm is not None else self.zone_location
            code = codes.get(loc)
            if code is None:
                code = codes[loc] = len(locations)
                locations.append(loc)
            loc_code[p] = code
            if m is not None:
                for t in m.tags:
                    col = tags.get(t)
                    if col is None:
                        col = tags[t] = np.zeros(n, dtype=bool)
                    col[p] = True
        for t in self.zone_tags:
            tags[t] = np.ones(n, dtype=bool)
        domains: dict[str, IntArray] = {}
        names: dict[str, list[str]] = {}
        for depth, level in enumerate(self.levels, start=1):
            if depth == len(self.levels):
                # The host level: the root provider itself.
                domains[level] = np.asarray(roots, dtype=np.int32)
                names[level] = list(uuids)
                continue
            per_code = []
            dnames: dict[str, int] = {}
            for loc in locations:
                key = "/".join(loc[:depth]) if loc is not None and len(loc) >= depth else None
                if key is None:
                    per_code.append(-1)
                else:
                    per_code.append(dnames.setdefault(key, len(dnames)))
            by_code = np.asarray(per_code, dtype=np.int64)
            known = by_code[loc_code]
            # Unknown domain: the host's own (offset past the named ones).
            domains[level] = np.where(known < 0, len(dnames) + roots, known).astype(np.int32)
            names[level] = [*dnames, *(f"{uuids[r]}" for r in range(n))]
        return HostArrays(locations=locations, loc_code=loc_code, domains=domains,
                          domain_names=names, tags=tags)
