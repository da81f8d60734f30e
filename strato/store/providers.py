"""Resource providers: create, read, update (name, parent), delete, list with filters."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.store import changes
from strato.store.db import lock_providers
from strato.store.schema import (
    allocations,
    inventories,
    placement_aggregates,
    resource_classes,
    resource_provider_aggregates,
    resource_provider_traits,
    resource_providers,
    traits,
)
from strato.store.util import utcnow

rp = resource_providers
parent_t = rp.alias("parent")
root_t = rp.alias("root")


@dataclass(frozen=True, slots=True)
class Provider:
    id: int
    uuid: str
    name: str
    generation: int
    parent_provider_uuid: str | None
    root_provider_uuid: str
    created_at: datetime | None
    updated_at: datetime | None


def _select() -> sa.Select[tuple[object, ...]]:
    return (
        sa.select(
            rp.c.id, rp.c.uuid, rp.c.name, rp.c.generation,
            parent_t.c.uuid.label("parent_uuid"), root_t.c.uuid.label("root_uuid"),
            rp.c.created_at, rp.c.updated_at,
        )
        .select_from(
            rp.outerjoin(parent_t, rp.c.parent_provider_id == parent_t.c.id)
            .outerjoin(root_t, rp.c.root_provider_id == root_t.c.id)
        )
    )


def _row(r: sa.Row[tuple[object, ...]]) -> Provider:
    m = r._mapping
    return Provider(
        id=m["id"], uuid=m["uuid"], name=m["name"], generation=m["generation"],
        parent_provider_uuid=m["parent_uuid"], root_provider_uuid=m["root_uuid"] or m["uuid"],
        created_at=m["created_at"], updated_at=m["updated_at"],
    )


def _uuid_like(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except (ValueError, TypeError):
        return False
    return len(value) <= 36


def get_provider_or_none(conn: Connection, uuid: str) -> Provider | None:
    # Not a uuid (a NUL byte, say): no such provider, and no query PostgreSQL refuses.
    if not _uuid_like(uuid):
        return None
    r = conn.execute(_select().where(rp.c.uuid == uuid)).first()
    return _row(r) if r is not None else None


def get_provider(conn: Connection, uuid: str) -> Provider:
    p = get_provider_or_none(conn, uuid)
    if p is None:
        raise errors.NotFound(f"No resource provider with uuid {uuid} found")
    return p


def providers_by_uuid(conn: Connection, uuids: Sequence[str]) -> dict[str, Provider]:
    if not uuids:
        return {}
    rows = conn.execute(_select().where(rp.c.uuid.in_(list(set(uuids))))).all()
    return {p.uuid: p for p in map(_row, rows)}


def bump_generation(conn: Connection, provider: Provider, expected: int | None = None) -> int:
    """Increment a provider's generation, checking it is still `expected`.

    `expected` defaults to the generation the caller read. A concurrent writer
    that got there first makes this raise ConcurrentUpdate (HTTP 409).
    """
    gen = provider.generation if expected is None else expected
    res = conn.execute(
        sa.update(rp)
        .where(rp.c.id == provider.id, rp.c.generation == gen)
        .values(generation=gen + 1, updated_at=utcnow())
    )
    if res.rowcount != 1:
        raise errors.ConcurrentUpdate(
            f"resource provider generation conflict: {provider.uuid} is no longer at "
            f"generation {gen}; read it again and retry"
        )
    return gen + 1


def check_generation(provider: Provider, expected: int) -> None:
    if provider.generation != expected:
        raise errors.ConcurrentUpdate(
            f"resource provider generation conflict for provider {provider.uuid}: "
            f"actual: {provider.generation}, given: {expected}"
        )


def name_taken(conn: Connection, name: str) -> bool:
    """Whether a provider here has this name."""
    return _name_taken(conn, name)


def _name_taken(conn: Connection, name: str, except_id: int | None = None) -> bool:
    q = sa.select(rp.c.id).where(rp.c.name == name)
    if except_id is not None:
        q = q.where(rp.c.id != except_id)
    return conn.execute(q).first() is not None


def _refuse_duplicate(conn: Connection, uuid: str, name: str,
                      except_id: int | None = None) -> None:
    """409 if another provider has this uuid (when creating) or name."""
    if except_id is None and conn.execute(
            sa.select(rp.c.id).where(rp.c.uuid == uuid)).first() is not None:
        raise errors.Conflict(f"Conflicting resource provider uuid: {uuid} already exists.",
                              errors.DUPLICATE_NAME)
    if _name_taken(conn, name, except_id=except_id):
        raise errors.Conflict(f"Conflicting resource provider name: {name} already exists.",
                              errors.DUPLICATE_NAME)


def _unique_write(conn: Connection, stmt: sa.Executable, uuid: str, name: str,
                  except_id: int | None = None) -> list[sa.Row[Any]]:
    """Run an insert or update of a provider's uuid and name; its rows.

    The duplicate checks before it take no lock: on PostgreSQL a concurrent
    write of the same uuid or name may commit in between, and the unique
    index refuses this one. That is the checks' 409, not a 500. (On SQLite
    writers are one at a time.)"""
    def run() -> list[sa.Row[Any]]:
        result = conn.execute(stmt)
        return list(result.all()) if result.returns_rows else []

    if conn.dialect.name == "sqlite":
        return run()
    try:
        with conn.begin_nested():
            return run()
    except sa.exc.IntegrityError:
        _refuse_duplicate(conn, uuid, name, except_id)
        raise


def _parent_locked(conn: Connection, parent_uuid: str) -> Provider | None:
    """The provider a write makes a parent, locked (PostgreSQL) as DELETE locks
    it: a delete waits for this write and then sees the child, or went first
    and the parent is None here, not a foreign key's 500 at the insert."""
    parent = get_provider_or_none(conn, parent_uuid)
    if parent is None or conn.dialect.name == "sqlite":
        return parent
    lock_providers(conn, [parent.id])
    return get_provider_or_none(conn, parent_uuid)


