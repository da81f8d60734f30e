"""Resource classes: standard ones (synced at start-up) and CUSTOM_* ones."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.model import names as model_names
from strato.store import changes
from strato.store.schema import (
    CUSTOM_RC_MIN_ID,
    allocations,
    inventories,
    resource_classes,
    resource_providers,
)
from strato.store.util import utcnow

rc_t = resource_classes

# Key of the PostgreSQL advisory lock that serialises custom class creation and
# renames: the id column has no sequence, so "max + 1" must not run twice at once.
_CUSTOM_RC_LOCK_KEY = 0x5354524143  # "STRAC"


@dataclass(frozen=True, slots=True)
class ResourceClass:
    id: int
    name: str
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def last_modified(self) -> datetime | None:
        return self.updated_at or self.created_at


def ids_by_name(conn: Connection, names: Iterable[str], *, share_lock: bool = False
                ) -> dict[str, int]:
    """Map class names to ids; an unknown name is a 400 that names it.

    `share_lock` (a write that is about to reference the classes) holds them
    FOR SHARE on PostgreSQL, so a concurrent delete_class waits for it and then
    sees the new use instead of deleting a class that is being referenced.
    """
    wanted = set(names)
    if not wanted:
        return {}
    # Standard classes can be neither renamed nor deleted: their ids are
    # remembered per database (the claim path asks on every write).
    known = _STANDARD_IDS.setdefault(conn.engine, {})
    if not share_lock and wanted <= known.keys():
        return {n: known[n] for n in wanted}
    q = sa.select(rc_t.c.name, rc_t.c.id).where(rc_t.c.name.in_(wanted))
    if share_lock and conn.dialect.name == "postgresql":
        q = q.with_for_update(read=True)
    found = {r[0]: int(r[1]) for r in conn.execute(q).all()}
    missing = sorted(wanted - found.keys())
    if missing:
        raise errors.BadRequest(f"No such resource class {', '.join(missing)}")
    known.update({n: i for n, i in found.items() if i < CUSTOM_RC_MIN_ID})
    return found


_STANDARD_IDS: weakref.WeakKeyDictionary[sa.Engine, dict[str, int]] = (
    weakref.WeakKeyDictionary())


def names_by_id(conn: Connection) -> dict[int, str]:
    return {int(r[0]): r[1] for r in conn.execute(
        sa.select(resource_classes.c.id, resource_classes.c.name))}


def _row(r: sa.Row[tuple[object, ...]]) -> ResourceClass:
    m = r._mapping
    return ResourceClass(id=int(m["id"]), name=m["name"], created_at=m["created_at"],
                         updated_at=m["updated_at"])


def list_classes(conn: Connection) -> list[ResourceClass]:
    """Every class, standard ones first (in os-resource-classes order), then custom."""
    return [_row(r) for r in conn.execute(sa.select(rc_t).order_by(rc_t.c.id))]


def get_class_or_none(conn: Connection, name: str, *, for_update: bool = False
                      ) -> ResourceClass | None:
    if "\x00" in name:
        return None  # none is named so (PostgreSQL refuses the query)
    q = sa.select(rc_t).where(rc_t.c.name == name)
    if for_update and conn.dialect.name == "postgresql":
        q = q.with_for_update()
    r = conn.execute(q).first()
    return _row(r) if r is not None else None


def get_class(conn: Connection, name: str, *, for_update: bool = False) -> ResourceClass:
    rc = get_class_or_none(conn, name, for_update=for_update)
    if rc is None:
        raise errors.NotFound(f"No such resource class {name}.")
    return rc


def _check_custom(name: str) -> None:
    if not model_names.is_custom_name(name):
        raise errors.BadRequest(
            f"Invalid resource class name {name!r}: a custom resource class is CUSTOM_ "
            f"followed by A-Z, 0-9 and _, at most {model_names.MAX_NAME_LENGTH} characters")


def _lock_custom_names(conn: Connection) -> None:
    """Serialise custom class id allocation and renames (SQLite writers already are)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_CUSTOM_RC_LOCK_KEY)))


def _next_custom_id(conn: Connection) -> int:
    top = conn.execute(sa.select(sa.func.max(rc_t.c.id))
                       .where(rc_t.c.id >= CUSTOM_RC_MIN_ID)).scalar()
    return CUSTOM_RC_MIN_ID if top is None else int(top) + 1


def create_class(conn: Connection, name: str) -> ResourceClass:
    """Create a custom class; 409 if the name exists."""
    created = ensure_class(conn, name)
    if not created[1]:
        raise errors.Conflict(f"Conflicting resource class already exists: {name}")
    return created[0]


def ensure_class(conn: Connection, name: str) -> tuple[ResourceClass, bool]:
    """The custom class `name`, created if missing; the flag says whether it was."""
    _check_custom(name)
    existing = get_class_or_none(conn, name)
    if existing is None:
        # Verifying needs no lock; creating does, then looks again.
        _lock_custom_names(conn)
        existing = get_class_or_none(conn, name)
    if existing is not None:
        return existing, False
    now = utcnow()
    conn.execute(sa.insert(rc_t).values(id=_next_custom_id(conn), name=name,
                                        created_at=now, updated_at=now))
    return get_class(conn, name), True


def rename_class(conn: Connection, name: str, new_name: str) -> ResourceClass:
    """Rename a custom class (microversions 1.2 to 1.6); ids, hence uses, stay."""
    _check_custom(new_name)
    _lock_custom_names(conn)
    rc = get_class(conn, name, for_update=True)
    if model_names.is_standard_resource_class(name) or rc.id < CUSTOM_RC_MIN_ID:
        raise errors.BadRequest(f"Cannot update standard resource class {name}")
    if new_name == name:
        return rc
    if get_class_or_none(conn, new_name) is not None:
        raise errors.Conflict(f"Resource class already exists: {new_name}")
    conn.execute(sa.update(rc_t).where(rc_t.c.id == rc.id)
                 .values(name=new_name, updated_at=utcnow()))
    # Providers that index this class by name must learn the new one.
    changes.record(conn, "resource_class", _providers_using(conn, rc.id))
    return get_class(conn, new_name)


def _providers_using(conn: Connection, rc_id: int) -> list[str]:
    rp = resource_providers
    used_by = sa.union(
        sa.select(inventories.c.resource_provider_id.label("pid"))
        .where(inventories.c.resource_class_id == rc_id),
        sa.select(allocations.c.resource_provider_id.label("pid"))
        .where(allocations.c.resource_class_id == rc_id),
    ).subquery()
    return list(conn.execute(
        sa.select(rp.c.uuid).where(rp.c.id.in_(sa.select(used_by.c.pid)))).scalars())


def delete_class(conn: Connection, name: str) -> None:
    """Delete a custom class that no inventory (or allocation) uses."""
    rc = get_class(conn, name, for_update=True)
    if model_names.is_standard_resource_class(name) or rc.id < CUSTOM_RC_MIN_ID:
        raise errors.BadRequest(
            f"Error in delete resource class: Cannot delete standard resource class {name}.")
    if _providers_using(conn, rc.id):
        raise errors.Conflict(
            f"Error in delete resource class: Cannot delete resource class {name}. "
            "Class is in use in inventory.")
    conn.execute(sa.delete(rc_t).where(rc_t.c.id == rc.id))
