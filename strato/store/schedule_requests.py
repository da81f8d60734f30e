"""Idempotency: the first answer to a schedule request, kept by request_id.

A request id is reserved at the start of the claiming transaction and its
answer written before commit, so two concurrent requests with one id cannot
both claim: the second finds the reservation (on PostgreSQL it waits for the
first to commit) and returns the first's answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from strato.store.schema import schedule_requests
from strato.store.util import utcnow

_PENDING = 0


def get_answer(conn: Connection, request_id: str) -> tuple[int, dict[str, Any]] | None:
    """(status, body) of a finished request, None if unknown or still pending."""
    row = conn.execute(
        sa.select(schedule_requests.c.status, schedule_requests.c.response)
        .where(schedule_requests.c.request_id == request_id)).first()
    if row is None or int(row[0]) == _PENDING:
        return None
    return int(row[0]), orjson.loads(row[1])


def reserve(conn: Connection, request_id: str) -> bool:
    """Claim `request_id` for this transaction; False if another one has it.

    One statement: an insert that does nothing on a conflict (on PostgreSQL it
    waits for a concurrent transaction holding the same id to end).
    """
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    res = conn.execute(
        dialect.insert(schedule_requests).on_conflict_do_nothing()
        .returning(schedule_requests.c.request_id),
        {"request_id": request_id, "status": _PENDING, "response": "{}",
         "created_at": utcnow()})
    return res.first() is not None


def finish(conn: Connection, request_id: str, status: int, body: dict[str, Any]) -> None:
    conn.execute(sa.update(schedule_requests)
                 .where(schedule_requests.c.request_id == request_id)
                 .values(status=status, response=orjson.dumps(body).decode()))


CANCELLED = 410


def purge(conn: Connection, before: datetime, limit: int = 10_000) -> int:
    """Forget up to `limit` answers created before `before`; how many went."""
    old = (sa.select(schedule_requests.c.request_id)
           .where(schedule_requests.c.created_at < before).limit(limit))
    res = conn.execute(sa.delete(schedule_requests)
                       .where(schedule_requests.c.request_id.in_(old.scalar_subquery())))
    return max(0, int(res.rowcount or 0))


def cancel(conn: Connection, request_id: str) -> dict[str, Any] | None:
    """Mark `request_id` cancelled (idempotent). Returns the answer it had if it
    had placed something (status 200), for the caller to undo; None otherwise.

    A request that never arrived leaves a tombstone: if it arrives later, it
    is refused rather than placed.
    """
    body = {"detail": "request cancelled by the parent zone, which lost its answer "
                      "(timeout or broken connection) and placed it elsewhere"}
    if reserve(conn, request_id):
        finish(conn, request_id, CANCELLED, body)
        return None
    found = get_answer(conn, request_id)
    if found is None or found[0] == CANCELLED:
        return None
    status, answer = found
    finish(conn, request_id, CANCELLED, {**body, "cancelled_status": status})
    return answer if status == 200 else None
