"""Provisional claims: the allocations of a cross-zone placement, held until confirmed.

A placement that spans zones (compute in a cell, disk from a pool at the
parent) is made atomic with a small two-phase protocol:

* each part is claimed *held*: real allocations (they count against
  capacity) plus a row here with an expiry;
* the coordinating zone (the parent) marks its own part *committing*, with
  the remote parts it must confirm — the decision, durable;
* it confirms every remote part (the owner deletes its row: the allocations
  become permanent), then deletes its own row.

A held part whose expiry passes is released by the owner's reaper (its
allocations deleted). A committing part is never reaped by time: recovery
confirms its remote parts, or, if a remote part had already expired,
releases the local one. So a crash at any step leaves no orphan (after the
expiry) and no double allocation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store import ledger
from strato.store.allocations import ConsumerClaim, claim
from strato.store.schema import allocations, provisional_claims
from strato.store.util import utcnow

HELD = "held"
COMMITTING = "committing"
pc = provisional_claims


@dataclass(frozen=True, slots=True)
class Pending:
    consumer_uuid: str
    state: str
    remote: list[dict[str, Any]]
    request_id: str | None = None
    attempt: str | None = None


def hold(conn: Connection, consumers: Iterable[str], ttl: float,
         request_id: str | None = None, attempt: str | None = None) -> None:
    """Mark freshly claimed consumers as held for `ttl` seconds (same transaction),
    under the request (as this zone knows it) and its attempt that made them."""
    now = utcnow()
    expires = now + timedelta(seconds=ttl)
    conn.execute(sa.insert(pc), [
        {"consumer_uuid": c, "state": HELD, "expires_at": expires, "remote": "[]",
         "created_at": now, "request_id": request_id, "attempt": attempt}
        for c in consumers])


def _pending(r: Any) -> Pending:
    return Pending(r.consumer_uuid, r.state, json.loads(r.remote or "[]"), r.request_id,
                   r.attempt)


def of_request(conn: Connection, request_id: str, attempt: str | None = None
               ) -> list[Pending]:
    """The provisional claims a request (one attempt of it, if given) made here."""
    q = sa.select(pc).where(pc.c.request_id == request_id)
    if attempt is not None:
        q = q.where(pc.c.attempt == attempt)
    return [_pending(r) for r in conn.execute(q)]


def mark_committing(conn: Connection, consumers: Sequence[str],
                    remote: list[dict[str, Any]]) -> bool:
    """The coordinator's decision. False if a part was already released."""
    res = conn.execute(sa.update(pc).where(pc.c.consumer_uuid.in_(consumers),
                                           pc.c.state == HELD)
                       .values(state=COMMITTING, remote=json.dumps(remote)))
    return res.rowcount == len(consumers)


def confirm(conn: Connection, consumers: Sequence[str]) -> tuple[list[str], list[str]]:
    """Make held parts permanent: (confirmed, gone). Idempotent: a consumer that is
    already permanent (allocations, no row) counts as confirmed; one whose hold
    expired counts as gone (and is released now if the reaper has not yet)."""
    now = utcnow()
    rows = {r.consumer_uuid: r for r in conn.execute(
        sa.select(pc).where(pc.c.consumer_uuid.in_(consumers)))}
    expired = [c for c, r in rows.items() if r.state == HELD and r.expires_at < now]
    if expired:
        _release(conn, expired)
    live = [c for c, r in rows.items() if c not in expired]
    if live:
        conn.execute(sa.delete(pc).where(pc.c.consumer_uuid.in_(live)))
    rest = [c for c in consumers if c not in rows]
    permanent = set(conn.execute(
        sa.select(allocations.c.consumer_id).where(allocations.c.consumer_id.in_(rest))
        .distinct()).scalars()) if rest else set()
    confirmed = live + [c for c in rest if c in permanent]
    gone = expired + [c for c in rest if c not in permanent]
    return confirmed, gone


def release(conn: Connection, consumers: Sequence[str]) -> list[str]:
    """Undo held parts (their allocations go). Permanent consumers are left alone."""
    held = list(conn.execute(sa.select(pc.c.consumer_uuid).where(
        pc.c.consumer_uuid.in_(consumers))).scalars())
    if held:
        _release(conn, held)
    return held


def _release(conn: Connection, consumers: Sequence[str]) -> None:
    by_request: dict[str, list[str]] = {}
    for c, rid in conn.execute(sa.select(pc.c.consumer_uuid, pc.c.request_id).where(
            pc.c.consumer_uuid.in_(consumers), pc.c.request_id.is_not(None))):
        by_request.setdefault(rid, []).append(c)
    claim(conn, [ConsumerClaim(c, {}) for c in consumers])
    conn.execute(sa.delete(pc).where(pc.c.consumer_uuid.in_(consumers)))
    # The placement that held them no longer has them: a late cancel of it
    # (by part id) must not remove what a later request places for them here.
    for rid, gone in by_request.items():
        ledger.forget_released(conn, rid, gone)


def done(conn: Connection, consumers: Sequence[str]) -> None:
    """The coordinator finished: its own part is permanent."""
    conn.execute(sa.delete(pc).where(pc.c.consumer_uuid.in_(consumers)))


def expired_held(conn: Connection) -> list[str]:
    return list(conn.execute(sa.select(pc.c.consumer_uuid).where(
        pc.c.state == HELD, pc.c.expires_at < utcnow())).scalars())


def committing(conn: Connection) -> list[Pending]:
    return [_pending(r) for r in conn.execute(sa.select(pc).where(pc.c.state == COMMITTING))]


def all_pending(conn: Connection) -> list[Pending]:
    return [_pending(r) for r in conn.execute(sa.select(pc))]


def counts(conn: Connection) -> dict[str, int]:
    """State -> provisional claims in it (for metrics)."""
    rows = conn.execute(sa.select(pc.c.state, sa.func.count()).group_by(pc.c.state))
    return {str(r[0]): int(r[1]) for r in rows}
