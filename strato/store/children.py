"""The children of this zone: name, URL, static metadata and the credential to call them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.store.schema import children, removed_children
from strato.store.util import bytewise, upsert_insert, utcnow


@dataclass(frozen=True, slots=True)
class Child:
    name: str
    url: str
    location_prefix: str | None
    tags: tuple[str, ...]
    credential: str | None
    identity_hash: str | None = None


def _child(r: sa.Row[tuple[object, ...]]) -> Child:
    m = r._mapping
    return Child(name=m["name"], url=m["url"], location_prefix=m["location_prefix"],
                 tags=tuple(json.loads(m["tags"] or "[]")), credential=m["credential"],
                 identity_hash=m["identity_hash"])


def list_children(conn: Connection) -> list[Child]:
    return [_child(r) for r in conn.execute(
        sa.select(children).order_by(bytewise(conn, children.c.name)))]


def find_child(conn: Connection, name: str) -> Child | None:
    r = conn.execute(sa.select(children).where(children.c.name == name)).first()
    return None if r is None else _child(r)


def get_child(conn: Connection, name: str) -> Child:
    r = conn.execute(sa.select(children).where(children.c.name == name)).first()
    if r is None:
        raise errors.NotFound(f"No child zone named {name!r}")
    return _child(r)


def upsert_child(conn: Connection, name: str, url: str, location_prefix: str | None,
                 tags: Iterable[str], credential: str | None,
                 identity_hash: str | None = None) -> tuple[Child, bool]:
    """Create or update a child; returns (child, created). A known identity is
    kept when the update brings none."""
    existed = conn.execute(sa.select(children.c.name).where(children.c.name == name)
                           ).first() is not None
    now = utcnow()
    row = {"name": name, "url": url, "location_prefix": location_prefix,
           "tags": json.dumps(sorted(set(tags))), "credential": credential,
           "updated_at": now}
    if identity_hash is not None:
        row["identity_hash"] = identity_hash
    conn.execute(sa.delete(removed_children).where(removed_children.c.name == name))
    stmt = upsert_insert(conn, children).values(**row, created_at=now)
    conn.execute(stmt.on_conflict_do_update(
        index_elements=[children.c.name],
        set_={k: stmt.excluded[k] for k in row if k != "name"}))
    return get_child(conn, name), not existed


@dataclass(frozen=True, slots=True)
class Removed:
    """A child an operator removed: when, and which zone it was."""

    at: datetime
    identity_hash: str | None
    url: str | None


def delete_child(conn: Connection, name: str) -> None:
    """Remove a child, and remember that an operator did, and which zone."""
    # None is named with a NUL (PostgreSQL refuses the query).
    known = None if "\x00" in name else find_child(conn, name)
    if known is None or conn.execute(
            sa.delete(children).where(children.c.name == name)).rowcount == 0:
        raise errors.NotFound(f"No child zone named {name!r}")
    row = {"removed_at": utcnow(), "identity_hash": known.identity_hash, "url": known.url}
    stmt = upsert_insert(conn, removed_children).values(name=name, **row)
    conn.execute(stmt.on_conflict_do_update(index_elements=[removed_children.c.name],
                                            set_={k: stmt.excluded[k] for k in row}))


def removed(conn: Connection, name: str) -> Removed | None:
    """The child `name` as an operator removed it (None: not removed since a
    zone last registered the name)."""
    r = conn.execute(sa.select(removed_children).where(removed_children.c.name == name)
                     ).first()
    if r is None:
        return None
    m = r._mapping
    return Removed(m["removed_at"], m["identity_hash"], m["url"])
