"""What a run measured, collected the same way for every policy.

Definitions (docs/simulator.md repeats them):

* decision latency: wall time of one `Target.schedule` call (claim included);
  placements/s: consumers placed / wall time of the whole run.
* utilization of class c at time t: used_c / capacity_c over the cluster.
* stranded capacity of class c at time t: free c on hosts where c is
  usable in principle but blocked by another class. Over the workload's
  shapes S_c that ask for c, host h strands its free c when some shape in
  S_c would fit on h by c alone (free_c >= demand_c), yet no shape in S_c
  fits on h in every class. Reported as a share of the cluster's c.
  (Rules and traits are ignored: this is about the resource vector.)
* load of a request: instances x mean over classes of demand_c/capacity_c,
  times its lifetime cut at the horizon (the last arrival): cluster-seconds.
  Accepted load share = accepted load / offered load.
* hard violations: accepted placements that broke a hard rule (location,
  tags, traits, affinity) judged on the runner's own ledger, or that put a
  host over capacity in it; plus the invariant checker's findings on the
  target's store at the end.
* soft-rule satisfaction: kept soft rules / soft rules of accepted requests.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strato.sim.cluster import ClusterModel, IntMatrix
from strato.sim.ledger import Ledger, demand_of
from strato.sim.scenario import WorkloadSpec
from strato.sim.target import Outcome
from strato.sim.workload import SimRequest


@dataclass(slots=True)
class Series:
    times: list[float] = field(default_factory=list)
    utilization: list[list[float]] = field(default_factory=list)  # per sample, per class
    stranded: list[list[float]] = field(default_factory=list)


class StrandedGauge:
    """Stranded capacity per class, vectorised over hosts and shapes."""

    def __init__(self, model: ClusterModel, workload: WorkloadSpec) -> None:
        self.model = model
        rows = [model.demand(s.resources) for s in workload.shapes]
        self.shapes: IntMatrix = np.array([r for r in rows if (r >= 0).all()], dtype=np.int64)

    def __call__(self, free: IntMatrix) -> list[float]:
        m, s = self.model, self.shapes
        out = []
        if s.size == 0:
            return [0.0] * len(m.classes)
        # fits[h, s]: shape s fits host h in every class it asks for.
        fits = np.ones((m.size, len(s)), dtype=bool)
        for j in range(len(m.classes)):
            fits &= free[:, j:j + 1] >= s[None, :, j]
        for j in range(len(m.classes)):
            asks = s[:, j] > 0
            if not asks.any() or m.total[j] == 0:
                out.append(0.0)
                continue
            by_c = (free[:, j:j + 1] >= s[None, asks, j]).any(axis=1)
            blocked = by_c & ~fits[:, asks].any(axis=1)
            out.append(float(free[blocked, j].sum()) / float(m.total[j]))
        return out


class Metrics:
    def __init__(self, model: ClusterModel, workload: WorkloadSpec) -> None:
        self.model = model
        self.latencies = array("d")
        self.requests = 0
        self.accepted = 0
        self.placed = 0
        self.reasons: Counter[str] = Counter()
        self.by_shape: dict[str, list[int]] = {s.name: [0, 0] for s in workload.shapes}
        self.retries = 0
        self.conflicted = 0
        self.hard_violations = 0
        self.violations: list[str] = []
        self.soft_total = 0
        self.soft_kept = 0
        self.relaxed = 0
        self.series = Series()
        self.stranded = StrandedGauge(model, workload)
        # Per request, for the load figures once the horizon is known.
        self._t = array("d")
        self._life = array("d")
        self._weight = array("d")
        self._ok = array("b")
        self.release_s = 0.0
        self.wall_s = 0.0
        # Sum of instances x demand x lifetime per class: with the horizon, the
        # steady-state load the workload offers (Little's law), for sizing.
        self._intensity = np.zeros(len(model.classes), dtype=np.float64)
        self._shapes: dict[tuple[tuple[str, int], ...], tuple[IntMatrix, float, bool]] = {}

    def _demand(self, request: SimRequest) -> tuple[IntMatrix, float, bool]:
        """(demand row, mean share of the cluster per instance, known classes),
        once per distinct shape: a run has millions of requests and few shapes."""
        key = tuple(sorted(request.resources.items()))
        got = self._shapes.get(key)
        if got is None:
            d = self.model.demand(request.resources)
            total = self.model.total
            share = np.where(total > 0, d / np.maximum(total, 1), 0.0)
            known = bool((d >= 0).all())
            got = self._shapes[key] = (d, float(share.mean()) if known else 0.0, known)
        return got

    def weight(self, request: SimRequest) -> float:
        return len(request.consumers) * self._demand(request)[1]

    def record(self, request: SimRequest, out: Outcome, latency: float, ledger: Ledger) -> None:
        self.requests += 1
        self.latencies.append(latency)
        self.by_shape[request.shape][0] += 1
        self.retries += out.retries
        self.conflicted += 1 if out.retries else 0
        self._t.append(request.time)
        self._life.append(request.lifetime)
        d, share, known = self._demand(request)
        self._weight.append(len(request.consumers) * share)
        self._ok.append(1 if out.accepted else 0)
        if known:
            self._intensity += d * (len(request.consumers) * request.lifetime)
        if not out.accepted:
            self.reasons[out.reason or "unknown"] += 1
            return
        self.accepted += 1
        self.placed += len(out.placements)
        self.relaxed += out.relaxed
        self.by_shape[request.shape][1] += 1
        self._judge(request, out, ledger)

    def _violate(self, text: str) -> None:
        self.hard_violations += 1
        if len(self.violations) < 20:
            self.violations.append(text)

    def _judge(self, request: SimRequest, out: Outcome, ledger: Ledger) -> None:
        m = self.model
        rows = [m.pos[p.host] for p in out.placements]
        for rule in request.rules:
            kept = ledger.kept(rule, request.group, rows)
            if rule.hard and not kept:
                self._violate(f"request {request.index}: {rule.type} rule broken")
            elif not rule.hard:
                self.soft_total += 1
                self.soft_kept += 1 if kept else 0
        if not all(t in m.hosts[r].traits for t in request.required_traits for r in rows):
            self._violate(f"request {request.index}: required trait missing")
        for p, row in zip(out.placements, rows, strict=True):
            ledger.place(p.consumer, row, demand_of(m, p.allocations), request.group)
        if ledger.over_capacity(rows):
            self._violate(f"request {request.index}: host over capacity")

    def sample(self, t: float, ledger: Ledger) -> None:
        total = np.maximum(self.model.total, 1)
        self.series.times.append(t)
        self.series.utilization.append([float(x) for x in ledger.used.sum(axis=0) / total])
        self.series.stranded.append(self.stranded(ledger.free()))

    # -- summary -------------------------------------------------------------

    def load(self) -> tuple[float, float]:
        """(offered, accepted) load in cluster-seconds, lifetimes cut at the horizon."""
        if not self._t:
            return 0.0, 0.0
        t = np.frombuffer(self._t, dtype=np.float64)
        life = np.minimum(np.frombuffer(self._life, dtype=np.float64), t[-1] - t)
        w = np.frombuffer(self._weight, dtype=np.float64) * life
        ok = np.frombuffer(self._ok, dtype=np.int8).astype(bool)
        return float(w.sum()), float(w[ok].sum())

    def intensity(self) -> dict[str, float]:
        """Per class: arrival rate x mean(demand x lifetime) / capacity, i.e. the
        utilization the workload would reach in steady state with no rejection."""
        horizon = self._t[-1] if self._t else 0.0
        total = np.maximum(self.model.total, 1) * max(horizon, 1e-9)
        return {c: float(v) for c, v in zip(self.model.classes, self._intensity / total,
                                            strict=True)}

    def summary(self) -> dict[str, Any]:
        lat = np.frombuffer(self.latencies, dtype=np.float64) * 1000.0
        pct = {f"p{q}": float(np.percentile(lat, q)) if lat.size else 0.0
               for q in (50, 90, 99, 99.9)}
        offered, accepted = self.load()
        util = np.array(self.series.utilization) if self.series.utilization else None
        stranded = np.array(self.series.stranded) if self.series.stranded else None
        classes = self.model.classes
        return {
            "requests": self.requests,
            "accepted": self.accepted,
            "rejected": self.requests - self.accepted,
            "rejection_rate": (self.requests - self.accepted) / max(1, self.requests),
            "placements": self.placed,
            "placements_per_s": self.placed / self.wall_s if self.wall_s else 0.0,
            "decisions_per_s": lat.size / (lat.sum() / 1000.0) if lat.sum() else 0.0,
            "latency_ms": {**pct, "mean": float(lat.mean()) if lat.size else 0.0,
                           "max": float(lat.max()) if lat.size else 0.0},
            "wall_s": self.wall_s,
            "release_s": self.release_s,
            "offered_load": offered,
            "accepted_load": accepted,
            "accepted_load_share": accepted / offered if offered else 1.0,
            "reasons": dict(self.reasons.most_common()),
            "by_shape": {k: {"offered": v[0], "accepted": v[1]}
                         for k, v in self.by_shape.items()},
            "retries": self.retries,
            "requests_with_retries": self.conflicted,
            "hard_violations": self.hard_violations,
            "violation_examples": self.violations,
            "soft_rules": {"total": self.soft_total, "kept": self.soft_kept,
                           "satisfaction": self.soft_kept / self.soft_total
                           if self.soft_total else 1.0,
                           "relaxed_by_target": self.relaxed},
            "offered_intensity": self.intensity(),
            "mean_utilization": {c: float(util[:, j].mean()) if util is not None else 0.0
                                 for j, c in enumerate(classes)},
            "mean_stranded": {c: float(stranded[:, j].mean()) if stranded is not None else 0.0
                              for j, c in enumerate(classes)},
        }
