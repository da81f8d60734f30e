"""POST /strato/v1/schedule and GET /allocation_candidates past the
framework's per-request machinery.

The hottest route is also the simplest to serve: one JSON body, one model, one
call into the zone tree, one JSON answer. Through FastAPI each call also paid
for route matching over every Placement route, dependency solving and three
more middlewares: a dry run's server CPU went from 3.9 to 3.2 ms without them.
This middleware sits inside `StratoMiddleware` (request id, microversion,
authentication and the body limit are done) and answers the route itself.

Anything it would answer differently goes to the normal route instead, with
the body replayed: a body that does not validate, a caller who is not an
admin, too many hops. Those answers (400, 403) are then exactly the route's.

`FastCandidates` does the same for Placement's hottest read: it calls the
route's own function (`candidates_response`); any error, a Placement 400 or
403 as much as an unexpected one, is left to the route, which raises it again
and answers it as every route does (a GET has no body to replay, and the
answer changes nothing). Through the framework, routing and dependency
solving cost about a third of a limited answer's server time at 10,000 hosts.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import DataError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from strato.api import deps, routename
from strato.api.auth import CONTEXT_KEY, Context
from strato.api.middleware import accepts_json, read_body, replay_body
from strato.api.responses import REQUEST_ID_KEY, error_response
from strato.api.routes.allocation_candidates import candidates_response
from strato.api.routes.schedule import MAX_HOPS, schedule_response
from strato.model import errors
from strato.model.schedule import ScheduleRequest

log = logging.getLogger("strato.api")
PATH = "/strato/v1/schedule"
CANDIDATES = "/allocation_candidates"
SCHEDULE_ROUTE = routename.Named(PATH)
CANDIDATES_ROUTE = routename.Named(CANDIDATES)


class FastSchedule:
    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state  # the FastAPI app's state: tree and scheduler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        scope["route"] = SCHEDULE_ROUTE  # (the router's, for metrics and the audit log)
        body, cut = await read_body(receive)
        if cut is not None:
            await self.app(scope, replay_body(body, receive, cut), send)
            return
        ctx = scope.get(CONTEXT_KEY)
        req: ScheduleRequest | None
        try:
            req = ScheduleRequest.model_validate_json(body)
        except ValidationError:
            req = None
        if (req is None or not isinstance(ctx, Context)
                or not (ctx.is_admin or deps.is_parent(ctx)) or req.hops > MAX_HOPS):
            await self.app(scope, replay_body(body, receive), send)
            return
        rid = scope.get(REQUEST_ID_KEY)
        try:
            response: Response = await schedule_response(
                self.state.tree, req, rid if isinstance(rid, str) else None,
                getattr(self.state, "metrics", None), getattr(self.state, "recent", None))
        except DataError as exc:
            response = error_response(400, "Bad Request",
                                      f"invalid value in request: {type(exc.orig).__name__}",
                                      errors.DEFAULT, rid)
        except Exception as exc:
            log.exception("unexpected error on POST %s", PATH)
            response = error_response(500, "Internal Server Error",
                                      f"unexpected error: {type(exc).__name__}",
                                      errors.DEFAULT, rid)
        await response(scope, receive, send)


class FastCandidates:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != CANDIDATES or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        scope["route"] = CANDIDATES_ROUTE
        request = Request(scope, receive)
        if not accepts_json(request.headers.get("accept")):
            await self.app(scope, receive, send)  # the app's 406
            return
        try:
            response = await candidates_response(request)
        except Exception:
            # The route raises it again and answers it (errors' bodies and
            # headers, and the log of an unexpected one, are the app's).
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)
