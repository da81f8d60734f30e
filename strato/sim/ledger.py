"""Usage and server-group membership over a ClusterModel, and rules judged on it.

The baselines schedule on a Ledger (it is their whole truth); the runner
keeps its own Ledger, fed from every target's answers, to measure each
policy the same way: utilization, stranded capacity, and whether each
placement kept its request's rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from strato.sim.cluster import BoolArray, ClusterModel, IntMatrix
from strato.sim.invariants import StoreSnapshot
from strato.sim.scenario import RuleSpec


def describe(rule: RuleSpec) -> str:
    """The rule's reason key, as Strato's explain names it (group name left out)."""
    if rule.type == "location":
        return f"location {rule.pattern}"
    if rule.type == "tags":
        return "tags " + ",".join([*rule.required, *(f"!{t}" for t in rule.forbidden)])
    return f"{rule.type}@{rule.level}"


@dataclass(slots=True)
class Holding:
    row: int
    demand: IntMatrix
    group: str | None


class Ledger:
    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.used: IntMatrix = np.zeros_like(model.capacity)
        self.held: dict[str, Holding] = {}
        self.groups: dict[str, dict[str, int]] = {}

    # -- state ---------------------------------------------------------------

    def free(self) -> IntMatrix:
        out: IntMatrix = self.model.capacity - self.used
        return out

    def place(self, consumer: str, row: int, demand: IntMatrix, group: str | None) -> None:
        self.used[row] += demand
        self.held[consumer] = Holding(row, demand, group)
        if group:
            self.groups.setdefault(group, {})[consumer] = row

    def release(self, consumer: str) -> None:
        h = self.held.pop(consumer, None)
        if h is None:
            return
        self.used[h.row] -= h.demand
        if h.group:
            members = self.groups.get(h.group, {})
            members.pop(consumer, None)
            if not members:
                self.groups.pop(h.group, None)

    def over_capacity(self, rows: Sequence[int]) -> bool:
        return bool((self.used[list(rows)] > self.model.capacity[list(rows)]).any())

    def snapshot(self, zone: str) -> StoreSnapshot:
        """The ledger as the invariant checker reads a store."""
        m = self.model
        snap = StoreSnapshot(zone=zone)
        for i, u in enumerate(m.uuids):
            snap.capacity[u] = {rc: int(m.capacity[i, j]) for j, rc in enumerate(m.classes)
                                if m.capacity[i, j] > 0}
        for consumer, h in self.held.items():
            snap.allocations[consumer] = {m.uuids[h.row]: {
                rc: int(h.demand[j]) for j, rc in enumerate(m.classes) if h.demand[j]}}
        return snap

    # -- rules ---------------------------------------------------------------

    def rule_mask(self, rule: RuleSpec, group: str | None) -> BoolArray:
        """Hosts where one new instance keeps `rule`, given the live members."""
        m = self.model
        if rule.type == "location":
            return m.location_mask(rule.pattern or "*")
        if rule.type == "tags":
            return m.tags_mask(rule.required, rule.forbidden)
        dom = m.domains[rule.level]
        rows = list(self.groups.get(group or "", {}).values())
        codes = np.unique(dom[rows]) if rows else np.zeros(0, dtype=np.int64)
        if rule.type == "anti_affinity":
            out: BoolArray = ~np.isin(dom, codes)
            return out
        return np.isin(dom, codes) if codes.size else np.ones(m.size, dtype=bool)

    def kept(self, rule: RuleSpec, group: str | None, rows: Sequence[int]) -> bool:
        """Did placing new instances on `rows` keep `rule`? Judged before they
        are placed; only the rows and the group's members are looked at, so a
        check costs the same on 100,000 hosts as on 10."""
        m = self.model
        if rule.type == "location":
            mask = m.location_mask(rule.pattern or "*")
            return all(bool(mask[r]) for r in rows)
        if rule.type == "tags":
            return all(all(t in m.hosts[r].tags for t in rule.required)
                       and not any(t in m.hosts[r].tags for t in rule.forbidden)
                       for r in rows)
        dom = m.domains[rule.level]
        new = [int(dom[r]) for r in rows]
        old = {int(dom[r]) for r in self.groups.get(group or "", {}).values()}
        if rule.type == "anti_affinity":
            return len(set(new)) == len(new) and not old.intersection(new)
        return len(set(new)) <= 1 and (not old or old.issuperset(new))


def demand_of(model: ClusterModel, allocations: Mapping[str, Mapping[str, int]]) -> IntMatrix:
    """Sum of a placement's allocations as a row over the model's classes."""
    row = np.zeros(len(model.classes), dtype=np.int64)
    for per_rc in allocations.values():
        for rc, amount in per_rc.items():
            row[model.col[rc]] += amount
    return row
