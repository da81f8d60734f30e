"""The request ledger: every schedule request a zone works on, by request id.

A request id is reserved (state ``placing``) before any work, in its own
transaction at a routing zone and in the claim's transaction at a zone that
places on its own providers, so two requests with one id never both work:
the second finds the reservation and waits for, or replays, the first's
answer. The final answer is written once, and only over ``placing``: a
request cancelled meanwhile stays cancelled and its work is undone.

Every part a request creates elsewhere (a child's schedule or claim, a pool
hold, this zone's own placement under a part id) is recorded under the
request's id *before* it is asked for, so one cancel finds and undoes all of
it, even after a crash.

States: placing -> placed | refused | cancelled. An outage is not an
answer: a request that could not be placed because part of the tree was
unreachable gives its reservation back (a retry works afresh), and one whose
worker died is marked ``abandoned`` by recovery while its parts are undone,
then given back too.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.raw import Raw
from strato.store.schema import request_parts, schedule_requests
from strato.store.util import utcnow

sr = schedule_requests


class State(enum.IntEnum):
    """A request's state, stored as the HTTP status its answer has."""

    PLACING = 0
    PLACED = 200
    REFUSED = 409
    CANCELLED = 410
    # Its worker died or its deadline passed mid-way: parts being undone.
    ABANDONED = 503


FINAL = (State.PLACED, State.REFUSED, State.CANCELLED)
CANCELLED = State.CANCELLED


@dataclass(frozen=True, slots=True)
class Entry:
    request_id: str
    state: State
    body: dict[str, Any]
    deadline: float | None
    attempt: str | None = None


@dataclass(frozen=True, slots=True)
class Part:
    child: str  # "" for this zone's own providers
    part_id: str
    consumers: tuple[str, ...]
    attempt: str | None = None


# The statements every request at a routing zone runs go to the cursor
# directly (store/raw.py): through SQLAlchemy they cost more than the rest of
# the zone's work on a request.

def lookup(conn: Connection, request_id: str) -> Entry | None:
    raw = Raw(conn)
    try:
        row = raw.first("SELECT status, response, deadline, attempt "
                        "FROM strato_schedule_requests WHERE request_id = ?", (request_id,))
    finally:
        raw.close()
    if row is None:
        return None
    return Entry(request_id, State(int(row[0])), orjson.loads(row[1]),
                 None if row[2] is None else float(row[2]), row[3])


def get_answer(conn: Connection, request_id: str) -> tuple[int, dict[str, Any]] | None:
    """(status, body) of a finished request; None if unknown or not finished."""
    entry = lookup(conn, request_id)
    if entry is None or entry.state not in FINAL:
        return None
    return int(entry.state), entry.body


def reserve(conn: Connection, request_id: str, deadline: float | None = None,
            attempt: str | None = None, *, answer: tuple[int, dict[str, Any]] | None = None,
            parts: Sequence[Part] = ()) -> bool:
    """Claim `request_id` for this transaction (and `attempt`, at a routing
    zone); False if another one has it. With `answer` (status, body), the
    request is finished at once: its reservation is its answer, and `parts`
    (asked for in its name, held in memory until now) go in its row.

    One statement: an insert that does nothing on a conflict (on PostgreSQL it
    waits for a concurrent transaction holding the same id to end).
    """
    status, body = (int(State.PLACING), "{}") if answer is None else (
        int(answer[0]), orjson.dumps(answer[1]).decode())
    raw = Raw(conn)
    try:
        return raw.first(
            "INSERT INTO strato_schedule_requests (request_id, status, response, created_at, "
            "deadline, attempt, parts) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING "
            "RETURNING request_id",
            (request_id, status, body, raw.stamp(utcnow()), deadline, attempt,
             _dump_parts(parts) if parts else None)
        ) is not None
    finally:
        raw.close()


def finish(conn: Connection, request_id: str, status: int, body: dict[str, Any], *,
           only_placing: bool = False, attempt: str | None = None) -> bool:
    """Write the final answer; with `only_placing`, only over a reservation still
    placing (and held by `attempt`, if given): False if it was cancelled,
    abandoned or taken by another attempt meanwhile."""
    sql = "UPDATE strato_schedule_requests SET status = ?, response = ? WHERE request_id = ?"
    params: tuple[Any, ...] = (int(status), orjson.dumps(body).decode(), request_id)
    if only_placing:
        sql += " AND status = ?"
        params += (int(State.PLACING),)
    if attempt is not None:
        sql += " AND attempt = ?"
        params += (attempt,)
    raw = Raw(conn)
    try:
        return raw.run(sql, params) > 0
    finally:
        raw.close()


