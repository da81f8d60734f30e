"""Placements that span zones: compute in a child subtree, a shared pool here.

When a request asks for a class that this zone's sharing providers offer
(MISC_SHARES_VIA_AGGREGATE, e.g. a regional disk pool) and that no child
offers, the request is split: the shared classes are held here on a pool,
the rest is scheduled in the children restricted to the pool's aggregates
(``member_of``), held there too; then the parts are confirmed, this zone's
decision first (see store/provisional.py for the protocol and why a crash
at any step leaves neither an orphan nor a double allocation).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.model.schedule import RequestGroupSpec, ScheduleRequest
from strato.store import provisional
from strato.zone import protocol
from strato.zone.transport import Unreachable

if TYPE_CHECKING:
    from strato.zone.tree import Outcome, ZoneTree

log = logging.getLogger("strato.zone")
DEFAULT_HOLD_TTL = 30.0
MAX_POOLS_TRIED = 3
CONFIRM_ATTEMPTS = 5


def shared_classes(tree: ZoneTree, req: ScheduleRequest) -> dict[str, int]:
    """Classes of the (single) request group that only this zone's pools can give."""
    if len(req.groups) != 1:
        return {}
    offered: set[str] = set()
    for cached in tree.cache.values():
        offered.update(cached.body.get("classes", {}))
    return {rc: n for rc, n in req.groups[0].resources.items() if rc not in offered}


async def schedule_split(tree: ZoneTree, req: ScheduleRequest,
                         outcomes: list[Outcome]) -> dict[str, Any] | None:
    """Place `req` across a local pool and the children, atomically; None if it
    does not apply or nothing fits."""
    from strato.zone.tree import Outcome

    shared = shared_classes(tree, req)
    if not shared or len(shared) == len(req.groups[0].resources):
        return None
    pools = await run_in_threadpool(tree.local.shared_pools, shared, len(req.consumers))
    if not pools:
        outcomes.append(Outcome("", "no_valid_placement",
                                f"no shared pool here has room for {shared}"))
        return None
    ttl = tree.config.hold_ttl
    consumers = list(req.consumers)
    for provider, aggs in pools[:MAX_POOLS_TRIED]:
        if not aggs:
            continue
        try:
            await run_in_threadpool(tree.local.hold_shared, consumers, provider, shared, req,
                                    ttl)
        except errors.Conflict as exc:
            outcomes.append(Outcome("", "conflict", f"pool {provider}: {exc.detail}"))
            continue
        group = req.groups[0]
        rest = {rc: n for rc, n in group.resources.items() if rc not in shared}
        sub = req.model_copy(update={
            "groups": [RequestGroupSpec(resources=rest, required=group.required,
                                        member_of=[*group.member_of, list(aggs)],
                                        in_tree=group.in_tree)],
            "hold_ttl": ttl, "dry_run": False,
            # One id per pool tried: a child that lost this part's answer is
            # told to cancel exactly it (the hold would also expire).
            "request_id": None if req.request_id is None else f"{req.request_id}~{provider}"})
        answer = await tree.decide_children(sub, outcomes)
        if answer is None:
            await run_in_threadpool(_release_local, tree, consumers)
            continue
        merged = _merge(answer, provider, shared, tree.config.name)
        if await _commit(tree, consumers, answer):
            return merged
        outcomes.append(Outcome("", "conflict", "a held part expired before it was "
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


def _remote_parts(tree: ZoneTree, answer: dict[str, Any]) -> list[dict[str, Any]]:
    by_path: dict[str, list[str]] = defaultdict(list)
    for p in answer.get("placements", []):
        by_path[str(p["zone"])].append(str(p["consumer_uuid"]))
    parts = []
    for path, consumers in sorted(by_path.items()):
        segs = path.split("/")[1:]  # the first segment is this zone
        parts.append({"child": segs[0], "path": segs[1:], "consumers": consumers})
    return parts


async def _commit(tree: ZoneTree, consumers: list[str], answer: dict[str, Any]) -> bool:
    parts = _remote_parts(tree, answer)

    def decide() -> bool:
        with tree.db.write() as conn:
            return provisional.mark_committing(conn, consumers, parts)
    if not await run_in_threadpool(decide):
        # Our own hold expired while the children worked: undo theirs.
        await asyncio.gather(*(_remote(tree, part, "release") for part in parts))
        await run_in_threadpool(_release_local, tree, consumers)
        return False
    return await finish(tree, consumers, parts)


async def finish(tree: ZoneTree, consumers: list[str], parts: list[dict[str, Any]]) -> bool:
    """Drive a decided placement to its end: confirm every remote part, then ours.
    Returns False (after releasing ours) if a remote part had expired."""
    gone = False
    for part in parts:
        for attempt in range(CONFIRM_ATTEMPTS):
            status = await _remote(tree, part, "confirm")
            if status == 200:
                break
            if status == 404:
                gone = True
                break
            await asyncio.sleep(min(2.0, 0.1 * 2 ** attempt))
        else:
            # Unknown outcome: leave the decision for recovery to finish.
            log.warning("confirm of %s pending; recovery will finish it", part)
            raise errors.Conflict("a zone holding part of this placement did not answer; "
                                  "the placement will be completed or undone by recovery: "
                                  "read the consumers' allocations later, do not resend them",
                                  errors.OUTCOME_PENDING)
    if gone:
        await asyncio.gather(*(_remote(tree, part, "release") for part in parts))
        await run_in_threadpool(_release_local, tree, consumers)
        return False

    def done() -> None:
        with tree.db.write() as conn:
            provisional.done(conn, consumers)
    await run_in_threadpool(done)
    return True


async def _remote(tree: ZoneTree, part: dict[str, Any], action: str) -> int:
    kids = {c.name: c for c in await tree.children()}
    child = kids.get(part["child"])
    if child is None:
        return 404
    try:
        reply = await tree.transport.call(
            child.url, "POST", f"/strato/v1/claims/{action}", token=child.credential,
            json={"path": part["path"], "consumers": part["consumers"]},
            timeout=tree.config.child_timeout)
    except Unreachable:
        return 0
    if reply.status == 200:
        read = (protocol.read_confirm_answer if action == "confirm"
                else protocol.read_release_answer)
        try:
            read(part["consumers"], reply.body)
        except protocol.Faulty as exc:
            # Not an answer to what was asked: its outcome is unknown.
            tree._health(child.name).failed(f"faulty: {exc.reason}")
            return 0
    return reply.status


def _release_local(tree: ZoneTree, consumers: list[str]) -> None:
    with tree.db.write() as conn:
        provisional.release(conn, consumers)


async def recover(tree: ZoneTree) -> dict[str, int]:
    """Release expired holds here; finish decided placements (after a crash)."""
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
    parts_of: dict[str, list[dict[str, Any]]] = {}
    for p in pending:
        key = repr(p.remote)
        by_remote[key].append(p.consumer_uuid)
        parts_of[key] = p.remote
    finished = 0
    for key, consumers in by_remote.items():
        try:
            if await finish(tree, consumers, parts_of[key]):
                finished += len(consumers)
        except errors.Conflict:
            continue  # still unreachable; next round
    return {"released": len(expired), "finished": finished}


async def run_recovery(tree: ZoneTree) -> None:
    """Background loop (HTTP servers): reap and finish, a few times per hold TTL."""
    while True:
        try:
            await recover(tree)
        except Exception:
            log.exception("recovery round failed")
        await asyncio.sleep(max(0.5, tree.config.hold_ttl / 6))
