"""Inventories of a provider: the whole set, or one class at a time.

Every write here runs inside the caller's write transaction: it locks the
provider row (PostgreSQL), re-reads the provider so the generation it checks
is the one it bumps, changes the rows, bumps the generation and records one
change. Any failure raises a StratoError and the caller's transaction rolls
back, so nothing is half written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.model.inventory import MAX_FLOAT, MAX_INT, Inventory, capacity
from strato.store import changes, providers
from strato.store.db import lock_providers
from strato.store.providers import Provider
from strato.store.resource_classes import ids_by_name
from strato.store.schema import allocations, inventories, resource_classes
from strato.store.util import utcnow

inv = inventories
# Placement's class-name shape; checked before a name reaches SQL, so that odd
# input (a NUL byte breaks PostgreSQL) is a 4xx and never a 500.
_RC_NAME = re.compile(r"^[A-Z0-9_]+$")
CHANGE_KIND = "inventory"
_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


@dataclass(frozen=True, slots=True)
class InventorySet:
    """A provider's inventories with the generation and time they were read at."""

    generation: int
    inventories: dict[str, Inventory]
    last_modified: datetime | None


# --- validation ------------------------------------------------------------


def inventory_problem(invent: Inventory, *, reserved_may_equal_total: bool = True) -> str | None:
    """Why `invent` is not a valid inventory record, or None when it is.

    Placement refuses a record whose capacity ((total - reserved) *
    allocation_ratio) is negative, and before microversion 1.26 also one whose
    capacity is zero (reserved == total).
    """
    bounds = [("total", invent.total, 1), ("reserved", invent.reserved, 0),
              ("min_unit", invent.min_unit, 1), ("max_unit", invent.max_unit, 1),
              ("step_size", invent.step_size, 1)]
    for name, value, low in bounds:
        if not low <= value <= MAX_INT:
            return f"{name} must be between {low} and {MAX_INT}, got {value}"
    if invent.allocation_ratio > MAX_FLOAT:
        return f"allocation_ratio must be at most {MAX_FLOAT}, got {invent.allocation_ratio}"
    if invent.min_unit > invent.max_unit:
        return (f"min_unit ({invent.min_unit}) must not be greater than max_unit "
                f"({invent.max_unit})")
    cap = capacity(invent.total, invent.reserved, invent.allocation_ratio)
    if cap < 0 or (cap == 0 and not reserved_may_equal_total):
        relation = "greater than" if reserved_may_equal_total else "greater than or equal to"
        return (f"reserved ({invent.reserved}) is {relation} total ({invent.total}) once "
                f"allocation_ratio ({invent.allocation_ratio}) is applied")
    return None


def check_inventory(provider_uuid: str, invent: Inventory, *,
                    reserved_may_equal_total: bool = True, action: str = "update") -> None:
    """400 naming the class, the provider and the offending field (in
    Placement's words: `action` is create for a POST, else update)."""
    problem = inventory_problem(invent, reserved_may_equal_total=reserved_may_equal_total)
    if problem:
        raise errors.BadRequest(
            f"Unable to {action} inventory for resource provider {provider_uuid}: "
            f"Bad inventory {invent.resource_class}: {problem}")


# --- reads -----------------------------------------------------------------


def _rows(conn: Connection, provider_id: int, *, rc_id: int | None = None,
          rc_name: str | None = None) -> list[sa.Row[tuple[object, ...]]]:
    q = (sa.select(resource_classes.c.name, inv)
         .join(resource_classes, resource_classes.c.id == inv.c.resource_class_id)
         .where(inv.c.resource_provider_id == provider_id))
    if rc_id is not None:
        q = q.where(inv.c.resource_class_id == rc_id)
    if rc_name is not None:
        q = q.where(resource_classes.c.name == rc_name)
    return list(conn.execute(q.order_by(inv.c.resource_class_id)).all())


def _inventory(row: sa.Row[tuple[object, ...]]) -> Inventory:
    m = row._mapping
    return Inventory(resource_class=m["name"], total=m["total"], reserved=m["reserved"],
                     min_unit=m["min_unit"], max_unit=m["max_unit"],
                     step_size=m["step_size"], allocation_ratio=float(m["allocation_ratio"]))


