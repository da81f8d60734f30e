"""The workload made concrete: a stream of requests with arrival times and lifetimes.

Drawn lazily (a million requests need not sit in memory) from one
`random.Random` seeded by the run's seed, so the same scenario and seed give
the same stream, request for request, whatever policy consumes it.
"""

from __future__ import annotations

import math
import random
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass

from strato.sim.scenario import ArrivalSpec, LifetimeSpec, RuleSpec, ShapeSpec, WorkloadSpec


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One schedule request of the simulation: `count` consumers of one shape."""

    index: int
    time: float
    shape: str
    consumers: tuple[str, ...]
    resources: dict[str, int]
    required_traits: tuple[str, ...]
    rules: tuple[RuleSpec, ...]
    group: str | None
    lifetime: float
    weigher: str = "spread"
    spare: bool = True


def lifetime(spec: LifetimeSpec, rng: random.Random) -> float:
    if spec.distribution == "mixture":
        x = rng.random() * sum(w for w, _ in spec.components)
        for w, part in spec.components:
            x -= w
            if x <= 0:
                return lifetime(part, rng)
        return lifetime(spec.components[-1][1], rng)
    if spec.distribution == "exponential":
        value = rng.expovariate(1.0 / spec.mean)
    elif spec.distribution == "lognormal":
        value = spec.median * math.exp(spec.sigma * rng.gauss(0.0, 1.0))
    elif spec.distribution == "pareto":
        value = spec.minimum * rng.paretovariate(spec.alpha)
    else:
        value = spec.mean
    value = max(value, spec.minimum if spec.distribution != "fixed" else 0.0)
    return min(value, spec.maximum) if spec.maximum is not None else value


def arrival_times(spec: ArrivalSpec, rng: random.Random) -> Iterator[float]:
    """Arrival instants, endless. Poisson, thinned to follow the daily pattern;
    with bursts, some instants carry a clump of arrivals (same time)."""
    clump = 1.0 - spec.burst_fraction + spec.burst_fraction * spec.burst_mean_size
    event_rate = spec.rate / clump  # so that `rate` stays requests per second
    peak = event_rate * (1.0 + abs(spec.daily_amplitude))
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if spec.daily_amplitude:
            now = event_rate * (1.0 + spec.daily_amplitude
                                * math.sin(2.0 * math.pi * t / spec.period))
            if rng.random() * peak > now:
                continue
        n = 1
        if spec.burst_fraction and rng.random() < spec.burst_fraction:
            # Geometric clump size with the given mean (>= 1).
            p = 1.0 / max(1.0, spec.burst_mean_size)
            n = 1 if p >= 1.0 else 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))
        for _ in range(n):
            yield t


def requests(workload: WorkloadSpec, seed: int) -> Iterator[SimRequest]:
    rng = random.Random(f"workload-{seed}")
    shapes = list(workload.shapes)
    cum = []
    acc = 0.0
    for s in shapes:
        acc += s.weight
        cum.append(acc)
    times = arrival_times(workload.arrival, random.Random(f"arrivals-{seed}"))
    for index in range(workload.requests):
        shape = shapes[_pick(cum, rng.random() * acc)]
        yield _request(index, next(times), shape, workload, rng)


def _pick(cum: list[float], x: float) -> int:
    lo, hi = 0, len(cum) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _request(index: int, t: float, shape: ShapeSpec, workload: WorkloadSpec,
             rng: random.Random) -> SimRequest:
    consumers = tuple(str(uuidlib.UUID(int=rng.getrandbits(128), version=4))
                      for _ in range(shape.count))
    group = f"{shape.name}-g{rng.randrange(shape.group_pool)}" if shape.group_pool else None
    life = lifetime(shape.lifetime or workload.lifetime, rng)
    return SimRequest(index=index, time=t, shape=shape.name, consumers=consumers,
                      resources=dict(shape.resources), required_traits=shape.required_traits,
                      rules=shape.rules, group=group, lifetime=life, weigher=workload.weigher,
                      spare=workload.spare)
