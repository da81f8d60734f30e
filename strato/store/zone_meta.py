"""Facts about this zone itself, kept in its own database."""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.schema import zone_meta
from strato.store.util import insert_ignore, upsert_insert

IDENTITY = "identity"


def identity(conn: Connection) -> str:
    """This zone's secret identity, made once: it proves to a parent that a
    re-registration comes from the same zone (after a restart, a new URL)."""
    insert_ignore(conn, zone_meta, [{"key": IDENTITY, "value": secrets.token_urlsafe(32)}])
    return str(conn.execute(sa.select(zone_meta.c.value)
                            .where(zone_meta.c.key == IDENTITY)).scalar_one())


def get(conn: Connection, key: str) -> str | None:
    value = conn.execute(sa.select(zone_meta.c.value).where(zone_meta.c.key == key)).scalar()
    return None if value is None else str(value)


def put(conn: Connection, key: str, value: str | None) -> None:
    """Set `key` (None: remove it). One upsert: two workers of a zone on
    PostgreSQL starting at once both set their heartbeat, and a delete then
    an insert made one of them fail on the key (its start-up aborted)."""
    if value is None:
        conn.execute(sa.delete(zone_meta).where(zone_meta.c.key == key))
        return
    conn.execute(upsert_insert(conn, zone_meta).values(key=key, value=value)
                 .on_conflict_do_update(index_elements=[zone_meta.c.key],
                                        set_={"value": value}))
