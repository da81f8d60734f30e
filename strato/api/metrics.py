"""Prometheus metrics of one zone process (`GET /metrics`).

Names follow kube-scheduler's and Nomad's style, prefixed ``strato_``. Each
app has its own registry (tests run many zones in one process). Counters and
histograms are updated where the work happens; the zone tree's state
(children's health, requests in doubt, holds) is read at scrape time by a
collector, so nothing is kept twice.

With ``--workers N`` (PostgreSQL) the workers share their counts through
prometheus-client's multiprocess mode: `strato serve` gives them a fresh
directory (``PROMETHEUS_MULTIPROC_DIR``) for their files, and a scrape,
whichever worker answers it, sums every worker's counters and histograms.
The state read at scrape time (children's health, index size) is the
answering worker's view of the one zone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Receive, Scope, Send

import strato
from strato.api import routename
from strato.api.responses import StatusOf
from strato.model import errors
from strato.observe import Observer
from strato.store import in_doubt, provisional

if TYPE_CHECKING:
    from strato.zone.tree import ZoneTree

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Latency buckets in seconds: a schedule call is ~1 ms in one zone, up to the
# request timeout (30 s) through a troubled tree.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
           5.0, 10.0, 30.0)
# Results of a schedule attempt, as counted.
RESULTS = ("placed", "no_valid_placement", "unavailable", "loop", "conflict", "invalid",
           "error")


# Counts of candidates returned by GET /allocation_candidates.
COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics(Observer):
    def __init__(self, tree: ZoneTree | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tree = tree
        self.schedule_attempts = Counter(
            "strato_schedule_attempts", "POST /strato/v1/schedule calls by result",
            ["result"], registry=self.registry)
        self.schedule_duration = Histogram(
            "strato_schedule_duration_seconds", "Time to answer POST /strato/v1/schedule "
            "(decision and claim, through the tree)", ["result"], buckets=BUCKETS,
            registry=self.registry)
        self.placements = Counter(
            "strato_placements", "Consumers placed by POST /strato/v1/schedule",
            registry=self.registry)
        self.http_requests = Counter(
            "strato_http_requests", "HTTP requests by route template and status",
            ["method", "route", "status"], registry=self.registry)
        self.http_duration = Histogram(
            "strato_http_request_duration_seconds", "HTTP request latency by route template",
            ["method", "route"], buckets=BUCKETS, registry=self.registry)
        self.plan_duration = Histogram(
            "strato_plan_duration_seconds", "Time to plan on this zone's own providers "
            "(the decision)", buckets=BUCKETS, registry=self.registry)
        self.claim_duration = Histogram(
            "strato_claim_duration_seconds", "Time to claim a plan (its transaction "
            "included)", buckets=BUCKETS, registry=self.registry)
        self.lost_races = Counter(
            "strato_claim_lost_races", "Claims that found their plan taken by another "
            "writer (planned again)", registry=self.registry)
        self.commit_duration = Histogram(
            "strato_db_commit_duration_seconds", "Time of a write transaction's commit",
            buckets=BUCKETS, registry=self.registry)
        self.sync_duration = Histogram(
            "strato_db_sync_duration_seconds", "Time of an fsync of the SQLite database's "
            "write-ahead log (commits that must be durable wait for one)",
            buckets=BUCKETS, registry=self.registry)
        self.refresh_duration = Histogram(
            "strato_engine_refresh_duration_seconds", "Time for the in-memory index to "
            "catch up with the store", buckets=BUCKETS, registry=self.registry)
        self.child_calls = Histogram(
            "strato_child_call_duration_seconds", "Calls to child zones by outcome (ok, "
            "error, loop, unreachable, malformed)", ["child", "outcome"], buckets=BUCKETS,
            registry=self.registry)
        self.candidates_returned = Histogram(
            "strato_allocation_candidates_returned", "Allocation requests returned by "
            "GET /allocation_candidates", buckets=COUNT_BUCKETS, registry=self.registry)
        for r in RESULTS:
            self.schedule_attempts.labels(r)

    # -- Observer: what the store, engine, scheduler and tree report --------------

    def planned(self, seconds: float) -> None:
        self.plan_duration.observe(seconds)

    def claimed(self, seconds: float) -> None:
        self.claim_duration.observe(seconds)

    def lost_race(self) -> None:
        self.lost_races.inc()

    def committed(self, seconds: float) -> None:
        self.commit_duration.observe(seconds)

    def synced(self, seconds: float) -> None:
        self.sync_duration.observe(seconds)

    def refreshed(self, seconds: float) -> None:
        self.refresh_duration.observe(seconds)

    def zone_called(self, child: str, seconds: float, outcome: str) -> None:
        self.child_calls.labels(child, outcome).observe(seconds)

    def scheduled(self, result: str, seconds: float, placed: int = 0) -> None:
        self.schedule_attempts.labels(result).inc()
        self.schedule_duration.labels(result).observe(seconds)
        if placed:
            self.placements.inc(placed)

    def exposition(self) -> bytes:
        """The text a scrape gets (blocking: the zone's state is read from the
        store; call it in a worker thread)."""
        path = os.environ.get(MULTIPROC_ENV)
        if path:
            # Every worker's counts, from their files (this registry's own
            # metrics are written there too, so are not read twice).
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=path)
        else:
            registry = self.registry
        text = generate_latest(registry)
        if self.tree is not None:
            state = CollectorRegistry(auto_describe=True)
            state.register(TreeCollector(self.tree))
            text += generate_latest(state)
        return text


def result_of(status: int, code: str | None) -> str:
    """A schedule answer's status and error code, as a result label."""
    if status == 200:
        return "placed"
    if code == errors.ZONE_LOOP:
        # The zone tree has a cycle (508): the operator's to remove, not a fault.
        return "loop"
    if status == 503:
        return "unavailable"
    if status == 409:
        return "no_valid_placement" if code == "strato.no_valid_placement" else "conflict"
    if 400 <= status < 500:
        return "invalid"
    return "error"


