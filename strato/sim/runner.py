"""Replay a scenario's workload against a Target, in virtual or scaled real time.

One event queue: arrivals come from the workload stream in time order;
every accepted request pushes its departure (arrival + lifetime). Before an
arrival is scheduled, every departure due by then is released. Virtual time
does not wait: a run is as fast as the target decides. Live mode sleeps so
that virtual second t happens at wall second t / time_scale.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strato.sim.cluster import ClusterModel
from strato.sim.invariants import Violation, check
from strato.sim.ledger import Ledger
from strato.sim.metrics import Metrics
from strato.sim.scenario import Scenario
from strato.sim.target import Target
from strato.sim.workload import requests

# Called with (requests done, total) now and then, for a progress bar.
Progress = Callable[[int, int], None]


@dataclass(slots=True)
class RunResult:
    policy: str
    metrics: Metrics
    invariant_violations: list[Violation]

    def summary(self) -> dict[str, Any]:
        out = self.metrics.summary()
        out["invariant_violations"] = len(self.invariant_violations)
        out["invariant_examples"] = [f"{v.kind}: {v.detail}"
                                     for v in self.invariant_violations[:10]]
        return {"policy": self.policy, **out}


def run(scenario: Scenario, target: Target, model: ClusterModel, *, seed: int,
        progress: Progress | None = None, time_scale: float | None = None,
        check_invariants: bool = True) -> RunResult:
    wl = scenario.workload
    ledger = Ledger(model)
    metrics = Metrics(model, wl)
    departures: list[tuple[float, int, tuple[str, ...]]] = []
    interval = max(wl.requests / wl.arrival.rate / max(1, wl.samples), 1e-9)
    next_sample = 0.0
    started = time.perf_counter()
    step = max(1, wl.requests // 200)

    def release_due(now: float) -> None:
        while departures and departures[0][0] <= now:
            _, _, consumers = heapq.heappop(departures)
            t0 = time.perf_counter()
            target.release(consumers)
            metrics.release_s += time.perf_counter() - t0
            for c in consumers:
                ledger.release(c)

    for done, req in enumerate(requests(wl, seed), start=1):
        # Samples see the state between events: release what ended before each.
        while next_sample <= req.time:
            release_due(next_sample)
            metrics.sample(next_sample, ledger)
            next_sample += interval
        release_due(req.time)
        if time_scale:
            delay = started + req.time / time_scale - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        t0 = time.perf_counter()
        out = target.schedule(req)
        latency = time.perf_counter() - t0
        metrics.record(req, out, latency, ledger)
        if out.accepted:
            heapq.heappush(departures, (req.time + req.lifetime, req.index,
                                        tuple(p.consumer for p in out.placements)))
        if progress is not None and (done % step == 0 or done == wl.requests):
            progress(done, wl.requests)
    metrics.wall_s = time.perf_counter() - started
    found: list[Violation] = []
    if check_invariants:
        found = check(target.snapshot_for_invariants(), live=set(ledger.held))
    return RunResult(policy=target.name, metrics=metrics, invariant_violations=found)
