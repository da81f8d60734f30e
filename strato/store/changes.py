"""The change log: how every process of a zone learns about committed writes."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.schema import change_counter, changes
from strato.store.util import utcnow

_NEXT = (sa.update(change_counter).where(change_counter.c.id == 1)
         .values(seq=change_counter.c.seq + 1).returning(change_counter.c.seq))
_APPEND = sa.insert(changes)


def record(conn: Connection, kind: str, provider_uuids: Iterable[str | None]) -> int:
    """Append a change touching `provider_uuids`; returns its sequence number.

    Called last in a write transaction so the counter row is held briefly.
    """
    seq = conn.execute(_NEXT).scalar_one()
    now = utcnow()
    rows = [{"seq": seq, "resource_provider_uuid": u, "kind": kind, "created_at": now}
            for u in sorted({u for u in provider_uuids if u is not None})]
    if not rows:
        rows = [{"seq": seq, "resource_provider_uuid": None, "kind": kind, "created_at": now}]
    conn.execute(_APPEND, rows)
    return int(seq)


def current_seq(conn: Connection) -> int:
    return int(conn.execute(sa.select(change_counter.c.seq).where(change_counter.c.id == 1))
               .scalar_one())


def since(conn: Connection, seq: int) -> list[tuple[int, str | None, str]]:
    """Changes after `seq`, oldest first: (seq, provider uuid, kind)."""
    rows = conn.execute(
        sa.select(changes.c.seq, changes.c.resource_provider_uuid, changes.c.kind)
        .where(changes.c.seq > seq)
        .order_by(changes.c.seq)
    ).all()
    return [(int(r[0]), r[1], r[2]) for r in rows]
