"""Server groups: which consumers belong together, and where they are now."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.raw import Raw
from strato.store.util import utcnow


def add_members(conn: Connection, group: str, consumer_uuids: Iterable[str]) -> None:
    raw = Raw(conn)
    try:
        now = raw.stamp(utcnow())
        raw.many("INSERT INTO strato_group_members (group_name, consumer_uuid, created_at) "
                 "VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                 [(group, c, now) for c in consumer_uuids])
    finally:
        raw.close()


# Asked on every request with a spread rule, twice: on the DBAPI cursor.
_MEMBER_ROOTS = (
    "SELECT DISTINCT m.consumer_uuid, root.uuid FROM strato_group_members m "
    "JOIN allocations a ON a.consumer_id = m.consumer_uuid "
    "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
    "JOIN resource_providers root ON root.id = rp.root_provider_id "
    "WHERE m.group_name = ?")


def member_roots(conn: Connection, group: str) -> dict[str, set[str]]:
    """consumer uuid -> root provider uuids its live allocations are on.

    Members without allocations are left out: they are nowhere.
    """
    raw = Raw(conn)
    try:
        rows = raw.all(_MEMBER_ROOTS, (group,))
    finally:
        raw.close()
    out: dict[str, set[str]] = {}
    for consumer, root_uuid in rows:
        out.setdefault(consumer, set()).add(root_uuid)
    return out


def lock_groups(conn: Connection, names: Iterable[str]) -> None:
    """Serialise writers that place members of the same groups (PostgreSQL).

    Spread rules are re-checked inside the claim's transaction; holding the
    group's lock from that check to commit makes the check the truth. On
    SQLite the write transaction already holds the database lock.
    """
    if conn.dialect.name != "postgresql":
        return
    for name in sorted(set(names)):
        key = zlib.crc32(f"strato-group:{name}".encode())
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
