"""Placement allocation writes that span zones, made atomic.

`PUT /allocations/{consumer}` or `POST /allocations` at a routing zone may
name providers of several zones: this zone's own (a sharing pool, say) and
its children's, as a candidate that combines the root's disk pool with a
cell's host does. Such a write is made as a cross-zone placement is:

1. each zone's part is claimed *held* (`POST /strato/v1/claims` with the hold
   TTL, or this zone's own claim), under a part id recorded first in this
   zone's request ledger, this zone first and then the children by name (so
   two writes of one consumer meet at the same zone first: one is made);
2. if any part is refused, or a zone does not answer, every part is undone
   (by part id: a held part is released, a part in doubt is cancelled when
   its zone answers again) and the write is refused, 409 with the zone's own
   reason or 503 when a zone could not be asked: nothing stays;
3. otherwise the remote parts are confirmed, then this zone's, and the
   answer is written to the ledger (204).

A crash or partition at any step leaves no half-made write: an unanswered
write's ledger entry passes its deadline and recovery undoes every part;
held parts that are never confirmed are released after the TTL anyway.

Limits, each a clear 400: a consumer emptied in the same write (a swap of
allocations between consumers, as Nova's moves make) cannot be undone
from a hold, so it is refused; one consumer's allocations are on this zone's own
providers and those of at most one zone below (a child's, or deeper: the
child claims them where they are and answers with the path; so `GET` and
`DELETE /allocations/{consumer}` at this zone find all of it), and it is
new (its `consumer_generation` null): an existing consumer's allocations
are changed in the zone that holds them. A consumer on this zone's pool, a
child's own pool and a grandchild's host at once is refused by the child
(it claims one zone's providers).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.store import allocations as store
from strato.store.ledger import State
from strato.zone import protocol, shared
from strato.zone.attempt import Attempt, Outcome, part_id

if TYPE_CHECKING:
    from strato.zone.tree import ZoneTree

LOCAL = ""  # this zone's own providers (as zone/tree.py's LOCAL)


@dataclass
class _Part:
    zone: str  # LOCAL or a child's name
    body: dict[str, Any]
    consumers: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)  # below the child, where it was held


def parts_of(claims: Sequence[store.ConsumerClaim], owner: Mapping[str, str],
             ttl: float, deadline: float) -> list[_Part]:
    """Each zone's share of `claims` (`owner`: provider uuid -> LOCAL or the
    child whose subtree has it), one claim message per zone and owner."""
    grouped: dict[tuple[str, str, str, str | None], list[dict[str, Any]]] = defaultdict(list)
    zones = sorted({"this zone" if z == LOCAL else f"zone {z}"
                    for c in claims for z in (owner[rp] for rp in c.allocations)})
    for c in claims:
        if not c.allocations:
            raise errors.BadRequest(
                f"consumer {c.consumer_uuid}: emptying a consumer cannot be combined with a "
                f"write that names providers of several zones ({' and '.join(zones)}): such "
                "a write is made all or nothing by holding new allocations in each zone, and "
                "removed ones cannot be held. So moving allocations that span zones to "
                "another consumer (Nova's swap to a migration consumer for a resize or "
                "migration, and back on a revert) is refused, with nothing changed; remove "
                "them in a write of their own (not atomic with the other), or keep a "
                "consumer's providers in one zone (docs/api.md)")
        if isinstance(c.generation, int):
            raise errors.BadRequest(
                f"consumer {c.consumer_uuid}: an existing consumer's allocations are changed "
                "in the zone that holds them; a write across zones makes a new consumer "
                "(consumer_generation null)")
        by_zone: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for rp, resources in c.allocations.items():
            by_zone[owner[rp]][rp] = {"resources": dict(resources)}
        below = sorted(z for z in by_zone if z != LOCAL)
        if len(below) > 1:
            raise errors.BadRequest(
                f"consumer {c.consumer_uuid}: its allocations name providers of the zones "
                f"{', '.join(below)}; one consumer's allocations may span this zone and one "
                "zone below it, not two")
        for zone, allocs in by_zone.items():
            key = (zone, c.project_id or store.INCOMPLETE_CONSUMER_PROJECT,
                   c.user_id or store.INCOMPLETE_CONSUMER_USER, c.consumer_type)
            grouped[key].append({"consumer_uuid": c.consumer_uuid, "allocations": allocs})
    return [_Part(zone, {"path": [], "project_id": project, "user_id": user,
                         "consumer_type": ctype, "hold_ttl": ttl, "deadline": deadline,
                         "placements": placements},
                  [p["consumer_uuid"] for p in placements])
            for (zone, project, user, ctype), placements in sorted(
                grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2],
                                                 kv[0][3] or ""))]


class _Refused(Exception):
    def __init__(self, error: errors.StratoError) -> None:
        self.error = error


async def write(tree: ZoneTree, claims: Sequence[store.ConsumerClaim],
                owner: Mapping[str, str]) -> None:
    """Make `claims` (providers of several zones, `owner` says which) all or
    nothing; raises the refusal (400, 409, 503) with nothing left held."""
    now = time.time()
    attempt = Attempt(f"alloc-{uuid.uuid4().hex}", now + tree.config.request_timeout)
    parts = parts_of(claims, owner, tree.config.hold_ttl,
                     attempt.child_deadline(tree.config.child_timeout))
    await _refuse_existing(tree, claims, owner)
    kids = {c.name: c for c in await tree.children()}
    missing = sorted({p.zone for p in parts if p.zone != LOCAL and p.zone not in kids})
    if missing:
        raise errors.ServiceUnavailable(f"zone {missing[0]} is no longer a child of this "
                                        "zone: nothing was written", retry_after=1.0)
    for part in parts:
        part.body["request_id"] = part_id(attempt.request_id, tree.config.name)
        await tree.record_part(attempt, part.zone, part.body["request_id"], part.consumers)
    # One zone after another, this zone first, then the children by name: two
    # writes of the same consumers meet at the same first zone, where one
    # waits for or loses to the other, so one of them is made (asked all at
    # once, each could hold a part the other needs and both be refused).
    spans = {c for p in parts if p.zone != LOCAL for c in p.consumers}
    try:
        for part in parts:
            await _hold(tree, kids, part, spans)
    except BaseException as exc:
        await asyncio.shield(tree.give_up(attempt))
        if isinstance(exc, _Refused):
            raise exc.error from None
        raise
    try:
        await _confirm(tree, parts, attempt)
    except BaseException:
        await asyncio.shield(tree.give_up(attempt))
        raise
    await tree.final(attempt, State.PLACED, {
        "allocations": {p.zone or tree.config.name: p.consumers for p in parts}})
    for p in parts:
        if p.zone != LOCAL:
            for c in p.consumers:
                tree.consumer_zones.learn(c, p.zone)


async def _refuse_existing(tree: ZoneTree, claims: Sequence[store.ConsumerClaim],
                           owner: Mapping[str, str]) -> None:
    """409 for a consumer that has allocations already, here or in a zone below
    this zone knows of (each zone a part goes to refuses one it holds, too):
    a write across zones makes new consumers."""
    consumers = [c.consumer_uuid for c in claims]

    def here() -> list[str]:
        with tree.db.read() as conn:
            return [c for c in consumers
                    if store.get_consumer_allocations(conn, c).allocations]
    existing = await run_in_threadpool(here)
    if existing:
        raise errors.Conflict(
            f"consumer generation conflict - consumer {existing[0]} already has allocations "
            "in this zone: a write across zones makes a new consumer; change this one where "
            "it is",
            errors.CONCURRENT_UPDATE)
    for claim in claims:
        known = tree.consumer_zones.get(claim.consumer_uuid)
        if known is not None and known not in {owner.get(rp) for rp in claim.allocations}:
            raise errors.Conflict(
                f"consumer generation conflict - consumer {claim.consumer_uuid} already has "
                f"allocations in zone {known}: a write across zones makes a new consumer",
                errors.CONCURRENT_UPDATE)


async def _hold(tree: ZoneTree, kids: Mapping[str, Any], part: _Part,
                spans: Collection[str] = ()) -> None:
    """Claim one zone's part, held; raises _Refused with the answer to give.
    `spans`: the consumers with a part below too (counted there)."""
    if part.zone == LOCAL:
        try:
            await run_in_threadpool(tree.local.claim_placements, part.body, spans)
        except errors.StratoError as exc:
            raise _Refused(exc) from None
        return
    child = kids[part.zone]
    reply = await tree.call_claim(child, "/strato/v1/claims", part.body, part.consumers,
                                  float(part.body["deadline"]) + 0.25)
    if isinstance(reply, Outcome):
        raise _Refused(errors.ServiceUnavailable(
            f"zone {part.zone}, which holds providers of these allocations, did not answer "
            f"({reply.reason}): nothing was written", retry_after=1.0))
    if reply.status == 200:
        try:
            answer = protocol.read_claim_answer(part.consumers, reply.body)
            # Claimed further down when the providers are a grandchild's:
            # confirmed and released along that path.
            part.path = [str(z) for z in answer.get("path", [])]
        except protocol.Faulty as exc:
            tree.health_of(child.name).failed(f"faulty: {exc.reason}", faulty=True)
            await tree.note_in_doubt(child.name, part.body["request_id"], part.consumers,
                                     f"faulty claim answer: {exc.reason}")
            raise _Refused(errors.ServiceUnavailable(
                f"zone {part.zone} gave an answer that is not one: nothing was written",
                retry_after=1.0)) from None
        return
    try:
        err = protocol.read_error(reply.body)["errors"][0]
    except protocol.Faulty:
        err = {"detail": f"an answer of status {reply.status} without an error body"}
    detail = f"zone {part.zone}: {err.get('detail') or 'refused'}"[:1000]
    code = str(err.get("code") or errors.DEFAULT)
    if reply.status == 409:
        raise _Refused(errors.Conflict(detail, code))
    if reply.status == 400:
        raise _Refused(errors.BadRequest(detail, code))
    raise _Refused(errors.ServiceUnavailable(f"{detail} ({reply.status}): nothing was written",
                                             retry_after=1.0))


async def _confirm(tree: ZoneTree, parts: Sequence[_Part], attempt: Attempt) -> None:
    """Remote parts first, then this zone's; 409 if a hold had expired."""
    expired = errors.Conflict(
        "a held part of these allocations expired before it was confirmed; nothing was "
        "written: retry", errors.CONCURRENT_UPDATE)
    for part in parts:
        if part.zone == LOCAL:
            continue
        status = await shared.confirm_part(
            tree, {"child": part.zone, "path": part.path, "consumers": part.consumers},
            attempt.deadline)
        if status == 404:
            raise expired
    here = [c for p in parts if p.zone == LOCAL for c in p.consumers]
    if here and not await tree.confirm_here(here):
        raise expired
