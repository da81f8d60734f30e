"""What the simulator schedules against: one small interface for every policy.

Strato in-process (one zone now, the zone tree later), Strato over HTTP, and
the baselines all implement `Target`. The runner only calls these three
methods, so a new target (e.g. a tree of in-process zones) plugs in without
touching the runner or the metrics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strato.sim.invariants import StoreSnapshot
from strato.sim.workload import SimRequest


@dataclass(frozen=True, slots=True)
class Placed:
    consumer: str
    host: str  # root provider uuid
    allocations: Mapping[str, Mapping[str, int]]  # provider uuid -> class -> amount


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a target answered for one request."""

    placements: tuple[Placed, ...] = ()
    reason: str | None = None  # normalised rejection reason (comparable across targets)
    detail: str | None = None  # the target's own words
    retries: int = 0  # claims lost to concurrent writers and retried
    relaxed: int = 0  # soft rules the target says it dropped

    @property
    def accepted(self) -> bool:
        return bool(self.placements)


class Target(Protocol):
    name: str

    def schedule(self, request: SimRequest) -> Outcome:
        """Place and claim every consumer of `request`, or none (atomic)."""
        ...

    def release(self, consumers: Sequence[str]) -> None:
        """The consumers ended: free their allocations."""
        ...

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        """The target's own truth (one snapshot per zone) for the invariant checker."""
        ...

    def close(self) -> None:
        ...


# -- rejection reasons --------------------------------------------------------------

_SHORT = re.compile(r": short of \d+")
_GROUP = re.compile(r"\b(anti_affinity|affinity) [^@\s]+@")


def normalise_reason(reason: str) -> str:
    """'VCPU: short of 4' -> 'VCPU: short'; 'anti_affinity web-g3@rack' ->
    'anti_affinity@rack': one key per cause, not per request."""
    return _GROUP.sub(r"\1@", _SHORT.sub(": short", reason))


_PRUNED_SHORT = re.compile(r"^pruned: (?:no capacity \((\w+) largest free|not enough (\w+) for)")


def reason_from_explain(explain: Mapping[str, Any]) -> str:
    """The cause of a rejection, from a NoValidPlacement explain.

    In one zone the explain is a funnel that removes providers stage by stage;
    the reason is the stage that removed the last candidates (the one that
    emptied the set) of the first group that ended empty. If every group kept
    providers, the solver could not assign all instances together (spread
    rules among new instances, or not enough room for all of them).

    Through a zone tree the explain lists each child's outcome: the reason is
    that of the first child that looked and found nothing, else of the first
    child pruned; a child pruned for capacity counts as "<class>: short", so
    tree and flat runs compare.
    """
    for group in explain.get("groups", []):
        if group.get("remaining", 1) == 0 and group.get("removed"):
            return normalise_reason(str(group["removed"][-1]["reason"]))
    if "groups" in explain:
        return "no joint assignment for all instances"
    children = explain.get("children") or []
    for child in children:
        if child.get("explain"):
            return reason_from_explain(child["explain"])
    for child in children:
        m = _PRUNED_SHORT.match(str(child.get("reason", "")))
        if m:
            return f"{m.group(1) or m.group(2)}: short"
    if children:
        return normalise_reason(re.sub(r"\d+", "N", str(children[0].get("reason", ""))))
    return "no joint assignment for all instances"
