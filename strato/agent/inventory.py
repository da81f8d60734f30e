"""From host facts to the inventory the zone should hold: pure, no I/O.

What the agent reports per class it manages (VCPU, MEMORY_MB, DISK_GB):

* ``total``: what the host has (logical CPUs, MiB of RAM, GiB over the disk paths);
* ``reserved = static + external``, capped at ``total``, where

  - ``static`` is the operator's reservation (host OS, hypervisor), and
  - ``external`` is usage Strato did not place:
    ``max(0, used_on_host - placed / allocation_ratio)``. ``used_on_host`` is
    the kernel's view (memory not available, smoothed busy CPUs, bytes used on
    the disk paths) and includes Strato's own workloads; ``placed`` is the sum
    of Strato's allocations on this provider, which are in virtual units, hence
    the ratio. It is rounded up to a granule (1 VCPU, 256 MiB, 1 GiB) and only
    moves when it changed by more than one granule, so small jitter does not
    turn into an inventory write every interval;

* ``max_unit = total``; ``min_unit``, ``step_size`` and ``allocation_ratio`` keep
  the zone's values (an operator's choice) unless the agent is configured
  with a ratio.

Other classes on the provider (``CUSTOM_*`` set by an operator) are left as
they are. Allocations are never touched: when the new capacity is below what
is already allocated the inventory is still reported, the provider is simply
full, and the caller logs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strato.agent.config import MANAGED_CLASSES, AgentConfig
from strato.agent.facts import HostFacts

GRANULE = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}
FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    inventories: dict[str, Record]  # the whole set to PUT
    changed: bool
    external: dict[str, int]
    # class -> (new capacity, already allocated) where the first is smaller
    over_capacity: dict[str, tuple[int, int]]


def external_usage(used_on_host: float, placed: int, ratio: float) -> float:
    # A ratio of 0 (Placement takes one: the class then holds nothing) or
    # less leaves no room for anything placed.
    return max(0.0, used_on_host - (placed / ratio if ratio > 0 else 0.0))


def _quantized(value: float, granule: int) -> int:
    return math.ceil(value / granule - 1e-9) * granule


def _external(rc: str, facts: HostFacts, config: AgentConfig, placed: int, ratio: float,
              current: Record | None) -> int:
    if rc not in config.measure:
        return 0
    g = GRANULE[rc]
    want = _quantized(external_usage(facts.used.get(rc, 0.0), placed, ratio), g)
    if current is not None:
        # Hysteresis: keep what the zone has while it is within one granule.
        have = int(current["reserved"]) - config.reserved.get(rc, 0)
        if have >= 0 and abs(want - have) <= g:
            return have
    return want


def _record(rc: str, facts: HostFacts, config: AgentConfig, current: Record | None,
            placed: int) -> tuple[Record | None, int]:
    total = facts.totals()[rc]
    if total < 1:
        if current is not None and placed > 0:
            # Class vanished but is allocated: removing it would fail (inventory in
            # use); keep it, full.
            return {**current, "reserved": current["total"]}, 0
        return None, 0
    ratio = float(config.allocation_ratio.get(
        rc, current["allocation_ratio"] if current else 1.0))
    ext = _external(rc, facts, config, placed, ratio, current)
    min_unit = int(current["min_unit"]) if current else 1
    rec: Record = {
        "total": total,
        "reserved": min(total, config.reserved.get(rc, 0) + ext),
        "min_unit": min(min_unit, total),
        "max_unit": total,
        "step_size": int(current["step_size"]) if current else 1,
        "allocation_ratio": ratio,
    }
    return rec, ext


def plan(facts: HostFacts, config: AgentConfig, current: Mapping[str, Record],
         placed: Mapping[str, int]) -> Plan:
    """The inventory set to report, given the zone's `current` set and its usages."""
    out: dict[str, Record] = {rc: dict(r) for rc, r in current.items()
                              if rc not in MANAGED_CLASSES}
    external: dict[str, int] = {}
    over: dict[str, tuple[int, int]] = {}
    for rc in MANAGED_CLASSES:
        rec, ext = _record(rc, facts, config, current.get(rc), placed.get(rc, 0))
        if rec is None:
            continue
        out[rc] = rec
        external[rc] = ext
        cap = int((rec["total"] - rec["reserved"]) * rec["allocation_ratio"])
        if cap < placed.get(rc, 0):
            over[rc] = (cap, placed[rc])
    changed = _normal(out) != _normal(current)
    return Plan(inventories=out, changed=changed, external=external, over_capacity=over)


def _normal(invs: Mapping[str, Record]) -> dict[str, tuple[float, ...]]:
    return {rc: tuple(float(r[f]) for f in FIELDS) for rc, r in invs.items()}
