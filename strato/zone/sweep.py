"""Parts lost with the process or the machine: found at the children on
start-up, and cancelled.

A routing zone asks a child for a part of a request (``rid@zone#xxxxxxxx``)
before it writes that part down: it holds the request's id and the parts
asked of children in memory, and its answer's commit writes them all (a
part on its own providers, a pool hold or a divided request's part is
recorded in the ledger first, but without waiting for the disk: the answer's
commit takes it there). A process that dies before that commit loses the
parts it held; a machine that dies, the records of its last moments. Such a
part may then be held at a child while this zone, back up, has no record of
it: nobody was told of it, nobody would ever cancel it, and the client's
retry would place the request again.

So on start-up, before it serves a request, a zone notes the stretch of time
such parts can come from (`plan`): from a request's time (its timeout)
before its last heartbeat (written every recovery round, waiting for the
disk, which takes every record made before it there too) or its newest
record, until a request's time after the next heartbeat would have reached
the disk (plus a margin): a part asked for just before the process stopped
may reach the child, and be held there, until the request's deadline. Then,
in the background, every round (`run`), it asks every child which requests
it holds that this zone sent in that stretch (GET /strato/v1/requests; after
the first listing, only what is newer), and cancels those it does not know
(in its ledger, or held in memory by a request at work now), until a child
has been asked after the stretch ended. The stretch is kept in the zone's
database until every child was, through further restarts; the heartbeat
bounds it, so a database restored from an old backup never cancels what was
placed since. Until then, a parent's cancel of a request this zone does not
know is not confirmed (`ZoneTree.cancel`).

Waiting for the disk before each part instead cost each routing zone on a
request's path one more fsync and two thread hand-offs (benchmarks/README,
"Sixteenth session"); writing each part down before asking for it, one more
commit ("Thirty-first session").
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from sqlalchemy.engine import Connection

from strato.store import ledger, zone_meta
from strato.store.children import Child
from strato.zone import protocol
from strato.zone.transport import Unreachable

if TYPE_CHECKING:
    from strato.zone.tree import ZoneTree

ALIVE = "alive_at"
PENDING = "lost_parts_sweep"
# Before the newest record (records are stamped in whole seconds, and
# concurrent ones commit out of order by a little) and after the heartbeat
# (a round late, or a stalled event loop).
BEFORE_S = 5.0
AFTER_S = 30.0
PAGE = 1000
# A few seconds of requests (the stretch is short): more is a child that lies.
MAX_LISTED = 200_000

log = logging.getLogger("strato.zone")
# Children already warned about (a failing child is asked every round).
_told: set[str] = set()


@dataclass(frozen=True, slots=True)
class Sweep:
    start: float  # epoch seconds, this zone's clock
    end: float
    children: tuple[str, ...]

    def dump(self) -> str:
        return json.dumps({"from": self.start, "to": self.end,
                           "children": list(self.children)})

    @classmethod
    def load(cls, text: str | None) -> Sweep | None:
        if not text:
            return None
        try:
            raw = json.loads(text)
            return cls(float(raw["from"]), float(raw["to"]),
                       tuple(str(c) for c in raw["children"]))
        except (ValueError, KeyError, TypeError):
            log.error("unreadable %s in the zone's metadata: dropped", PENDING)
            return None


def _epoch(stamp: datetime) -> float:
    return stamp.replace(tzinfo=UTC).timestamp()


def plan(conn: Connection, children: list[str], now: float, beat_s: float,
         request_s: float = AFTER_S) -> Sweep | None:
    """At start-up, before any request: the sweep owed (merged with one left
    unfinished by an earlier run), stored; None if there is none.

    `request_s`: the longest a request may be at work here (its timeout)."""
    pending = Sweep.load(zone_meta.get(conn, PENDING))
    newest = ledger.newest(conn)
    alive = zone_meta.get(conn, ALIVE)
    if alive is not None and children:
        # The process stopped after its last heartbeat and its newest record.
        # A part it held in memory was asked for at most a request's time
        # before that; one lost with the disk, after the last commit that
        # waited for it (the heartbeat's, at least). Either was held at the
        # child before the request's deadline: within a request's time after
        # the next heartbeat would have been written.
        last = max(float(alive), _epoch(newest) if newest is not None else 0.0)
        start = last - request_s - BEFORE_S
        end = max(start, float(alive) + beat_s + max(AFTER_S, request_s))
        if pending is not None:
            start, end = min(start, pending.start), max(end, pending.end)
            children = sorted({*children, *pending.children})
        pending = Sweep(start, end, tuple(children))
    zone_meta.put(conn, PENDING, None if pending is None else pending.dump())
    zone_meta.put(conn, ALIVE, repr(now))
    return pending


def heartbeat(conn: Connection) -> None:
    zone_meta.put(conn, ALIVE, repr(time.time()))


def _done(conn: Connection, child: str) -> Sweep | None:
    pending = Sweep.load(zone_meta.get(conn, PENDING))
    if pending is None:
        return None
    rest = tuple(c for c in pending.children if c != child)
    pending = Sweep(pending.start, pending.end, rest) if rest else None
    zone_meta.put(conn, PENDING, None if pending is None else pending.dump())
    return pending


async def run(tree: ZoneTree, sweep: Sweep) -> Sweep | None:
    """Ask each child of `sweep` that answers; what is left for a later round.

    A child is asked every round until one asks it after the stretch ended: a
    part asked for just before this zone stopped may reach it, and be held
    there, until that request's deadline; each round after the first lists
    only what is new since the one before."""
    kids = {c.name: c for c in await tree.children()}
    left: Sweep | None = sweep
    for name in sweep.children:
        child = kids.get(name)
        if child is not None:
            if not tree.health_of(name).due():
                continue
            asked = time.time()
            got = await _sweep_child(tree, child, sweep)
            if got is None:
                continue
            tree.swept_until[name] = asked
            # (A record is stamped before its commit makes it seen: the last
            # listing comes a margin after the stretch.)
            if not got and asked <= sweep.end + BEFORE_S:
                continue
        else:
            log.warning("child %s was removed before it could be asked for parts lost "
                        "with this zone's machine", name)
        left = await tree.write_meta(partial(_done, child=name))
    return left


async def _sweep_child(tree: ZoneTree, child: Child, sweep: Sweep) -> bool | None:
    """False once `child` was asked for every page and its unknown parts were
    cancelled (or recorded in doubt, to be cancelled when it answers); True if
    it cannot be asked at all (not asked again); None if it failed."""
    listed: list[str] = []
    after: str | None = None
    # What an earlier round listed there is settled (less a margin: a
    # record is stamped before its commit makes it seen).
    since = max(sweep.start, tree.swept_until.get(child.name, sweep.start) - BEFORE_S)
    while True:
        now = time.time()
        params: dict[str, Any] = {"made_by": tree.config.name,
                                  "newer_than": round(max(0.0, now - since), 3),
                                  "older_than": round(max(0.0, now - sweep.end), 3),
                                  "limit": PAGE}
        if after is not None:
            params["after"] = after
        try:
            reply = await tree.transport.call(
                child.url, "GET", f"/strato/v1/requests?{urlencode(params)}",
                token=child.credential, timeout=tree.config.child_timeout)
        except Unreachable as exc:
            tree.health_of(child.name).failed(exc.why)
            return None
        if reply.status in (404, 405):
            # A zone of an older version: it cannot say. Not asked again.
            log.error("child %s cannot list the requests this zone sent (it answered %s: "
                      "an older version?): parts this zone may have lost the record of "
                      "just before its machine went down are not looked for there",
                      child.name, reply.status)
            return True
        if reply.status != 200:
            log.log(logging.DEBUG if child.name in _told else logging.WARNING,
                    "child %s answered %s when asked for the requests this zone sent: "
                    "asked again later", child.name, reply.status)
            _told.add(child.name)
            return None
        try:
            page = protocol.read_requests_page(tree.config.name, reply.body)
        except protocol.Faulty as exc:
            tree.health_of(child.name).failed(f"faulty: {exc.reason}", faulty=True)
            return None
        listed += page["request_ids"]
        if page["next"] is None:
            break
        if page["next"] == after or len(listed) > MAX_LISTED:
            tree.health_of(child.name).failed(
                "faulty: requests pages that do not end", faulty=True)
            return None
        after = page["next"]
    known = await tree.known_parts(child.name, sweep.start - 60.0)
    lost = [pid for pid in listed if pid not in known]
    for pid in lost:
        await tree.cancel_part(child, pid, "asked for by this zone before it stopped, "
                               "which took the record along")
    if lost:
        log.warning("child %s held %d part(s) this zone asked for just before it stopped "
                    "and has no record of: cancelled", child.name, len(lost))
    return False
