"""Placements that span zones: compute in a child subtree, a shared pool here.

When a request asks for a class that this zone's sharing providers offer
(MISC_SHARES_VIA_AGGREGATE, e.g. a regional disk pool) and that no child
offers, the request is split: the shared classes are held here on a pool,
the rest is scheduled in the children restricted to the pool's aggregates
(``member_of``), held there too; then the parts are confirmed, this zone's
decision first (see store/provisional.py for the protocol and why a crash
at any step leaves neither an orphan nor a double allocation).

The pool hold is recorded in the request ledger as a part (child ``POOL``)
and its provisional rows carry the request's id; the children's parts are
recorded by the tree as they are asked. So a cancel of the request finds
every part, and recovery finishes a decided split only while its request is
still wanted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.model.schedule import RequestGroupSpec, ScheduleRequest
from strato.store import ledger, provisional
from strato.store.children import Child
from strato.store.db import Database
from strato.zone import protocol
from strato.zone.attempt import Attempt, Health, Outcome, Result

log = logging.getLogger("strato.zone")
MAX_POOLS_TRIED = 3
CONFIRM_ATTEMPTS = 5
# The ledger's name for a pool hold among a request's parts (no zone can be
# named so: zone names start with a letter or digit).
POOL = "~pool"
# ... and the same pool part once it is permanent (confirmed with the rest).
POOL_DONE = "~pool-done"


class Caller(Protocol):
    """What sending claim messages to children needs of the zone tree."""

    config: Any

    async def child(self, name: str) -> Child | None: ...

    async def call_claim(self, child: Child, route: str, body: dict[str, Any],
                         consumers: Sequence[str], deadline: float) -> Any: ...

    def health_of(self, name: str) -> Health: ...


class Router(Caller, Protocol):
    """What the split needs of the zone tree (zone/tree.py's ZoneTree)."""

    db: Database
    local: Any

    @property
    def cache(self) -> Mapping[str, Any]: ...

    async def children(self) -> list[Child]: ...

    async def decide_children(self, req: ScheduleRequest, attempt: Attempt,
                              outcomes: list[Outcome], kids: Sequence[Child] | None = None,
                              occ: Any = None) -> dict[str, Any] | None: ...

    async def undo(self, request_id: str, *, placed: bool,
                   attempt: str | None = None) -> Any: ...

    async def record_part(self, attempt: Attempt, child: str, pid: str,
                          consumers: Sequence[str], *, durable: bool = True) -> None: ...


def shared_classes(tree: Router, req: ScheduleRequest) -> dict[str, int]:
    """Classes of the (single) request group that only this zone's pools can give."""
    if len(req.groups) != 1:
        return {}
    offered: set[str] = set()
    for cached in tree.cache.values():
        offered.update(cached.body.get("classes", {}))
    return {rc: n for rc, n in req.groups[0].resources.items() if rc not in offered}


async def schedule_split(tree: Router, req: ScheduleRequest, attempt: Attempt,
                         outcomes: list[Outcome], kids: Sequence[Child] | None = None,
                         occ: Any = None) -> dict[str, Any] | None:
    """Place `req` across a local pool and the children (`kids`, else all; one
    child or, when none takes it whole, several: zone/split.py, `occ` the
    group members its rules count), atomically; None if it does not apply or
    nothing fits."""
    shared = shared_classes(tree, req)
    if not shared or len(shared) == len(req.groups[0].resources):
        return None
    pools = await run_in_threadpool(tree.local.shared_pools, shared, len(req.consumers))
    if not pools:
        outcomes.append(Outcome("", Result.NO_VALID_PLACEMENT,
                                f"no shared pool here has room for {shared}"))
        return None
    ttl = tree.config.hold_ttl
    consumers = list(req.consumers)

    # In this zone's own database, before the hold: the hold's durable commit
    # takes the record to the disk with it.
    await tree.record_part(attempt, POOL, f"{attempt.request_id}#{attempt.token}", consumers,
                           durable=False)
    for provider, aggs in pools[:MAX_POOLS_TRIED]:
        if not aggs:
            continue
        try:
            await run_in_threadpool(tree.local.hold_shared, consumers, provider, shared, req,
                                    ttl, attempt.request_id, attempt.token)
        except errors.Conflict as exc:
            outcomes.append(Outcome("", Result.CONFLICT, f"pool {provider}: {exc.detail}"))
            continue
        group = req.groups[0]
        rest = {rc: n for rc, n in group.resources.items() if rc not in shared}
        sub = req.model_copy(update={
            "groups": [RequestGroupSpec(resources=rest, required=group.required,
                                        member_of=[*group.member_of, list(aggs)],
                                        in_tree=group.in_tree)],
            "hold_ttl": ttl, "dry_run": False})
        answer = await tree.decide_children(sub, attempt, outcomes, kids, occ)
        placed = {str(p["consumer_uuid"]) for p in (answer or {}).get("placements", [])}
        if not placed:
            await run_in_threadpool(_release_local, tree, consumers)
            continue
        # atomic=false: the consumers left unplaced below hold nothing here either.
        left = [c for c in consumers if c not in placed]
        if left:
            await run_in_threadpool(_release_local, tree, left)
        assert answer is not None
        merged = _merge(answer, provider, shared, tree.config.name)
        if await _commit(tree, [c for c in consumers if c in placed], answer, attempt):
            return merged
        # Some parts may have been confirmed before one was found expired:
        # cancel every part of this request, by part id, confirmed or not.
        await tree.undo(attempt.request_id, placed=False, attempt=attempt.token)
        outcomes.append(Outcome("", Result.CONFLICT, "a held part expired before it was "
                                "confirmed; released"))
    return None


def _merge(answer: dict[str, Any], provider: str, shared: dict[str, int], zone: str
           ) -> dict[str, Any]:
    out = dict(answer)
    placements = []
    for p in answer.get("placements", []):
        allocs = dict(p["allocations"])
        allocs[provider] = {"resources": dict(shared), "zone": zone}
        placements.append({**p, "allocations": allocs, "shared_zone": zone})
    out["placements"] = placements
    return out


def remote_parts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The held parts of a split answer, per child: what to confirm or release
    (placements on this zone's own providers are not among them: see
    local_consumers)."""
    by_path: dict[str, list[str]] = defaultdict(list)
    for p in answer.get("placements", []):
        by_path[str(p["zone"])].append(str(p["consumer_uuid"]))
    parts = []
    for path, consumers in sorted(by_path.items()):
        segs = path.split("/")[1:]  # the first segment is this zone
        if segs:
            parts.append({"child": segs[0], "path": segs[1:], "consumers": consumers})
    return parts


def local_consumers(answer: dict[str, Any]) -> list[str]:
    """The consumers a split answer placed on this zone's own providers (their
    zone path is this zone's name alone)."""
    return [str(p["consumer_uuid"]) for p in answer.get("placements", [])
            if "/" not in str(p["zone"])]


async def _commit(tree: Router, consumers: list[str], answer: dict[str, Any],
                  attempt: Attempt) -> bool:
    parts = remote_parts(answer)

    def decide() -> bool:
        with tree.db.write() as conn:
            return provisional.mark_committing(conn, consumers, parts)
    if not await run_in_threadpool(decide):
        # Our own hold expired while the children worked: undo theirs.
        await asyncio.gather(*(_remote(tree, part, "release") for part in parts))
        await run_in_threadpool(_release_local, tree, consumers)
        return False
    return await finish(tree, consumers, parts, attempt.request_id, attempt.token,
                        attempt.deadline)


async def finish(tree: Router, consumers: list[str], parts: list[dict[str, Any]],
                 request_id: str | None, attempt: str | None = None,
                 deadline: float | None = None) -> bool:
    """Drive a decided placement to its end: confirm every remote part, then ours.
    Returns False (after releasing ours) if a remote part had expired. Ours
    becoming permanent is recorded in the ledger (part POOL_DONE): an undo of
    the request must then remove its allocations, not only its holds."""
    gone = False
    for part in parts:
        gone = await confirm_part(tree, part, deadline) == 404 or gone
    if gone:
        await undo_parts(tree, consumers, parts)
        return False

    def done() -> bool:
        with tree.db.write() as conn:
            if request_id is not None and not ledger.add_part(
                    conn, request_id, POOL_DONE, request_id, consumers, attempt):
                # Cancelled (or abandoned) meanwhile: ours is not made permanent;
                # the parts confirmed below are cancelled by their part ids.
                provisional.release(conn, consumers)
                return False
            provisional.done(conn, consumers)
            return True
    return await run_in_threadpool(done)


async def confirm_part(tree: Caller, part: dict[str, Any], deadline: float | None) -> int:
    """Confirm one held part (tried again while there is time): 200, or 404 if
    its hold had expired. Raises ServiceUnavailable if it never answers."""
    for n in range(CONFIRM_ATTEMPTS):
        status = await _remote(tree, part, "confirm")
        if status in (200, 404):
            return status
        if deadline is not None and time.time() >= deadline:
            break  # out of time: no more tries
        await asyncio.sleep(min(2.0, 0.1 * 2 ** n))
    log.warning("confirm of %s not answered; the placement is undone", part)
    raise errors.ServiceUnavailable(
        "a zone holding part of this placement did not answer its confirmation: "
        "what was held is being undone; nothing stays placed: retry")


async def undo_parts(tree: Router, consumers: list[str], parts: list[dict[str, Any]]
                     ) -> None:
    await asyncio.gather(*(_remote(tree, part, "release") for part in parts))
    await run_in_threadpool(_release_local, tree, consumers)


async def _remote(tree: Caller, part: dict[str, Any], action: str) -> int:
    child = await tree.child(part["child"])
    if child is None:
        return 404
    reply = await tree.call_claim(child, f"/strato/v1/claims/{action}",
                                  {"path": part["path"], "consumers": part["consumers"]},
                                  part["consumers"],
                                  time.time() + tree.config.child_timeout)
    if isinstance(reply, Outcome):
        return 0
    if reply.status == 200:
        read = (protocol.read_confirm_answer if action == "confirm"
                else protocol.read_release_answer)
        try:
            read(part["consumers"], reply.body)
        except protocol.Faulty as exc:
            # Not an answer to what was asked: its outcome is unknown.
            tree.health_of(child.name).failed(f"faulty: {exc.reason}", faulty=True)
            return 0
    return int(reply.status)


def _release_local(tree: Router, consumers: list[str]) -> None:
    with tree.db.write() as conn:
        provisional.release(conn, consumers)


async def recover(tree: Router,
                  decided: Callable[[str | None, str | None], Awaitable[bool | None]]
                  ) -> dict[str, int]:
    """Release expired holds here; finish decided placements (after a crash)
    whose request `decided` says is still wanted; undo, by request (every part,
    confirmed or not), those it says are not."""
    def reap() -> tuple[list[str], list[provisional.Pending]]:
        with tree.db.read() as conn:
            if not provisional.all_pending(conn):
                return [], []  # the usual case: no write transaction at all
        with tree.db.write() as conn:
            expired = provisional.expired_held(conn)
            if expired:
                provisional.release(conn, expired)
            return expired, provisional.committing(conn)
    expired, pending = await run_in_threadpool(reap)
    by_remote: dict[str, list[str]] = defaultdict(list)
    parts_of: dict[str, tuple[str | None, str | None, list[dict[str, Any]]]] = {}
    for p in pending:
        key = repr((p.request_id, p.attempt, p.remote))
        by_remote[key].append(p.consumer_uuid)
        parts_of[key] = (p.request_id, p.attempt, p.remote)
    finished = undone = 0
    for key, consumers in by_remote.items():
        request_id, attempt, parts = parts_of[key]
        verdict = await decided(request_id, attempt)
        if verdict is None:
            continue  # its request is still at work here
        if not verdict:
            if request_id is None:
                await undo_parts(tree, consumers, parts)
            else:
                await tree.undo(request_id, placed=False, attempt=attempt)
            undone += len(consumers)
            continue
        try:
            if await finish(tree, consumers, parts, request_id, attempt):
                finished += len(consumers)
        except errors.StratoError:
            continue  # still unreachable; next round
    return {"released": len(expired), "finished": finished, "undone": undone}