def _latest(rows: list[sa.Row[tuple[object, ...]]]) -> datetime | None:
    stamps = [r._mapping["updated_at"] or r._mapping["created_at"] for r in rows]
    return max((s for s in stamps if s is not None), default=None)


def get_inventories(conn: Connection, provider: Provider) -> dict[str, Inventory]:
    """The provider's inventories keyed by resource class name."""
    return {r._mapping["name"]: _inventory(r) for r in _rows(conn, provider.id)}


def get_inventory_set(conn: Connection, provider: Provider) -> InventorySet:
    rows = _rows(conn, provider.id)
    return InventorySet(generation=provider.generation,
                        inventories={r._mapping["name"]: _inventory(r) for r in rows},
                        last_modified=_latest(rows))


def get_inventory(conn: Connection, provider: Provider, resource_class: str
                  ) -> tuple[Inventory, datetime | None]:
    """One class's inventory and when it last changed; 404 when there is none."""
    if not _RC_NAME.fullmatch(resource_class):
        raise _no_inventory(provider, resource_class)
    rows = _rows(conn, provider.id, rc_name=resource_class)
    if not rows:
        raise _no_inventory(provider, resource_class)
    return _inventory(rows[0]), _latest(rows)


def _no_inventory(provider: Provider, resource_class: str) -> errors.NotFound:
    return errors.NotFound(f"No inventory of class {resource_class} for {provider.uuid}")


# --- writes ----------------------------------------------------------------


def _locked(conn: Connection, provider: Provider) -> Provider:
    """The provider re-read under its row lock, so its generation cannot move under us."""
    lock_providers(conn, [provider.id])
    return providers.get_provider(conn, provider.uuid)


def _finish(conn: Connection, provider: Provider) -> int:
    gen = providers.bump_generation(conn, provider)
    changes.record(conn, CHANGE_KIND, [provider.uuid])
    return gen


def _class_ids(conn: Connection, names: list[str]) -> dict[str, int]:
    bad = sorted(n for n in names if not _RC_NAME.fullmatch(n))
    if bad:
        raise errors.BadRequest("Unknown resource class in inventory: "
                                f"{', '.join(map(repr, bad))}")
    try:
        return ids_by_name(conn, names, share_lock=True) if names else {}
    except errors.BadRequest as exc:
        raise errors.BadRequest(f"Unknown resource class in inventory: {exc.detail}") from None


def _refuse_in_use(conn: Connection, provider: Provider, rc_ids: Mapping[int, str]) -> None:
    """409 inventory.inuse if any of `rc_ids` has allocations on the provider."""
    if not rc_ids:
        return
    used = conn.execute(
        sa.select(allocations.c.resource_class_id).distinct()
        .where(allocations.c.resource_provider_id == provider.id,
               allocations.c.resource_class_id.in_(list(rc_ids)))
    ).scalars().all()
    if used:
        # By class id, as Placement lists them (standard classes in their standard order).
        names = ", ".join(rc_ids[i] for i in sorted(int(i) for i in used))
        raise errors.Conflict(
            f"Inventory for '{names}' on resource provider '{provider.uuid}' in use.",
            errors.INVENTORY_INUSE)


def _values(invent: Inventory) -> dict[str, object]:
    return {f: getattr(invent, f) for f in _FIELDS}


def _existing(conn: Connection, provider_id: int) -> dict[int, Inventory]:
    return {int(r._mapping["resource_class_id"]): _inventory(r) for r in _rows(conn, provider_id)}


def replace_inventories(conn: Connection, provider: Provider,
                        inventories: Mapping[str, Inventory], generation: int) -> int:
    """Make `inventories` the provider's whole inventory set; returns the new generation.

    Checks the provider generation (409 placement.concurrent_update), that every
    class exists (400) and that no class with allocations is removed (409
    placement.inventory.inuse). Bumps the generation and records a change.
    Lowering a total below what is already allocated is allowed, as in
    Placement: existing allocations stay, new ones will not fit.
    """
    current = _locked(conn, provider)
    providers.check_generation(current, generation)
    wanted = {name: replace(i, resource_class=name) for name, i in inventories.items()}
    for invent in wanted.values():
        check_inventory(current.uuid, invent)
    ids = _class_ids(conn, list(wanted))
    have = _existing(conn, current.id)
    want_by_id = {ids[name]: i for name, i in wanted.items()}
    removed = {rc_id: have[rc_id].resource_class for rc_id in have.keys() - want_by_id.keys()}
    _refuse_in_use(conn, current, removed)
    if removed:
        conn.execute(sa.delete(inv).where(inv.c.resource_provider_id == current.id,
                                          inv.c.resource_class_id.in_(list(removed))))
    now = utcnow()
    added = [{"resource_provider_id": current.id, "resource_class_id": rc_id,
              "created_at": now, "updated_at": now, **_values(i)}
             for rc_id, i in want_by_id.items() if rc_id not in have]
    if added:
        conn.execute(sa.insert(inv), added)
    for rc_id, i in want_by_id.items():
        if rc_id in have and have[rc_id] != i:
            _update_row(conn, current.id, rc_id, i, now)
    return _finish(conn, current)