class TreeCollector(Collector):
    """The zone's state, read when scraped."""

    def __init__(self, tree: ZoneTree) -> None:
        self.tree = tree

    def collect(self) -> Iterator[Any]:
        tree = self.tree
        info = InfoMetricFamily("strato_zone", "This zone")
        info.add_metric([], {"zone": tree.config.name, "version": strato.__version__})
        yield info
        healthy = GaugeMetricFamily("strato_child_healthy", "1 if the child zone answers",
                                    labels=["child"])
        failures = GaugeMetricFamily("strato_child_failures",
                                     "Consecutive failures of calls to the child zone",
                                     labels=["child"])
        since = GaugeMetricFamily("strato_child_seconds_since_ok",
                                  "Seconds since the child zone last answered",
                                  labels=["child"])
        for name, h in sorted(tree.health.items()):
            healthy.add_metric([name], 1.0 if h.healthy else 0.0)
            failures.add_metric([name], float(h.failures))
            if h.last_ok is not None:
                since.add_metric([name], max(0.0, time.monotonic() - h.last_ok))
        yield healthy
        yield failures
        yield since
        cached = GaugeMetricFamily("strato_child_summary_providers",
                                   "Providers in the child's last summary", labels=["child"])
        for name, c in sorted(tree.cache.items()):
            cached.add_metric([name], float(c.body.get("providers", 0)))
        yield cached
        index = getattr(tree.local.engine, "index", None)
        providers = GaugeMetricFamily("strato_engine_providers",
                                      "Providers in this zone's in-memory index")
        providers.add_metric([], float(getattr(index, "size", 0) or 0))
        yield providers
        with tree.db.read() as conn:
            doubt = in_doubt.counts(conn)
            states = provisional.counts(conn)
        doubtful = GaugeMetricFamily("strato_requests_in_doubt", "Requests a child may have "
                                     "acted on without this zone learning the answer",
                                     labels=["child"])
        for name, n in sorted(doubt.items()):
            doubtful.add_metric([name], float(n))
        yield doubtful
        holds = GaugeMetricFamily("strato_provisional_holds", "Consumers held provisionally "
                                  "(parts of cross-zone placements not yet confirmed)",
                                  labels=["state"])
        for st, n in sorted(states.items()):
            holds.add_metric([st], float(n))
        yield holds


class HttpMetrics:
    """ASGI middleware: every HTTP request counted by route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        answered = StatusOf(send)
        try:
            await self.app(scope, receive, answered)
        finally:
            route = _route(scope)
            method = str(scope.get("method", ""))
            self.metrics.http_requests.labels(method, route, str(answered.status)).inc()
            self.metrics.http_duration.labels(method, route).observe(
                time.perf_counter() - start)


def _route(scope: Scope) -> str:
    """The route's template (bounded label values), not the path."""
    return routename.template(scope) or "unmatched"