def create_provider(
    conn: Connection, *, name: str, uuid: str | None = None, parent_uuid: str | None = None
) -> Provider:
    uuid = uuid or str(uuidlib.uuid4())
    _refuse_duplicate(conn, uuid, name)
    parent_id = root_id = None
    if parent_uuid is not None:
        if parent_uuid == uuid:
            raise errors.BadRequest(
                f"Unable to create resource provider \"{name}\", {uuid}: "
                "parent provider UUID cannot be same as UUID. Please modify request.")
        parent = _parent_locked(conn, parent_uuid)
        if parent is None:
            raise errors.BadRequest(
                f"Unable to create resource provider \"{name}\", {uuid}: "
                f"parent provider UUID does not exist ({parent_uuid})")
        parent_id = parent.id
        root_id = conn.execute(sa.select(rp.c.root_provider_id).where(rp.c.id == parent.id)
                               ).scalar_one()
    now = utcnow()
    insert = (sa.insert(rp).values(uuid=uuid, name=name, generation=0,
                                   parent_provider_id=parent_id, root_provider_id=root_id,
                                   created_at=now, updated_at=now).returning(rp.c.id))
    new_id = _unique_write(conn, insert, uuid, name)[0][0]
    if root_id is None:
        conn.execute(sa.update(rp).where(rp.c.id == new_id).values(root_provider_id=new_id))
    changes.record(conn, "provider", [uuid])
    return get_provider(conn, uuid)


def _descendant_ids(conn: Connection, provider_id: int) -> list[int]:
    """Ids of every provider below `provider_id` (not including it)."""
    found: list[int] = []
    frontier = [provider_id]
    while frontier:
        kids = list(conn.execute(
            sa.select(rp.c.id).where(rp.c.parent_provider_id.in_(frontier))).scalars())
        found.extend(kids)
        frontier = kids
    return found


