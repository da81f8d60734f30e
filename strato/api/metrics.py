"""Prometheus metrics of one zone process (`GET /metrics`).

Names follow kube-scheduler's and Nomad's style, prefixed ``strato_``. Each
app has its own registry (tests run many zones in one process). Counters and
histograms are updated where the work happens; the zone tree's state
(children's health, requests in doubt, holds) is read at scrape time by a
collector, so nothing is kept twice.

With ``--workers N`` (PostgreSQL) every worker process has its own
registry: a scrape reaches one worker and shows that worker's counters
(the state read at scrape time is the whole zone's). Scrape each worker, or
run one worker per zone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import strato

if TYPE_CHECKING:
    from strato.zone.tree import ZoneTree

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Latency buckets in seconds: a schedule call is ~1 ms in one zone, up to the
# request timeout (30 s) through a troubled tree.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
           5.0, 10.0, 30.0)
# Results of a schedule attempt, as counted.
RESULTS = ("placed", "no_valid_placement", "unavailable", "conflict", "invalid", "error")


class Metrics:
    def __init__(self, tree: ZoneTree | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
        for r in RESULTS:
            self.schedule_attempts.labels(r)
        if tree is not None:
            self.registry.register(TreeCollector(tree))

    def scheduled(self, result: str, seconds: float, placed: int = 0) -> None:
        self.schedule_attempts.labels(result).inc()
        self.schedule_duration.labels(result).observe(seconds)
        if placed:
            self.placements.inc(placed)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def result_of(status: int, code: str | None) -> str:
    """A schedule answer's status and error code, as a result label."""
    if status == 200:
        return "placed"
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
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            route = _route(scope)
            method = str(scope.get("method", ""))
            self.metrics.http_requests.labels(method, route, str(status)).inc()
            self.metrics.http_duration.labels(method, route).observe(
                time.perf_counter() - start)


def _route(scope: Scope) -> str:
    """The route's template (bounded label values), not the path."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    if scope.get("path") == "/strato/v1/schedule":
        return "/strato/v1/schedule"  # the lean path (api/fast.py) skips the router
    return "unmatched"
