"""Requests a child zone may have acted on without this zone learning the answer.

A parent that times out on a child, or loses the connection after sending a
claiming request, cannot tell whether the child committed. It goes on
elsewhere (a dead child must not stop scheduling) and records the request
here first, so that a claim the child did commit is cancelled, by request
id, when the child answers again: a consumer is never left placed twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store import ledger
from strato.store.schema import in_doubt, request_parts
from strato.store.util import insert_ignore, utcnow


@dataclass(frozen=True, slots=True)
class InDoubt:
    id: int
    child: str
    request_id: str
    consumers: tuple[str, ...]
    reason: str
    attempts: int
    last_error: str | None


def add(conn: Connection, child: str, request_id: str, consumers: Sequence[str],
        reason: str) -> bool:
    """Record one request in doubt (idempotent per child and request id);
    False if it already was."""
    found = conn.execute(sa.select(in_doubt.c.id).where(
        in_doubt.c.child == child, in_doubt.c.request_id == request_id)).first()
    if found is not None:
        return False
    insert_ignore(conn, in_doubt, [{
        "child": child, "request_id": request_id,
        "consumers": orjson.dumps(list(consumers)).decode(), "reason": reason[:1000],
        "attempts": 0, "created_at": utcnow()}])
    return True


def pending(conn: Connection, child: str | None = None, limit: int = 500) -> list[InDoubt]:
    """The oldest requests in doubt (at `child`), at most `limit` a round."""
    q = sa.select(in_doubt).order_by(in_doubt.c.id).limit(limit)
    if child is not None:
        q = q.where(in_doubt.c.child == child)
    return [_row(r) for r in conn.execute(q)]


# Above this many consumers a request's consumers are matched in Python over
# every row of the children asked about, not by one LIKE each in SQL.
MAX_LIKE = 32


def earlier_tries(conn: Connection, request_id: str, consumers: Sequence[str] = (),
                  children: Sequence[str] | None = None) -> list[InDoubt]:
    """The parts in doubt (at `children`, if given) that an earlier try of a
    request may have left: those recorded under `request_id` (by any try of
    it at this zone), and those that hold one of `consumers` (a try that
    reached this zone under another id: a parent's retry of one request comes
    with a new part id, and so does each of its zone's parts below). Read on
    a request's path only where something is in doubt."""
    rp = request_parts
    by_id = (sa.select(in_doubt)
             .join(rp, sa.and_(rp.c.part_id == in_doubt.c.request_id,
                               rp.c.child == in_doubt.c.child))
             .where(rp.c.request_id == request_id))
    if children is not None:
        by_id = by_id.where(in_doubt.c.child.in_(list(children)))
    rows = {r.id: r for r in conn.execute(by_id)}
    # And those its answer's row carries (written with it: ledger.reserve).
    carried = [(p.part_id, p.child) for p in ledger.parts_carried(conn, request_id)]
    if carried:
        q = sa.select(in_doubt).where(in_doubt.c.request_id.in_([pid for pid, _ in carried]))
        if children is not None:
            q = q.where(in_doubt.c.child.in_(list(children)))
        rows.update({r.id: r for r in conn.execute(q) if (r.request_id, r.child) in carried})
    wanted = set(consumers)
    if wanted:
        q = sa.select(in_doubt)
        if children is not None:
            q = q.where(in_doubt.c.child.in_(list(children)))
        if len(wanted) <= MAX_LIKE:
            q = q.where(sa.or_(*(in_doubt.c.consumers.contains(f'"{c}"', autoescape=True)
                                 for c in sorted(wanted))))
        for r in conn.execute(q):
            if r.id not in rows and wanted.intersection(orjson.loads(r.consumers)):
                rows[r.id] = r
    return [_row(r) for _, r in sorted(rows.items())]


def _row(r: sa.Row[Any]) -> InDoubt:
    return InDoubt(id=int(r.id), child=r.child, request_id=r.request_id,
                   consumers=tuple(orjson.loads(r.consumers)), reason=r.reason,
                   attempts=int(r.attempts), last_error=r.last_error)


def counts(conn: Connection) -> dict[str, int]:
    """Child name -> requests still in doubt there."""
    rows = conn.execute(sa.select(in_doubt.c.child, sa.func.count())
                        .group_by(in_doubt.c.child))
    return {str(r[0]): int(r[1]) for r in rows}


def resolved(conn: Connection, row_id: int) -> None:
    conn.execute(sa.delete(in_doubt).where(in_doubt.c.id == row_id))


def attempt_failed(conn: Connection, row_id: int, error: str) -> None:
    conn.execute(sa.update(in_doubt).where(in_doubt.c.id == row_id).values(
        attempts=in_doubt.c.attempts + 1, last_error=error[:1000]))