def give_back(conn: Connection, request_id: str, attempt: str | None) -> None:
    """Forget a reservation of `attempt` that reached no answer (an outage), so
    that a retry works afresh. Final answers are never forgotten here, nor
    another attempt's reservation."""
    conn.execute(sa.delete(sr).where(sr.c.request_id == request_id,
                                     sr.c.status.in_([State.PLACING, State.ABANDONED]),
                                     sr.c.attempt.is_(None) if attempt is None
                                     else sr.c.attempt == attempt))


def forget_released(conn: Connection, request_id: str, consumers: Sequence[str]) -> None:
    """Held consumers of `request_id`'s placement here were released (their hold
    expired, or the parent released them): its answer no longer names them, so
    a late cancel of the request, by its part id, cannot remove what a later
    request has placed for the same consumers since. A placement left with
    none is cancelled: a repeat is refused, not told it holds something.
    Only a placement of this zone's own (an answer with placements) changes:
    a request still at work here undoes its holds itself."""
    entry = lookup(conn, request_id)
    if entry is None or entry.state != State.PLACED:
        return
    gone = set(consumers)
    placements = [p for p in entry.body.get("placements", [])
                  if str(p.get("consumer_uuid")) not in gone]
    if len(placements) == len(entry.body.get("placements", [])):
        return
    if not placements:
        finish(conn, request_id, State.CANCELLED, {
            "detail": "its held placement was released before it was confirmed",
            "cancelled_status": int(State.PLACED)})
        return
    body = {**entry.body, "placements": placements}
    if isinstance(body.get("claimed"), list):
        body["claimed"] = [c for c in body["claimed"] if c not in gone]
    finish(conn, request_id, State.PLACED, body)


def abandon(conn: Connection, request_id: str) -> bool:
    """Take over a reservation still placing (its deadline passed, or its
    worker died): True if this call did, and now owns undoing its parts."""
    res = conn.execute(sa.update(sr).where(sr.c.request_id == request_id,
                                           sr.c.status == State.PLACING)
                       .values(status=State.ABANDONED))
    return bool(res.rowcount)


def unanswered(conn: Connection) -> dict[str, str | None]:
    """Every request still placing (or abandoned), with its attempt."""
    return {rid: attempt for rid, attempt in conn.execute(
        sa.select(sr.c.request_id, sr.c.attempt)
        .where(sr.c.status.in_([State.PLACING, State.ABANDONED])))}


def overdue(conn: Connection, now: float, limit: int = 100) -> list[str]:
    """Requests still placing (or abandoned) whose deadline passed before `now`."""
    return list(conn.execute(
        sa.select(sr.c.request_id)
        .where(sr.c.status.in_([State.PLACING, State.ABANDONED]), sr.c.deadline.is_not(None),
               sr.c.deadline < now).limit(limit)).scalars())


def add_part(conn: Connection, request_id: str, child: str, part_id: str,
             consumers: Sequence[str], attempt: str | None = None) -> bool:
    """Record a part; with `attempt`, only while that attempt still holds the
    request's reservation (False if it was cancelled, abandoned or taken)."""
    raw = Raw(conn)
    params = (request_id, child, part_id, orjson.dumps(list(consumers)).decode(),
              raw.stamp(utcnow()), attempt)
    try:
        if attempt is None:
            return raw.run("INSERT INTO strato_request_parts (request_id, child, part_id, "
                           "consumers, created_at, attempt) VALUES (?, ?, ?, ?, ?, ?) "
                           "ON CONFLICT DO NOTHING", params) >= 0
        return raw.run(
            "INSERT INTO strato_request_parts (request_id, child, part_id, consumers, "
            "created_at, attempt) SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM "
            "strato_schedule_requests WHERE request_id = ? AND status = ? AND attempt = ?) "
            "ON CONFLICT DO NOTHING",
            (*params, request_id, int(State.PLACING), attempt)) > 0
    finally:
        raw.close()