def _update_row(conn: Connection, provider_id: int, rc_id: int, invent: Inventory,
                now: datetime) -> None:
    conn.execute(sa.update(inv)
                 .where(inv.c.resource_provider_id == provider_id,
                        inv.c.resource_class_id == rc_id)
                 .values(updated_at=now, **_values(invent)))


def add_inventory(conn: Connection, provider: Provider, invent: Inventory) -> int:
    """Add one class the provider has no inventory of yet (POST); returns the new generation.

    400 for an unknown class, 409 placement.concurrent_update if the provider
    already has inventory of it (as Placement answers a duplicate).
    """
    current = _locked(conn, provider)
    check_inventory(current.uuid, invent, action="create")
    rc_id = _class_ids(conn, [invent.resource_class])[invent.resource_class]
    if _rows(conn, current.id, rc_id=rc_id):
        raise errors.ConcurrentUpdate(
            f"Update conflict: resource provider {current.uuid} already has inventory of "
            f"class {invent.resource_class}")
    now = utcnow()
    conn.execute(sa.insert(inv).values(resource_provider_id=current.id, resource_class_id=rc_id,
                                       created_at=now, updated_at=now, **_values(invent)))
    return _finish(conn, current)


def _known_class_id(conn: Connection, resource_class: str) -> int:
    """Id of a class named in a URL; an unknown class is a 404 there (as in Placement)."""
    rc_id = None
    if _RC_NAME.fullmatch(resource_class):
        rc_id = conn.execute(sa.select(resource_classes.c.id)
                             .where(resource_classes.c.name == resource_class)).scalar()
    if rc_id is None:
        raise errors.NotFound(f"No such resource class {resource_class}.")
    return int(rc_id)


def update_inventory(conn: Connection, provider: Provider, invent: Inventory,
                     generation: int) -> int:
    """Change one class's existing inventory (PUT); returns the new generation.

    409 on a stale generation, 404 for an unknown class, 400 if the provider
    has no inventory of that class yet (POST or PUT the whole set to add one).
    """
    current = _locked(conn, provider)
    providers.check_generation(current, generation)
    check_inventory(current.uuid, invent)
    rc_id = _known_class_id(conn, invent.resource_class)
    if not _rows(conn, current.id, rc_id=rc_id):
        raise errors.BadRequest(
            f"No inventory record with resource class {invent.resource_class} for resource "
            f"provider {current.uuid}; create it with POST or PUT the whole set")
    _update_row(conn, current.id, rc_id, invent, utcnow())
    return _finish(conn, current)


def delete_inventory(conn: Connection, provider: Provider, resource_class: str) -> int:
    """Remove one class's inventory (DELETE); returns the new generation.

    404 for an unknown class or no such inventory; 409 placement.inventory.inuse
    when the class has allocations on the provider.
    """
    current = _locked(conn, provider)
    rc_id = _known_class_id(conn, resource_class)
    _refuse_in_use(conn, current, {rc_id: resource_class})
    res = conn.execute(sa.delete(inv).where(inv.c.resource_provider_id == current.id,
                                            inv.c.resource_class_id == rc_id))
    if res.rowcount == 0:
        raise errors.NotFound(f"No inventory of class {resource_class} found for delete")
    return _finish(conn, current)


def delete_all_inventories(conn: Connection, provider: Provider) -> int:
    """Remove every inventory of the provider (DELETE, no generation needed)."""
    current = _locked(conn, provider)
    return replace_inventories(conn, current, {}, current.generation)
