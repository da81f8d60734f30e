"""The clairvoyant optimum for small scenarios: how far from perfect packing is a policy?

An online scheduler decides each request when it arrives, without knowing
what comes next. The bound here knows the whole workload (arrivals and
lifetimes) in advance and chooses which requests to accept and where, to
maximise the accepted load (the metric `Metrics.load` reports), as a
mixed-integer program solved by HiGHS:

    maximise   sum_r  load_r * y_r
    subject to sum_h n[r,h] = count_r * y_r                   (all or nothing)
               sum_{r active at t} demand_rc * n[r,h] <= capacity_hc
                                     for every host h, class c, and every
                                     maximal set of overlapping requests t
               sum_{r in g active at t} sum_{h in D} n[r,h] <= 1
                                     (hard anti-affinity of group g, domain D)
               n[r,h] = 0 where a hard filter (traits, tags, location) fails

Hard affinity and soft rules are left out: dropping constraints only raises
the optimum, so the value stays an upper bound on any policy. If HiGHS stops
at its time limit the answer carries the dual bound as well, and the gap is
measured against that bound (conservative).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strato.sim.cluster import ClusterModel
from strato.sim.invariants import StoreSnapshot
from strato.sim.ledger import Ledger
from strato.sim.metrics import Metrics
from strato.sim.scenario import Scenario
from strato.sim.target import Outcome, Placed
from strato.sim.workload import SimRequest, requests


@dataclass(slots=True)
class ExactSolution:
    objective: float  # best accepted load found (cluster-seconds)
    bound: float  # proven upper bound on the accepted load
    offered: float
    status: str
    seconds: float
    variables: int
    rows: int
    hosts_of: dict[int, list[int]] = field(default_factory=dict)  # request index -> rows

    def as_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "bound": self.bound, "offered": self.offered,
                "objective_share": self.objective / self.offered if self.offered else 1.0,
                "bound_share": self.bound / self.offered if self.offered else 1.0,
                "status": self.status, "seconds": self.seconds,
                "variables": self.variables, "rows": self.rows}


@dataclass(frozen=True, slots=True)
class SolveProgress:
    """Where a solve stands: the best accepted load found so far (`incumbent`) and
    the proven upper bound on it, in cluster-seconds of `offered`; `done` on the last
    report, which carries HiGHS's status."""

    seconds: float
    incumbent: float
    bound: float
    offered: float
    done: bool = False
    status: str = ""


# Seconds of solver time between two progress reports.
PROGRESS_EVERY = 1.0


