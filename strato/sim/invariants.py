"""Hard invariants over one or more zones' stores: what must never happen.

* no provider over capacity: for every provider and class, the sum of
  allocations is at most (total - reserved) * allocation_ratio, and nothing
  is allocated from a class the provider has no inventory of;
* no consumer allocated twice: a consumer's allocations live in one zone only
  — except its part on a shared pool (a MISC_SHARES_VIA_AGGREGATE provider,
  e.g. a regional disk pool), which may sit in an ancestor zone;
* no held claim outlives its expiry: a provisional part of a cross-zone
  placement is confirmed or released (checked after the zones' reapers ran);
* (when the caller knows which consumers should be alive) no orphan: every
  allocation belongs to a live consumer, and no live consumer lost its
  allocations.

`check_databases(dbs)` reads every zone's store and returns the violations;
the zone-tree tests call it with their zones' Database objects. It also works
on snapshots that did not come from a database (the baselines' model).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from strato.store.db import Database
from strato.store.schema import (
    allocations,
    inventories,
    provisional_claims,
    resource_classes,
    resource_provider_traits,
    resource_providers,
    traits,
)
from strato.store.util import utcnow

rpt = resource_provider_traits


@dataclass(slots=True)
class StoreSnapshot:
    """One zone's truth: capacities and every consumer's allocations."""

    zone: str
    # provider uuid -> class -> capacity ((total - reserved) * ratio)
    capacity: dict[str, dict[str, int]] = field(default_factory=dict)
    # consumer uuid -> provider uuid -> class -> amount
    allocations: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # Providers that share their inventory through aggregates (pools).
    sharing: set[str] = field(default_factory=set)
    # Consumers whose held (provisional) claim is past its expiry.
    expired_holds: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # over_capacity | no_inventory | allocated_twice | orphan | lost
    detail: str


class InvariantError(AssertionError):
    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        shown = "; ".join(f"{v.kind}: {v.detail}" for v in self.violations[:10])
        more = len(self.violations) - 10
        super().__init__(shown + (f" (and {more} more)" if more > 0 else ""))


def snapshot(db: Database, zone: str = "zone") -> StoreSnapshot:
    """Read one zone's capacities and allocations in one read transaction."""
    rp, inv, rc, al = resource_providers, inventories, resource_classes, allocations
    snap = StoreSnapshot(zone=zone)
    with db.read() as conn:
        for uuid, name, total, reserved, ratio in conn.execute(
                sa.select(rp.c.uuid, rc.c.name, inv.c.total, inv.c.reserved,
                          inv.c.allocation_ratio)
                .join(rp, rp.c.id == inv.c.resource_provider_id)
                .join(rc, rc.c.id == inv.c.resource_class_id)):
            snap.capacity.setdefault(uuid, {})[name] = int((total - reserved) * ratio)
        for consumer, uuid, name, used in conn.execute(
                sa.select(al.c.consumer_id, rp.c.uuid, rc.c.name, al.c.used)
                .join(rp, rp.c.id == al.c.resource_provider_id)
                .join(rc, rc.c.id == al.c.resource_class_id)):
            per = snap.allocations.setdefault(consumer, {}).setdefault(uuid, {})
            per[name] = per.get(name, 0) + int(used)
        snap.sharing = set(conn.execute(
            sa.select(rp.c.uuid).join(rpt, rpt.c.resource_provider_id == rp.c.id)
            .join(traits, traits.c.id == rpt.c.trait_id)
            .where(traits.c.name == "MISC_SHARES_VIA_AGGREGATE")).scalars())
        snap.expired_holds = list(conn.execute(
            sa.select(provisional_claims.c.consumer_uuid).where(
                provisional_claims.c.state == "held",
                provisional_claims.c.expires_at < utcnow())).scalars())
    return snap


def check(snapshots: Sequence[StoreSnapshot], live: Collection[str] | None = None
          ) -> list[Violation]:
    """Every violation across the zones (empty: all invariants hold)."""
    out: list[Violation] = []
    where: dict[str, list[str]] = defaultdict(list)
    for snap in snapshots:
        used: dict[tuple[str, str], int] = defaultdict(int)
        for consumer, per_rp in snap.allocations.items():
            if any(uuid not in snap.sharing for uuid in per_rp):
                where[consumer].append(snap.zone)
            for uuid, per_rc in per_rp.items():
                for name, amount in per_rc.items():
                    used[(uuid, name)] += amount
        for (uuid, name), amount in sorted(used.items()):
            cap = snap.capacity.get(uuid, {}).get(name)
            if cap is None:
                out.append(Violation("no_inventory", f"zone {snap.zone}: provider {uuid} "
                                     f"has {amount} {name} allocated and no {name} inventory"))
            elif amount > cap:
                out.append(Violation("over_capacity", f"zone {snap.zone}: provider {uuid} "
                                     f"{name} used {amount} > capacity {cap}"))
        for consumer in snap.expired_holds:
            out.append(Violation("expired_hold", f"zone {snap.zone}: consumer {consumer} "
                                 "still holds a provisional claim past its expiry"))
    for consumer, zones in sorted(where.items()):
        if len(zones) > 1:
            out.append(Violation("allocated_twice",
                                 f"consumer {consumer} has allocations in zones "
                                 f"{', '.join(zones)}"))
    if live is not None:
        alive = set(live)
        for consumer in sorted(where.keys() - alive):
            out.append(Violation("orphan", f"consumer {consumer} holds allocations but "
                                 "is not alive"))
        for consumer in sorted(alive - where.keys()):
            out.append(Violation("lost", f"live consumer {consumer} has no allocations"))
    return out


def check_databases(dbs: Sequence[Database], zones: Sequence[str] | None = None,
                    live: Collection[str] | None = None) -> list[Violation]:
    names = list(zones) if zones is not None else [f"zone{i}" for i in range(len(dbs))]
    return check([snapshot(db, z) for db, z in zip(dbs, names, strict=True)], live)


def assert_databases(dbs: Sequence[Database], zones: Sequence[str] | None = None,
                     live: Collection[str] | None = None) -> None:
    """Raise InvariantError listing what is wrong (for tests)."""
    found = check_databases(dbs, zones, live)
    if found:
        raise InvariantError(found)