def add_parts(conn: Connection, request_id: str, parts: Sequence[Part],
              attempt: str) -> None:
    """Record `parts` of `attempt`, which holds the request's reservation in
    this very transaction (a routing zone's parts kept in memory until then)."""
    if not parts:
        return
    raw = Raw(conn)
    stamp = raw.stamp(utcnow())
    sql = ("INSERT INTO strato_request_parts (request_id, child, part_id, consumers, "
           "created_at, attempt) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
    rows = [(request_id, p.child, p.part_id, orjson.dumps(list(p.consumers)).decode(),
             stamp, attempt) for p in parts]
    try:
        if len(rows) == 1:
            raw.run(sql, rows[0])  # (a single row costs less so than as "many")
        else:
            raw.many(sql, rows)
    finally:
        raw.close()


def _dump_parts(parts: Sequence[Part]) -> str:
    return orjson.dumps([[p.child, p.part_id, list(p.consumers)] for p in parts]).decode()


def _load_parts(text: str | None, attempt: str | None) -> list[Part]:
    """The parts a request row carries (`reserve(parts=...)`), of its `attempt`."""
    if not text:
        return []
    return [Part(str(c), str(pid), tuple(str(x) for x in consumers), attempt)
            for c, pid, consumers in orjson.loads(text)]


def parts_carried(conn: Connection, request_id: str) -> list[Part]:
    """The parts `request_id`'s own row carries (see `reserve`)."""
    row = conn.execute(sa.select(sr.c.parts, sr.c.attempt)
                       .where(sr.c.request_id == request_id)).first()
    return [] if row is None else _load_parts(row.parts, row.attempt)


def parts(conn: Connection, request_id: str, attempt: str | None = None) -> list[Part]:
    """The parts recorded under `request_id` (only `attempt`'s, if given): in
    their own rows, and those its answer's row carries."""
    rp = request_parts
    q = sa.select(rp).where(rp.c.request_id == request_id)
    if attempt is not None:
        q = q.where(rp.c.attempt == attempt)
    out = [Part(r.child, r.part_id, tuple(orjson.loads(r.consumers)), r.attempt)
           for r in conn.execute(q.order_by(rp.c.id))]
    out += [p for p in parts_carried(conn, request_id)
            if attempt is None or p.attempt == attempt]
    return out


def take_parts(conn: Connection, request_id: str, children: Sequence[str],
               attempt: str | None = None) -> list[Part]:
    """The parts under `request_id` (only `attempt`'s, if given) asked of one of
    `children`, forgotten in the same transaction: for parts whose undo is not
    idempotent at their owner (a pool's allocations, released by consumer), so
    that a second undo of the request cannot remove what a later request has
    placed for the same consumers since."""
    rp = request_parts
    q = sa.select(rp).where(rp.c.request_id == request_id, rp.c.child.in_(list(children)))
    if attempt is not None:
        q = q.where(rp.c.attempt == attempt)
    rows = list(conn.execute(q.order_by(rp.c.id)))
    if rows:
        conn.execute(sa.delete(rp).where(rp.c.id.in_([r.id for r in rows])))
    return [Part(r.child, r.part_id, tuple(orjson.loads(r.consumers)), r.attempt)
            for r in rows]


def placed_parts(conn: Connection, limit: int, leave_out: Sequence[str] = ()
                 ) -> list[tuple[str, tuple[str, ...]]]:
    """(child, consumers) of the newest `limit` parts of requests placed here
    (those of the children `leave_out` left out), oldest first: the consumers
    placed through this zone, by the child they were asked of."""
    rp = request_parts
    q = (sa.select(rp.c.child, rp.c.consumers, rp.c.created_at)
         .join(sr, sr.c.request_id == rp.c.request_id)
         .where(sr.c.status == State.PLACED, rp.c.child.not_in(list(leave_out)))
         .order_by(rp.c.id.desc()).limit(limit))
    found = [(r.created_at, str(r.child), tuple(orjson.loads(r.consumers)))
             for r in conn.execute(q)]
    # Those the answers' rows carry: each row holds one or a few.
    q = (sa.select(sr.c.parts, sr.c.created_at)
         .where(sr.c.status == State.PLACED, sr.c.parts.is_not(None))
         .order_by(sr.c.created_at.desc()).limit(limit))
    skip = set(leave_out)
    for r in conn.execute(q):
        found += [(r.created_at, p.child, p.consumers) for p in _load_parts(r.parts, None)
                  if p.child not in skip]
    # The newest `limit`, oldest first (stably: each source is newest first).
    found.sort(key=lambda f: f[0] or datetime.min, reverse=True)
    return [(child, consumers) for _, child, consumers in reversed(found[:limit])]


def newest(conn: Connection) -> datetime | None:
    """When the newest request or part this zone still has was recorded."""
    stamps = [conn.execute(sa.select(sa.func.max(t.c.created_at))).scalar()
              for t in (sr, request_parts)]
    found = [s for s in stamps if s is not None]
    return max(found) if found else None


def known_parts(conn: Connection, child: str, since: datetime) -> set[str]:
    """The part ids recorded for `child` since `since`."""
    rp = request_parts
    out = set(conn.execute(sa.select(rp.c.part_id).where(
        rp.c.child == child, rp.c.created_at >= since)).scalars())
    for text in conn.execute(sa.select(sr.c.parts).where(
            sr.c.created_at >= since, sr.c.parts.is_not(None))).scalars():
        out.update(p.part_id for p in _load_parts(text, None) if p.child == child)
    return out


def made_by(conn: Connection, zone: str, newer_than: datetime, older_than: datetime,
            after: tuple[datetime, str] | None = None, limit: int = 1000
            ) -> list[tuple[str, datetime]]:
    """(request id, when) of the requests here that `zone` sent (part ids it
    made: ``…@zone#xxxxxxxx``), recorded between `newer_than` and `older_than`,
    that hold or may hold something (at work, placed, or being undone), oldest
    first, after the cursor `after`."""
    pattern = "%@" + re.sub(r"([\\%_])", r"\\\1", zone) + "#" + "_" * 8
    q = (sa.select(sr.c.request_id, sr.c.created_at)
         .where(sr.c.created_at >= newer_than, sr.c.created_at <= older_than,
                sr.c.status.in_([State.PLACING, State.PLACED, State.ABANDONED]),
                sr.c.request_id.like(pattern, escape="\\"))
         .order_by(sr.c.created_at, sr.c.request_id).limit(limit))
    if after is not None:
        q = q.where(sa.or_(sr.c.created_at > after[0],
                           sa.and_(sr.c.created_at == after[0], sr.c.request_id > after[1])))
    return [(r, c) for r, c in conn.execute(q)]


def purge(conn: Connection, before: datetime, limit: int = 10_000) -> int:
    """Forget up to `limit` finished answers (and their parts) created before
    `before`; how many went. A request still placing is never purged."""
    rp = request_parts
    # Parts of requests that gave their id back (an outage) have no answer to
    # go with: they go by their own age.
    stray = sa.select(rp.c.id).where(rp.c.created_at < before).limit(limit)
    conn.execute(sa.delete(rp).where(rp.c.id.in_(stray.scalar_subquery())))
    old = list(conn.execute(sa.select(sr.c.request_id)
                            .where(sr.c.created_at < before, sr.c.status.in_(FINAL))
                            .limit(limit)).scalars())
    if not old:
        return 0
    conn.execute(sa.delete(rp).where(rp.c.request_id.in_(old)))
    res = conn.execute(sa.delete(sr).where(sr.c.request_id.in_(old)))
    return max(0, int(res.rowcount or 0))


def cancel(conn: Connection, request_id: str) -> dict[str, Any] | None:
    """Mark `request_id` cancelled (idempotent). Returns the answer it had if it
    had placed something, for the caller to undo; None otherwise.

    A request that never arrived leaves a tombstone: if it arrives later, it
    is refused rather than placed. One still placing is marked cancelled: its
    worker finds that when it would write its answer, and undoes its work.
    """
    body = {"detail": "request cancelled by the parent zone, which lost its answer "
                      "(timeout or broken connection) and placed it elsewhere"}
    if reserve(conn, request_id):
        finish(conn, request_id, State.CANCELLED, body)
        return None
    entry = lookup(conn, request_id)
    if entry is None or entry.state == State.CANCELLED:
        return None
    finish(conn, request_id, State.CANCELLED, {**body, "cancelled_status": int(entry.state)})
    return entry.body if entry.state == State.PLACED else None