def new_highs() -> Any:
    """A silent `highspy.Highs`. Its constructor prints a banner on the process's
    stdout (fd 1, from C++) before any option can be set: fd 1 points at /dev/null
    while it runs, and C's buffer is flushed there before fd 1 comes back."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
            ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.silent()
    return h


def _cliques(reqs: Sequence[SimRequest], ends: Sequence[float]) -> list[list[int]]:
    """Maximal sets of requests alive together (interval graph: at most one per arrival)."""
    events = sorted([(ends[i], 0, i) for i in range(len(reqs))]
                    + [(r.time, 1, i) for i, r in enumerate(reqs)])
    active: set[int] = set()
    out: list[list[int]] = []
    grew = False
    for _, kind, i in events:
        if kind == 1:
            active.add(i)
            grew = True
        else:
            if grew:
                out.append(sorted(active))
                grew = False
            active.discard(i)
    if grew:
        out.append(sorted(active))
    return out


def solve(scenario: Scenario, model: ClusterModel, seed: int, *,
          time_limit: float = 60.0, hint: dict[int, list[int]] | None = None,
          progress: Callable[[SolveProgress], None] | None = None) -> ExactSolution:
    """`hint`: a feasible solution (request index -> host rows), e.g. a
    policy's decisions, to start from: the optimum found is never worse.
    `progress` is called about every PROGRESS_EVERY seconds while HiGHS works,
    and once at the end."""
    import highspy

    started = time.perf_counter()
    reqs = list(requests(scenario.workload, seed))
    horizon = reqs[-1].time if reqs else 0.0
    ends = [min(r.time + r.lifetime, horizon) for r in reqs]
    gauge = Metrics(model, scenario.workload)
    load = [gauge.weight(r) * (ends[i] - r.time) for i, r in enumerate(reqs)]
    empty = Ledger(model)  # no members: location/tags masks only

    cols_lb: list[float] = []
    cols_ub: list[float] = []
    cost: list[float] = []
    y_col: list[int] = []
    n_cols: list[dict[int, int]] = []  # per request: host row -> column
    demand = []
    for i, r in enumerate(reqs):
        d = model.demand(r.resources)
        demand.append(d)
        y_col.append(len(cost))
        cols_lb.append(0.0)
        cols_ub.append(1.0)
        cost.append(load[i])
        ok = np.zeros(model.size, dtype=bool) if (d < 0).any() else (
            ((model.capacity >= d) & (model.max_unit >= d)) | (d == 0)).all(axis=1)
        ok &= model.trait_mask(r.required_traits)
        host_level = False
        for rule in r.rules:
            if rule.hard and rule.type in ("location", "tags"):
                ok &= empty.rule_mask(rule, None)
            host_level |= rule.hard and rule.type == "anti_affinity" and rule.level == "host"
        cols = {}
        for host in np.flatnonzero(ok).tolist():
            cols[host] = len(cost)
            cols_lb.append(0.0)
            cols_ub.append(1.0 if host_level else float(len(r.consumers)))
            cost.append(0.0)
        n_cols.append(cols)

    starts: list[int] = [0]
    index: list[int] = []
    value: list[float] = []
    lower: list[float] = []
    upper: list[float] = []

    def row(entries: dict[int, float], lo: float, hi: float) -> None:
        index.extend(entries)
        value.extend(entries.values())
        starts.append(len(index))
        lower.append(lo)
        upper.append(hi)

    for i, r in enumerate(reqs):
        entries = {c: 1.0 for c in n_cols[i].values()}
        entries[y_col[i]] = -float(len(r.consumers))
        row(entries, 0.0, 0.0)
    for clique in _cliques(reqs, ends):
        for j in range(len(model.classes)):
            per_host: dict[int, dict[int, float]] = {}
            for i in clique:
                dj = float(demand[i][j])
                if dj > 0:
                    for host, c in n_cols[i].items():
                        per_host.setdefault(host, {})[c] = dj
            for host, entries in per_host.items():
                cap = float(model.capacity[host, j])
                if sum(v * cols_ub[c] for c, v in entries.items()) > cap:
                    row(entries, -highspy.kHighsInf, cap)
        _anti_affinity_rows(reqs, clique, n_cols, model, row, highspy.kHighsInf)

    lp = highspy.HighsLp()
    lp.num_col_ = len(cost)
    lp.num_row_ = len(lower)
    lp.col_cost_ = np.array(cost)
    lp.col_lower_ = np.array(cols_lb)
    lp.col_upper_ = np.array(cols_ub)
    lp.row_lower_ = np.array(lower)
    lp.row_upper_ = np.array(upper)
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.integrality_ = [highspy.HighsVarType.kInteger] * len(cost)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = len(cost)
    lp.a_matrix_.num_row_ = len(lower)
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value)
    h = new_highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 1e-4)
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    if hint:
        start = np.zeros(len(cost))
        for i, r in enumerate(reqs):
            rows_hint = hint.get(r.index)
            if rows_hint and all(x in n_cols[i] for x in rows_hint):
                start[y_col[i]] = 1.0
                for x in rows_hint:
                    start[n_cols[i][x]] += 1.0
        given = highspy.HighsSolution()
        given.col_value = list(start)
        given.value_valid = True
        h.setSolution(given)
    offered = float(sum(load))
    stopped: list[BaseException] = []
    _report_while_solving(h, offered, progress, stopped)
    with _ctrl_c_into(stopped):
        h.run()
    if stopped:
        # Ctrl-C (or an error in `progress`): HiGHS would have swallowed it,
        # ended with "Solve error", and the run gone on to report that.
        raise stopped[0]
    info = h.getInfo()
    sol = np.array(h.getSolution().col_value) if len(cost) else np.zeros(0)
    hosts_of: dict[int, list[int]] = {}
    for i, r in enumerate(reqs):
        if sol.size and sol[y_col[i]] > 0.5:
            rows: list[int] = []
            for hrow, c in n_cols[i].items():
                rows += [hrow] * round(sol[c])
            hosts_of[r.index] = rows
    objective = float(info.objective_function_value) if hosts_of else 0.0
    bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else objective
    solution = ExactSolution(
        objective=objective, bound=max(bound, objective), offered=offered,
        status=h.modelStatusToString(h.getModelStatus()),
        seconds=time.perf_counter() - started, variables=len(cost), rows=len(lower),
        hosts_of=hosts_of)
    if progress is not None:
        progress(SolveProgress(solution.seconds, solution.objective, solution.bound,
                               offered, done=True, status=solution.status))
    return solution


@contextlib.contextmanager
def _ctrl_c_into(stopped: list[BaseException]) -> Iterator[None]:
    """Ctrl-C while HiGHS solves: recorded in `stopped` (the solve's callback
    then stops it), not raised inside the callback, where HiGHS swallows it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def record(signum: int, frame: Any) -> None:
        stopped.append(KeyboardInterrupt())

    previous = signal.signal(signal.SIGINT, record)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _report_while_solving(h: Any, offered: float,
                          progress: Callable[[SolveProgress], None] | None,
                          stopped: list[BaseException]) -> None:
    """HiGHS calls back often during branch and bound: pass on one report a
    second to `progress`, and stop the solve once `stopped` has something (a
    Ctrl-C, or what `progress` raised: HiGHS would swallow it)."""
    last = [-PROGRESS_EVERY]

    def report(event: Any) -> None:
        if stopped:
            event.data_in.user_interrupt = True
            return
        out = event.data_out
        try:
            if progress is not None and out.running_time - last[0] >= PROGRESS_EVERY:
                last[0] = out.running_time
                progress(SolveProgress(float(out.running_time), float(out.mip_primal_bound),
                                       float(out.mip_dual_bound), offered))
        except BaseException as exc:  # (raised again after the solve)
            stopped.append(exc)
            event.data_in.user_interrupt = True

    h.cbMipInterrupt.subscribe(report)