def update_provider(
    conn: Connection, uuid: str, *, name: str, parent_uuid: str | None,
    allow_reparent: bool,
) -> Provider:
    """Rename and/or (re)parent a provider. As in Placement, the generation
    stays: it counts changes of inventories, traits, aggregates and allocations.

    Before microversion 1.37 a parent may only be set where there was none;
    from 1.37 (`allow_reparent`) a provider may move anywhere that does not
    make a loop, or become a root.
    """
    p = get_provider(conn, uuid)
    if _name_taken(conn, name, except_id=p.id):
        raise errors.Conflict(f"Conflicting resource provider name: {name} already exists.",
                              errors.DUPLICATE_NAME)
    values: dict[str, object] = {"name": name, "updated_at": utcnow()}
    subtree: list[int] = []
    if parent_uuid != p.parent_provider_uuid:
        if not allow_reparent and p.parent_provider_uuid is not None:
            if parent_uuid is None:
                raise errors.BadRequest(
                    "un-parenting a provider is not currently allowed (it is from "
                    "microversion 1.37)")
            raise errors.BadRequest(
                "re-parenting a provider is not currently allowed (it is from "
                "microversion 1.37)")
        subtree = _descendant_ids(conn, p.id)
        if parent_uuid is None:
            values.update(parent_provider_id=None, root_provider_id=p.id)
        else:
            parent = _parent_locked(conn, parent_uuid)
            if parent is None:
                raise errors.BadRequest(
                    f"parent provider UUID does not exist ({parent_uuid})")
            if parent.id == p.id or parent.id in subtree:
                raise errors.BadRequest("creating loop in the provider tree is not allowed.")
            new_root = conn.execute(
                sa.select(rp.c.root_provider_id).where(rp.c.id == parent.id)).scalar_one()
            values.update(parent_provider_id=parent.id, root_provider_id=new_root)
    _unique_write(conn, sa.update(rp).where(rp.c.id == p.id).values(**values), uuid, name,
                  except_id=p.id)
    if "root_provider_id" in values and subtree:
        conn.execute(sa.update(rp).where(rp.c.id.in_(subtree))
                     .values(root_provider_id=values["root_provider_id"]))
    touched = [uuid]
    if subtree:
        touched += list(conn.execute(sa.select(rp.c.uuid).where(rp.c.id.in_(subtree))).scalars())
    changes.record(conn, "provider", touched)
    return get_provider(conn, uuid)


def delete_provider(conn: Connection, uuid: str) -> None:
    p = get_provider_or_none(conn, uuid)
    if p is None:
        raise errors.NotFound(f"No resource provider with uuid {uuid} found for delete")
    # Claims lock the providers they allocate on (PostgreSQL): with this lock
    # held, one that got there first is seen below, and one after finds the
    # provider gone (a 400), not a foreign key's 500.
    lock_providers(conn, [p.id])
    if conn.execute(sa.select(allocations.c.id)
                    .where(allocations.c.resource_provider_id == p.id).limit(1)).first():
        raise errors.Conflict(
            f"Unable to delete resource provider {uuid}: Resource provider has allocations.",
            errors.PROVIDER_IN_USE)
    if conn.execute(sa.select(rp.c.id).where(rp.c.parent_provider_id == p.id).limit(1)).first():
        raise errors.Conflict(
            f"Unable to delete parent resource provider {uuid}: It has child resource "
            "providers.", errors.PROVIDER_CANNOT_DELETE_PARENT)
    conn.execute(sa.delete(inventories).where(inventories.c.resource_provider_id == p.id))
    conn.execute(sa.delete(resource_provider_traits)
                 .where(resource_provider_traits.c.resource_provider_id == p.id))
    conn.execute(sa.delete(resource_provider_aggregates)
                 .where(resource_provider_aggregates.c.resource_provider_id == p.id))
    conn.execute(sa.delete(rp).where(rp.c.id == p.id))
    changes.record(conn, "provider_deleted", [uuid])


