"""Server groups: which consumers belong together, and where they are now."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.schema import allocations, group_members, resource_providers
from strato.store.util import insert_ignore, utcnow


def add_members(conn: Connection, group: str, consumer_uuids: Iterable[str]) -> None:
    now = utcnow()
    insert_ignore(conn, group_members, [
        {"group_name": group, "consumer_uuid": c, "created_at": now} for c in consumer_uuids])


_rp, _root = resource_providers, resource_providers.alias("root")
# Built once: asked on every request with a spread rule, twice.
_MEMBER_ROOTS = (
    sa.select(group_members.c.consumer_uuid, _root.c.uuid)
    .select_from(
        group_members
        .join(allocations, allocations.c.consumer_id == group_members.c.consumer_uuid)
        .join(_rp, _rp.c.id == allocations.c.resource_provider_id)
        .join(_root, _root.c.id == _rp.c.root_provider_id))
    .where(group_members.c.group_name == sa.bindparam("group"))
    .distinct())


def member_roots(conn: Connection, group: str) -> dict[str, set[str]]:
    """consumer uuid -> root provider uuids its live allocations are on.

    Members without allocations are left out: they are nowhere.
    """
    rows = conn.execute(_MEMBER_ROOTS, {"group": group}).all()
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
