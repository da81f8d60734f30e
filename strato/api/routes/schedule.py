"""/strato/v1/schedule and /strato/v1/explain: pick and claim in one call, or say why not.

Both go through the zone tree: a zone without children schedules over its
own providers; a zone with children also asks them (see zone/tree.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.responses import REQUEST_ID_KEY, error_body, json_response
from strato.model import errors
from strato.model.schedule import ScheduleAnswer, ScheduleRequest
from strato.zone.scheduler import LocalScheduler, NoValidPlacement
from strato.zone.tree import ZoneTree

router = APIRouter(prefix="/strato/v1", tags=["schedule"])

_409: dict[int | str, dict[str, Any]] = {409: {"description": (
    "No valid placement: code `strato.no_valid_placement`, with `explain` beside `errors`; "
    "or a consumer that already exists (`placement.concurrent_update`).")}}
MAX_HOPS = 16


def get_scheduler(request: Request) -> LocalScheduler:
    scheduler: LocalScheduler = request.app.state.scheduler
    return scheduler


def get_tree(request: Request) -> ZoneTree:
    tree: ZoneTree = request.app.state.tree
    return tree


def _no_valid(request: Request, exc: NoValidPlacement) -> Response:
    body = error_body(409, "Conflict", exc.detail, exc.code,
                      request.scope.get(REQUEST_ID_KEY))
    body["explain"] = exc.explain
    return json_response(body, 409)


def _hops(body: ScheduleRequest) -> None:
    if body.hops > MAX_HOPS:
        raise errors.BadRequest(f"hops: the request crossed {body.hops} zones; the zone tree "
                                "has a loop or is deeper than allowed")


@router.post("/schedule", response_model=ScheduleAnswer, responses=_409)
async def create_schedule(request: Request, body: ScheduleRequest) -> Response:
    """Filter, weigh and claim: place every consumer (or none, when atomic), or explain
    why not. A repeated `request_id` returns the first answer and claims nothing."""
    deps.require_admin(request, "strato:schedule:create")
    _hops(body)
    try:
        answer = await get_tree(request).schedule(body)
    except NoValidPlacement as exc:
        await run_in_threadpool(get_scheduler(request).record_failure, body, exc)
        return _no_valid(request, exc)
    return json_response(answer)


@router.post("/explain", response_model=ScheduleAnswer)
async def create_explain(request: Request, body: ScheduleRequest) -> Response:
    """A dry run that always explains what each stage removed; claims nothing."""
    deps.require_admin(request, "strato:schedule:explain")
    _hops(body)
    dry = body.model_copy(update={"dry_run": True, "explain": True, "request_id": None})
    try:
        return json_response(await get_tree(request).schedule(dry))
    except NoValidPlacement as exc:
        return json_response({"placements": [], "relaxed": [], "retries": 0, "dry_run": True,
                              "request_id": None, "unplaced": list(body.consumers),
                              "explain": exc.explain, "detail": exc.detail})
