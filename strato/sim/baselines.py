"""Baseline policies on the in-memory model: what Strato is compared with.

All share one filter funnel (hard rules, then resources per class, then
traits: the order and reason keys of Strato's explain) and differ only in
how they pick among the hosts that pass:

* random: any passing host, uniformly (seeded);
* first-fit: the passing host with the lowest index;
* nova: Nova's FilterScheduler defaults: filter, then the RAMWeigher (most
  free MEMORY_MB first, i.e. spread), host_subset_size 1.

Baselines enforce hard rules and ignore soft ones (as Nova does without its
soft-affinity weighers); soft-rule satisfaction is still measured for them.
Multi-instance requests are placed instance by instance, all or nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from strato.sim.cluster import BoolArray, ClusterModel, IntMatrix
from strato.sim.invariants import StoreSnapshot
from strato.sim.ledger import Ledger, describe
from strato.sim.scenario import RuleSpec
from strato.sim.target import Outcome, Placed
from strato.sim.workload import SimRequest


class ModelTarget:
    """A policy over a private Ledger; subclasses choose one row among candidates."""

    name = "model"

    def __init__(self, model: ClusterModel, seed: int = 1) -> None:
        self.model = model
        self.ledger = Ledger(model)
        self.rng = random.Random(f"{self.name}-{seed}")

    def choose(self, rows: np.ndarray, free: IntMatrix) -> int:
        raise NotImplementedError

    def schedule(self, request: SimRequest) -> Outcome:
        m, led = self.model, self.ledger
        demand = m.demand(request.resources)
        if (demand < 0).any():
            return Outcome(reason="unknown resource class")
        cuts: list[tuple[str, BoolArray]] = []
        spread: list[RuleSpec] = []
        for rule in request.rules:
            if not rule.hard:
                continue
            cuts.append((describe(rule), led.rule_mask(rule, request.group)))
            if rule.type in ("affinity", "anti_affinity"):
                spread.append(rule)
        for t in request.required_traits:
            cuts.append((f"trait {t} missing", m.trait_mask([t])))
        base: BoolArray = np.ones(m.size, dtype=bool)
        for _, mask in cuts:
            base = base & mask
        free = led.free()
        chosen: list[int] = []
        for i in range(len(request.consumers)):
            ok = base & self._fits(free, demand)
            for rule in spread:
                ok &= self._among_new(rule, chosen)
            rows = np.flatnonzero(ok)
            if rows.size == 0:
                reason = (self._funnel(cuts, free, demand) if i == 0
                          else "no joint assignment for all instances")
                return Outcome(reason=reason, detail=reason)
            row = self.choose(rows, free)
            chosen.append(row)
            free[row] -= demand
        placed = []
        for consumer, row in zip(request.consumers, chosen, strict=True):
            led.place(consumer, row, demand, request.group)
            alloc = {rc: int(demand[j]) for j, rc in enumerate(m.classes) if demand[j]}
            placed.append(Placed(consumer, m.uuids[row], {m.uuids[row]: alloc}))
        return Outcome(placements=tuple(placed))

    def _fits(self, free: IntMatrix, demand: IntMatrix) -> BoolArray:
        need = demand > 0
        both = (free[:, need] >= demand[need]) & (self.model.max_unit[:, need] >= demand[need])
        ok: BoolArray = np.all(both, axis=1)
        return ok

    def _among_new(self, rule: RuleSpec, chosen: Sequence[int]) -> BoolArray:
        dom = self.model.domains[rule.level]
        if not chosen:
            return np.ones(self.model.size, dtype=bool)
        codes = np.unique(dom[list(chosen)])
        out: BoolArray = (~np.isin(dom, codes) if rule.type == "anti_affinity"
                          else np.isin(dom, codes))
        return out

    def _funnel(self, cuts: list[tuple[str, BoolArray]], free: IntMatrix,
                demand: IntMatrix) -> str:
        """The stage that removed the last hosts, in Strato's explain order."""
        m = self.model
        stages = [c for c in cuts if not c[0].startswith("trait")]
        for j, rc in enumerate(m.classes):
            if demand[j] > 0:
                stages.append((f"{rc}: no inventory", m.capacity[:, j] > 0))
                stages.append((f"{rc}: short", (free[:, j] >= demand[j])
                               & (m.max_unit[:, j] >= demand[j])))
        stages += [c for c in cuts if c[0].startswith("trait")]
        alive = np.ones(m.size, dtype=bool)
        last = "no hosts"
        for reason, ok in stages:
            after = alive & ok
            if after.sum() < alive.sum():
                last = reason
            alive = after
            if not alive.any():
                return last
        return "no joint assignment for all instances"

    def release(self, consumers: Sequence[str]) -> None:
        for c in consumers:
            self.ledger.release(c)

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        return [self.ledger.snapshot(self.name)]

    def close(self) -> None:
        pass


class RandomFit(ModelTarget):
    name = "random"

    def choose(self, rows: np.ndarray, free: IntMatrix) -> int:
        return int(rows[self.rng.randrange(rows.size)])


class FirstFit(ModelTarget):
    name = "first-fit"

    def choose(self, rows: np.ndarray, free: IntMatrix) -> int:
        return int(rows[0])


class NovaLike(ModelTarget):
    name = "nova"

    def __init__(self, model: ClusterModel, seed: int = 1) -> None:
        super().__init__(model, seed)
        self._ram = model.col.get("MEMORY_MB")

    def choose(self, rows: np.ndarray, free: IntMatrix) -> int:
        if self._ram is None:
            return int(rows[0])
        # RAMWeigher, multiplier 1.0: most free RAM wins; argmax keeps the first on ties.
        return int(rows[int(np.argmax(free[rows, self._ram]))])


BASELINES: dict[str, type[ModelTarget]] = {
    "random": RandomFit, "first-fit": FirstFit, "nova": NovaLike}
