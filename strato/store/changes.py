"""The change log: how every process of a zone learns about committed writes."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.raw import Raw
from strato.store.schema import change_counter
from strato.store.util import utcnow


def record(conn: Connection, kind: str, provider_uuids: Iterable[str | None]) -> int:
    """Append a change touching `provider_uuids`; returns its sequence number.

    Called last in a write transaction so the counter row is held briefly.
    """
    # On the DBAPI cursor: every write ends here, so it is kept cheap.
    raw = Raw(conn)
    try:
        got = raw.first("UPDATE strato_change_counter SET seq = seq + 1 WHERE id = 1 "
                        "RETURNING seq")
        assert got is not None, "the change counter row is missing"
        seq = int(got[0])
        now = raw.stamp(utcnow())
        uuids = sorted({u for u in provider_uuids if u is not None})
        rows: list[tuple[object, ...]] = [(seq, u, kind, now) for u in uuids]
        rows = rows or [(seq, None, kind, now)]
        raw.many("INSERT INTO strato_changes (seq, resource_provider_uuid, kind, created_at) "
                 "VALUES (?, ?, ?, ?)", rows)
    finally:
        raw.close()
    return seq


def current_seq(conn: Connection) -> int:
    return int(conn.execute(sa.select(change_counter.c.seq).where(change_counter.c.id == 1))
               .scalar_one())


def since(conn: Connection, seq: int) -> list[tuple[int, str | None, str]]:
    """Changes after `seq`, oldest first: (seq, provider uuid, kind)."""
    raw = Raw(conn)
    try:
        rows = raw.all("SELECT seq, resource_provider_uuid, kind FROM strato_changes "
                       "WHERE seq > ? ORDER BY seq", (seq,))
    finally:
        raw.close()
    return [(int(r[0]), r[1], r[2]) for r in rows]