@dataclass(frozen=True, slots=True)
class ProviderFilters:
    """Filters of GET /resource_providers, already parsed and validated."""

    name: str | None = None
    uuid: str | None = None
    in_tree: str | None = None
    # Each inner list is an any-of set of aggregate uuids; all sets must match.
    member_of: tuple[tuple[str, ...], ...] = ()
    # Each inner list: the provider must have none of these aggregates.
    forbidden_member_of: tuple[str, ...] = ()
    # Each inner tuple is an any-of set of trait names; all sets must match.
    required_traits: tuple[tuple[str, ...], ...] = ()
    forbidden_traits: tuple[str, ...] = ()
    resources: tuple[tuple[str, int], ...] = ()


def list_providers(conn: Connection, f: ProviderFilters) -> list[Provider]:
    q = _select()
    if f.name is not None:
        q = q.where(rp.c.name == f.name)
    if f.uuid is not None:
        q = q.where(rp.c.uuid == f.uuid)
    if f.in_tree is not None:
        root = conn.execute(sa.select(rp.c.root_provider_id).where(rp.c.uuid == f.in_tree)
                            ).scalar()
        if root is None:
            return []
        q = q.where(rp.c.root_provider_id == root)
    rpa, agg = resource_provider_aggregates, placement_aggregates
    for anyof in f.member_of:
        q = q.where(rp.c.id.in_(
            sa.select(rpa.c.resource_provider_id).join(agg, agg.c.id == rpa.c.aggregate_id)
            .where(agg.c.uuid.in_(anyof))))
    if f.forbidden_member_of:
        q = q.where(rp.c.id.not_in(
            sa.select(rpa.c.resource_provider_id).join(agg, agg.c.id == rpa.c.aggregate_id)
            .where(agg.c.uuid.in_(f.forbidden_member_of))))
    rpt = resource_provider_traits
    for anyof_t in f.required_traits:
        q = q.where(rp.c.id.in_(
            sa.select(rpt.c.resource_provider_id).join(traits, traits.c.id == rpt.c.trait_id)
            .where(traits.c.name.in_(anyof_t))))
    if f.forbidden_traits:
        q = q.where(rp.c.id.not_in(
            sa.select(rpt.c.resource_provider_id).join(traits, traits.c.id == rpt.c.trait_id)
            .where(traits.c.name.in_(f.forbidden_traits))))
    for rc_name, amount in f.resources:
        q = q.where(rp.c.id.in_(_providers_with_capacity(rc_name, amount)))
    q = q.order_by(rp.c.id)
    return [_row(r) for r in conn.execute(q)]


def _providers_with_capacity(rc_name: str, amount: int) -> sa.Select[tuple[int]]:
    """Providers whose inventory of `rc_name` could take one more `amount`."""
    inv, alloc = inventories, allocations
    rc_id = sa.select(resource_classes.c.id).where(resource_classes.c.name == rc_name)
    used_sub = (
        sa.select(alloc.c.resource_provider_id, sa.func.sum(alloc.c.used).label("used"))
        .where(alloc.c.resource_class_id == rc_id.scalar_subquery())
        .group_by(alloc.c.resource_provider_id)
        .subquery()
    )
    cap = (inv.c.total - inv.c.reserved) * inv.c.allocation_ratio
    # The amount may be past an INTEGER (up to 2**63-1): bound as a BIGINT,
    # which PostgreSQL would otherwise cast to the column's INTEGER and refuse,
    # and never added to the usage (a BIGINT overflow there): the free capacity
    # (a float) is compared with it instead.
    want = sa.literal(amount, sa.BigInteger())
    return (
        sa.select(inv.c.resource_provider_id)
        .select_from(inv.outerjoin(used_sub,
                                   used_sub.c.resource_provider_id == inv.c.resource_provider_id))
        .where(
            inv.c.resource_class_id == rc_id.scalar_subquery(),
            cap - sa.func.coalesce(used_sub.c.used, 0) >= want,
            inv.c.min_unit <= want,
            inv.c.max_unit >= want,
            want % inv.c.step_size == 0,
        )
    )
