"""The engine of one server process: the index, kept fresh, and queries on it.

Freshness: before answering, the engine reads the store's change sequence
and applies every change committed since its last refresh (re-reading only
the providers those changes touched). So a process never answers from a
view older than the writes committed before the request arrived, even with
several processes on one PostgreSQL database. The claim's transaction stays
the truth: a candidate may still lose a race at claim time.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from strato.engine import cache as kept
from strato.engine import candidates as builder
from strato.engine.index import BoolArray, ProviderIndex
from strato.engine.loader import known_names, load_records, load_usage
from strato.engine.request import CandidateRequest
from strato.engine.summaries import ProviderSummary, summarize
from strato.engine.weighers import Scorer, WeigherConfig
from strato.model.amounts import parse_amounts
from strato.observe import NOBODY, Observer
from strato.store import changes
from strato.store.db import Database, release_memory

# Providers to leave out of an answer: uuids, or a function of the change
# sequence the index reflects that returns them (see Engine.query).
Exclusion = Collection[str] | Callable[[int], Collection[str]]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    weigher: WeigherConfig = field(default_factory=WeigherConfig)
    # Stop generating after this many candidates (Placement's
    # max_allocation_candidates); -1: no cap.
    max_candidates: int = -1
    # Combinations of nested providers one request may examine (see
    # engine/candidates.py): bounds its time and memory.
    max_combinations: int = builder.MAX_COMBINATIONS
    # Rebuild the whole index when a refresh touches more than this share of it.
    full_reload_ratio: float = 0.25

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 weigher: str | None = None, class_weights: Mapping[str, float] | None = None,
                 randomize: bool | None = None, max_candidates: int | None = None,
                 max_combinations: int | None = None) -> EngineConfig:
        """The given values; each one left None comes from the environment
        (STRATO_WEIGHER=spread|pack, STRATO_CLASS_WEIGHTS=VCPU:2,MEMORY_MB:1,
        STRATO_RANDOMIZE_CANDIDATES=1, STRATO_MAX_CANDIDATES=N,
        STRATO_MAX_COMBINATIONS=N), else the default.

        Raises ValueError on an unknown weigher or a malformed value.
        """
        env = os.environ if environ is None else environ
        if weigher is None:
            weigher = env.get("STRATO_WEIGHER") or "spread"
        if class_weights is None:
            class_weights = parse_class_weights(env.get("STRATO_CLASS_WEIGHTS", ""))
        if randomize is None:
            randomize = env.get("STRATO_RANDOMIZE_CANDIDATES", "").lower() in ("1", "true",
                                                                                 "yes")
        if max_candidates is None:
            max_candidates = int(env.get("STRATO_MAX_CANDIDATES") or "-1")
        if max_combinations is None:
            max_combinations = int(env.get("STRATO_MAX_COMBINATIONS")
                                   or builder.MAX_COMBINATIONS)
        if max_combinations < 1:
            raise ValueError(f"max combinations must be at least 1, not {max_combinations}")
        if max_candidates == 0 or max_candidates < -1:
            # (0 would answer every GET /allocation_candidates with none)
            raise ValueError(f"max candidates must be -1 (no cap) or at least 1, not "
                             f"{max_candidates}")
        return cls(weigher=WeigherConfig(name=weigher, class_weights=dict(class_weights),
                                         randomize=randomize),
                   max_candidates=max_candidates, max_combinations=max_combinations)


def parse_class_weights(text: str) -> dict[str, float]:
    """'VCPU=2,MEMORY_MB:1' -> {'VCPU': 2.0, 'MEMORY_MB': 1.0}; ValueError (an
    AmountError naming the item) if malformed."""
    return parse_amounts([text], float)


@dataclass(frozen=True, slots=True)
class AllocationRequest:
    # provider uuid -> resource class -> amount
    allocations: dict[str, dict[str, int]]
    # request group suffix -> provider uuids
    mappings: dict[str, list[str]]
    score: float


@dataclass(frozen=True, slots=True)
class CandidateResult:
    allocation_requests: list[AllocationRequest]
    provider_summaries: list[ProviderSummary]
    # The change sequence the answer reflects (at least).
    seq: int


@dataclass(slots=True)
class RefreshStats:
    full_loads: int = 0
    incremental: int = 0
    own_claims: int = 0  # claims of this process applied without reading the store
    last_refresh_s: float = 0.0


class Engine:
    """Index + freshness + queries, for one process. Thread-safe."""

    def __init__(self, db: Database, config: EngineConfig | None = None) -> None:
        self.db = db
        self.config = config or EngineConfig()
        self.scorer = Scorer(self.config.weigher)
        self.index = ProviderIndex()
        self.stats = RefreshStats()
        self.observer: Observer = NOBODY
        self._loaded = False
        self._lock = threading.Lock()
        # Claims this process committed, by change seq, not yet in the index.
        self._own: dict[int, dict[str, dict[str, int]]] = {}
        self._rc_names: set[str] = set()
        self._trait_names: set[str] = set()
        self._seq_conn: Any = None
        self._exclude_cache: tuple[Collection[str], ProviderIndex, int, BoolArray] | None = None

    # -- freshness ---------------------------------------------------------

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """A read transaction that sees one consistent state (PostgreSQL's
        default READ COMMITTED would let a refresh mix two writes)."""
        if self.db.is_sqlite:
            with self.db.read() as conn:
                yield conn
            return
        with self.db.engine.connect() as conn:
            conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @property
    def loaded(self) -> bool:
        """The index has been read from the store once (the zone can plan)."""
        return self._loaded

    def refresh(self) -> int:
        with self._lock:
            return self._refresh_locked()

    def _peek_seq(self) -> int | None:
        """The store's change sequence, read on a dedicated autocommit DBAPI
        connection: the per-request freshness check costs one tiny statement,
        not a pooled transaction. None if that connection is unusable."""
        try:
            if self._seq_conn is None:
                raw = self.db.engine.raw_connection()
                driver = raw.driver_connection
                if not self.db.is_sqlite:
                    driver.autocommit = True  # type: ignore[union-attr]
                self._seq_conn = raw
            cur = self._seq_conn.cursor()
            try:
                cur.execute("SELECT seq FROM strato_change_counter WHERE id = 1")
                row = cur.fetchone()
            finally:
                cur.close()
            return int(row[0]) if row else None
        except Exception:  # a dropped connection: fall back, reconnect next time
            self._close_seq_conn()
            return None

    def _close_seq_conn(self) -> None:
        conn, self._seq_conn = self._seq_conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()

    def close(self) -> None:
        with self._lock:
            self._close_seq_conn()

    def _refresh_locked(self) -> int:
        if self._loaded:
            seq = self._peek_seq()
            if seq is not None and seq == self.index.seq:
                return seq
        started = time.perf_counter()
        with self._snapshot() as conn:
            seq = changes.current_seq(conn)
            if self._loaded and seq == self.index.seq:
                return seq
            if not self._loaded:
                self._full_load(conn, seq)
            else:
                self._incremental(conn, seq)
        self.stats.last_refresh_s = time.perf_counter() - started
        self.observer.refreshed(self.stats.last_refresh_s)
        self._drop_own()
        return seq

    def settle(self, timeout: float = 0.05) -> None:
        """Before planning: if a group commit of this process is visible in the
        store but its post-commit hooks (own_claim) have not run yet, wait for
        them (microseconds) rather than read back what this process wrote."""
        if not self.db.is_publishing():
            return
        with self._lock:
            if not self._loaded:
                return
            seq = self._peek_seq()
            if seq is None or seq <= self.index.seq:
                return
        self.db.wait_published(timeout)

    def store_seq_nowait(self) -> int | None:
        """`store_seq()` for an event loop: None unless it costs no wait
        (SQLite, whose read of one row is a page in memory, and nobody else
        using the engine at that moment)."""
        if not self.db.is_sqlite or not self._lock.acquire(blocking=False):
            return None
        try:
            return self._peek_seq()
        finally:
            self._lock.release()

    def store_seq(self) -> int | None:
        """The store's change sequence now (one tiny statement), None if unknown."""
        with self._lock:
            return self._peek_seq()

    def own_claim(self, seq: int, usage: Mapping[str, Mapping[str, int]]) -> None:
        """A claim this process committed as change `seq` (adding `usage`, provider
        uuid -> class -> amount): applied to the index without reading the store
        once every change before it is in. Changes made elsewhere break the chain;
        the next refresh then reads the store as usual (absolute usage)."""
        with self._lock:
            if not self._loaded or seq <= self.index.seq:
                return
            self._own[seq] = {u: dict(d) for u, d in usage.items()}
            while self.index.seq + 1 in self._own:
                nxt = self.index.seq + 1
                delta = self._own.pop(nxt)
                if not all(self.index.add_usage(u, d) for u, d in delta.items()):
                    break  # a partial add is overwritten by the next refresh
                self.index.seq = nxt
                self.stats.own_claims += 1
            self._drop_own()

    def _drop_own(self) -> None:
        for s in [s for s in self._own if s <= self.index.seq]:
            del self._own[s]

    def _full_load(self, conn: Connection, seq: int) -> None:
        self.index = ProviderIndex.build(load_records(conn), seq=seq)
        self._rc_names, self._trait_names = known_names(conn)
        release_memory(conn)
        self._loaded = True
        self.stats.full_loads += 1

    def _incremental(self, conn: Connection, seq: int) -> None:
        touched: set[str] = set()
        usage_only = True
        whole = False
        for _, uuid, kind in changes.since(conn, self.index.seq):
            if uuid is None:
                whole = True
                break
            touched.add(uuid)
            usage_only = usage_only and kind == "allocation"
        if whole or len(touched) > max(64, self.config.full_reload_ratio * self.index.size):
            self._full_load(conn, seq)
            return
        if usage_only:
            # Claims move usage only: one query, no record rebuild.
            usage = load_usage(conn, touched)
            if all(self.index.set_usage(u, used) for u, used in usage.items()):
                self.index.seq = seq
                self.stats.incremental += 1
                return
        records = load_records(conn, touched)
        self.index.apply(records, touched - {r.uuid for r in records})
        self.index.seq = seq
        self.stats.incremental += 1

    # -- validation helpers for the API ------------------------------------

    def unknown_names(self, resource_classes: Iterable[str], trait_names: Iterable[str]
                      ) -> tuple[list[str], list[str]]:
        """Names that do not exist in the store (re-checked there on a miss,
        since classes and traits are created without touching providers)."""
        rcs, trs = set(resource_classes), set(trait_names)
        with self._lock:
            if not self._loaded:
                self._refresh_locked()
            miss = (rcs - self._rc_names) or (trs - self._trait_names)
        if miss:
            with self.db.read() as conn:
                known_rc, known_tr = known_names(conn)
            with self._lock:
                self._rc_names, self._trait_names = known_rc, known_tr
        with self._lock:
            return sorted(rcs - self._rc_names), sorted(trs - self._trait_names)

    # -- queries -----------------------------------------------------------

    def query(self, request: CandidateRequest, exclude: Exclusion = ()) -> CandidateResult:
        """Refresh, then build candidates and summaries; all under the lock so
        the index does not change underneath (answers hold uuids, not positions).

        `exclude`: provider uuids left out as if they did not exist (stale
        hosts): neither in allocation requests nor as sharing providers. Or a
        function of the change sequence the index now reflects that returns
        them, called under the lock, so a caller can skip its own store read
        while nothing changed.
        """
        with self._lock:
            seq = self._refresh_locked()
            uuids = exclude(seq) if callable(exclude) else exclude
            return self._query_locked(request, seq, self._exclude_mask(uuids))

    @contextmanager
    def fresh(self) -> Iterator[ProviderIndex]:
        """The index, refreshed, held under the lock for the caller's block
        (the scheduler reads positions and builds candidates from one view)."""
        with self._lock:
            self._refresh_locked()
            yield self.index

    def query_snapshot(self, request: CandidateRequest, exclude: Collection[str] = ()
                       ) -> CandidateResult:
        """Like `query` but without checking the store (the engine alone)."""
        with self._lock:
            return self._query_locked(request, self.index.seq, self._exclude_mask(exclude))

    def _exclude_mask(self, exclude: Collection[str]) -> BoolArray | None:
        """Rows of `exclude` in the current index (None when nothing is excluded).

        Callers pass the same collection object for as long as it holds (the
        host view caches its stale set), so the mask is reused until that
        object, the index or its row count changes: positions only move on a
        full rebuild (a new index) and only grow otherwise.
        """
        if not exclude:
            return None
        index = self.index
        cached = self._exclude_cache
        if (cached is not None and cached[0] is exclude and cached[1] is index
                and cached[2] == index.n):
            return cached[3]
        mask = np.zeros(index.n, dtype=bool)
        rows = [p for p in map(index.pos.get, exclude) if p is not None]
        mask[rows] = True
        # Holding `exclude` and `index` keeps their ids from being reused.
        self._exclude_cache = (exclude, index, index.n, mask)
        return mask

    def _query_locked(self, request: CandidateRequest, seq: int,
                      exclude: BoolArray | None = None) -> CandidateResult:
        index = self.index
        with builder.budget(combinations=self.config.max_combinations):
            cands = kept.build(index, request, self.scorer,
                               max_candidates=self.config.max_candidates, exclude=exclude)
        uuids = index.uuids
        out: list[AllocationRequest] = []
        for c in cands:
            allocs: dict[str, dict[str, int]] = {}
            for p, rc, amount in c.items:
                allocs.setdefault(uuids[p], {})[rc] = amount
            mappings = {suffix: sorted(uuids[p] for p in provs) for suffix, provs in c.mappings}
            out.append(AllocationRequest(allocations=allocs, mappings=mappings, score=c.score))
        summaries = summarize(index, cands, nested_aware=request.nested_aware)
        return CandidateResult(allocation_requests=out, provider_summaries=summaries, seq=seq)
