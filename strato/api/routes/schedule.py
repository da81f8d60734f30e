"""/strato/v1/schedule and /strato/v1/explain: pick and claim in one call, or say why not.

Both go through the zone tree: a zone without children schedules over its
own providers; a zone with children also asks them (see zone/tree.py).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.body import bounded_faults
from strato.api.metrics import Metrics, result_of
from strato.api.recent import Recent
from strato.api.responses import REQUEST_ID_KEY, json_response, strato_error_response
from strato.model import errors
from strato.model.schedule import ScheduleAnswer, ScheduleRequest
from strato.zone import subtree
from strato.zone.attempt import part_zone
from strato.zone.scheduler import NoValidPlacement
from strato.zone.tree import ZoneTree

router = APIRouter(prefix="/strato/v1", tags=["schedule"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"description": (
        "No valid placement: code `strato.no_valid_placement`, with `explain` beside "
        "`errors` (kept: a retry with the same `request_id` gets it again); a consumer that "
        "already exists (`placement.concurrent_update`); a request with the same "
        "`request_id` still at work (`strato.request_in_progress`: retry).")},
    503: {"description": (
        "Part of the zone tree could not be asked and nothing else fits, or the request's "
        "deadline passed (`strato.zone_unavailable`, with `Retry-After`): nothing was "
        "claimed or kept; retry with the same `request_id`.")}}
MAX_HOPS = 16


def get_tree(request: Request) -> ZoneTree:
    tree: ZoneTree = request.app.state.tree
    return tree


def check_hops(body: ScheduleRequest) -> None:
    if body.hops > MAX_HOPS:
        raise errors.BadRequest(f"hops: the request crossed {body.hops} zones; the zone tree "
                                "has a loop or is deeper than allowed")


def check_client_id(body: ScheduleRequest) -> None:
    """400 for a client's request id shaped as the ids zones make for the
    parts they ask of a child (`…@zone#` and 8 hex digits): the zone named
    there would take the request for one of its own, and its start-up sweep
    would cancel it as one it no longer knows."""
    if body.hops == 0 and body.request_id is not None:
        maker = part_zone(body.request_id)
        if maker is not None:
            raise errors.BadRequest(
                f"request_id: {body.request_id[:80]!r} ends as the ids zones make for the "
                f"parts of requests they send to a child zone ('@{maker[:40]}#' and 8 hex "
                "digits), which a client's id may not: use another id")


async def schedule_response(tree: ZoneTree, body: ScheduleRequest, rid: str | None,
                            metrics: Metrics | None = None, recent: Recent | None = None
                            ) -> Response:
    """The one implementation of POST /strato/v1/schedule once its body is read,
    validated and the caller allowed (the route, and the lean path of api/fast.py)."""
    start = time.perf_counter()
    result, placed = "error", 0
    try:
        check_client_id(body)
        answer = await tree.schedule(body)
        result, placed = "placed", len(answer.get("placements", []))
        subtree.learn_placements(tree, answer)
        if recent is not None and not body.dry_run:
            recent.placed(body.request_id, len(body.consumers), answer,
                          time.perf_counter() - start)
        return json_response(answer)
    except errors.StratoError as exc:
        result = result_of(exc.status, exc.code)
        if recent is not None:
            recent.refused(body.request_id, len(body.consumers), result, exc.detail,
                           getattr(exc, "explain", None), time.perf_counter() - start)
        return strato_error_response(exc, rid)
    finally:
        if metrics is not None:
            metrics.scheduled(result, time.perf_counter() - start, placed)


@router.post("/schedule", response_model=ScheduleAnswer, responses=_ERRORS,
             dependencies=[Depends(bounded_faults(ScheduleRequest))])
async def create_schedule(request: Request, body: ScheduleRequest) -> Response:
    """Filter, weigh and claim: place every consumer (or none, when atomic), or explain
    why not. A repeated `request_id` returns the first answer and claims nothing."""
    deps.require_admin(request, "strato:schedule:create")
    check_hops(body)
    rid = request.scope.get(REQUEST_ID_KEY)
    return await schedule_response(get_tree(request), body,
                                   rid if isinstance(rid, str) else None,
                                   request.app.state.metrics, request.app.state.recent)


@router.post("/explain", response_model=ScheduleAnswer,
             dependencies=[Depends(bounded_faults(ScheduleRequest))])
async def create_explain(request: Request, body: ScheduleRequest) -> Response:
    """A dry run that always explains what each stage removed; claims nothing."""
    deps.require_admin(request, "strato:schedule:explain")
    check_hops(body)
    dry = body.model_copy(update={"dry_run": True, "explain": True, "request_id": None})
    try:
        return json_response(await get_tree(request).schedule(dry))
    except NoValidPlacement as exc:
        return json_response({"placements": [], "relaxed": [], "retries": 0, "dry_run": True,
                              "request_id": None, "unplaced": list(body.consumers),
                              "explain": exc.explain, "detail": exc.detail})