def _anti_affinity_rows(reqs: Sequence[SimRequest], clique: Sequence[int],
                        n_cols: Sequence[dict[int, int]], model: ClusterModel,
                        row: Any, inf: float) -> None:
    by_key: dict[tuple[str, str], list[int]] = {}
    for i in clique:
        r = reqs[i]
        for rule in r.rules:
            if rule.hard and rule.type == "anti_affinity" and r.group:
                by_key.setdefault((r.group, rule.level), []).append(i)
    for (_, level), members in by_key.items():
        dom = model.domains[level]
        per_domain: dict[int, dict[int, float]] = {}
        for i in members:
            for h, c in n_cols[i].items():
                per_domain.setdefault(int(dom[h]), {})[c] = 1.0
        for entries in per_domain.values():
            if len(entries) > 1 or level != "host":
                row(entries, -inf, 1.0)


class ExactTarget:
    """Replays the clairvoyant solution as a policy, so the runner measures it too."""

    name = "exact"

    def __init__(self, solution: ExactSolution, model: ClusterModel) -> None:
        self.solution = solution
        self.model = model
        self.ledger = Ledger(model)

    def schedule(self, request: SimRequest) -> Outcome:
        rows = self.solution.hosts_of.get(request.index)
        if rows is None:
            return Outcome(reason="rejected by the optimum")
        m = self.model
        d = m.demand(request.resources)
        placed = []
        for consumer, row in zip(request.consumers, rows, strict=True):
            self.ledger.place(consumer, row, d, request.group)
            alloc = {rc: int(d[j]) for j, rc in enumerate(m.classes) if d[j]}
            placed.append(Placed(consumer, m.uuids[row], {m.uuids[row]: alloc}))
        return Outcome(placements=tuple(placed))

    def release(self, consumers: Sequence[str]) -> None:
        for c in consumers:
            self.ledger.release(c)

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        return [self.ledger.snapshot(self.name)]

    def close(self) -> None:
        pass
