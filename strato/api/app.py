"""The ASGI application: Placement-compatible routes and Strato's own."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DataError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.staticfiles import StaticFiles

import strato
from strato.api import openapi
from strato.api.audit import AuditLog
from strato.api.auth import AuthStrategy, NoAuth, TokenAuth, WithZoneTokens
from strato.api.below import ProvidersBelow
from strato.api.body import MAX_DESCRIBED, StratoJson, more_errors
from strato.api.cors import CorsMiddleware, CorsPolicy
from strato.api.fast import FastCandidates, FastSchedule
from strato.api.gate import PolicyFirst
from strato.api.metrics import HttpMetrics, Metrics
from strato.api.middleware import StratoMiddleware, accepts_json
from strato.api.policy import PolicyFile, PolicyMode
from strato.api.recent import Recent
from strato.api.responses import REQUEST_ID_KEY, error_response, strato_error_response
from strato.api.routes import ROUTERS, ui
from strato.api.tracing import TraceMiddleware
from strato.config import Settings
from strato.engine.service import Engine, EngineConfig
from strato.model import errors
from strato.store.db import Database, trim_heap
from strato.store.migrate import upgrade
from strato.store.zone_meta import identity as zone_identity
from strato.tls import Tls
from strato.zone.registration import ParentContact, keep_registered
from strato.zone.scheduler import LocalScheduler
from strato.zone.transport import HttpTransport, Transport
from strato.zone.tree import TreeConfig, ZoneTree

log = logging.getLogger("strato.api")

_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 406: "Not Acceptable", 409: "Conflict",
           413: "Request Entity Too Large", 415: "Unsupported Media Type",
           500: "Internal Server Error"}


def _rid(request: Request) -> str | None:
    rid = request.scope.get(REQUEST_ID_KEY)
    return rid if isinstance(rid, str) else None


def _allowed(app: FastAPI, request: Request) -> list[str]:
    """The methods some route takes at the request's path."""
    found = []
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(r.matches(scope)[0] is Match.FULL for r in app.router.routes):
            found.append(method)
    return found


# Strato's pages that are no JSON (Prometheus text, HTML): served whatever
# the Accept header says, as their clients (scrapers, browsers) expect.
_NOT_JSON = frozenset({"/metrics", "/ui", "/docs"})


async def _json_accepted(request: Request) -> None:
    """As Placement's GET handlers: 406 unless the Accept header allows JSON
    (an unknown path is still a 404, and other methods do not look)."""
    if (request.method in ("GET", "HEAD") and request.url.path not in _NOT_JSON
            and not accepts_json(request.headers.get("accept"))):
        raise errors.NotAcceptable("Only application/json is provided")


def _identity(db: Database) -> str:
    with db.write() as conn:
        return zone_identity(conn)


def _telemetry_off() -> dict[str, Any]:
    """FastAPI's own OpenTelemetry, unless the environment configures OpenTelemetry
    (an OTEL_* variable, or FASTAPI_OTEL_AUTO_CONFIGURE): otherwise it only asks
    for the global providers on every request, for nothing."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}  # a FastAPI without it
    if any(k.startswith("OTEL_") or k == "FASTAPI_OTEL_AUTO_CONFIGURE" for k in os.environ):
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def _auth_strategy(settings: Settings) -> AuthStrategy:
    if settings.keystone_url:
        from strato.api.keystone import KeystoneAuth

        return KeystoneAuth(settings.keystone_url, username=settings.keystone_user or "",
                            password=settings.keystone_password or "",
                            project=settings.keystone_project,
                            domain=settings.keystone_domain, admin_token=settings.auth_token,
                            cache_seconds=settings.token_cache_seconds)
    return TokenAuth(settings.auth_token) if settings.auth_token else NoAuth()


def _worded(e: Any) -> str:
    """One request validation error; a body that is no JSON document says where
    and why (FastAPI's own words are `body.40: JSON decode error`)."""
    loc = tuple(e.get("loc", ()))
    if e.get("type") == "json_invalid" and len(loc) == 2 and isinstance(loc[1], int):
        why = (e.get("ctx") or {}).get("error") or "not JSON"
        return f"Malformed JSON: {why} (at character {loc[1]} of the body)"
    return f"{'.'.join(str(p) for p in loc)}: {e.get('msg')}"


def create_app(settings: Settings, *, db: Database | None = None,
               auth: AuthStrategy | None = None, migrate: bool = True,
               transport: Transport | None = None) -> FastAPI:
    """Build the app for one zone. `db` may be passed in (tests share one);
    `transport` (default: HTTP) is how this zone calls its children and parent."""
    database = db or Database(settings.db_url, sqlite_synchronous=settings.sqlite_synchronous)
    tls = Tls.of(settings.tls_cert, settings.tls_key, settings.tls_ca)
    zone_transport: Transport = transport or HttpTransport(
        ssl_context=tls.client_context() if tls is not None else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if migrate:
            upgrade(database)
        # Load the index and the hosts' metadata now, not on the first
        # request, then give back what the loads left resident (before
        # serving: it stalls the allocator).
        await run_in_threadpool(engine.refresh)
        await run_in_threadpool(tree.local.summary)
        await run_in_threadpool(trim_heap)
        # Before any request records a part: what the ledger lost, if anything.
        await tree.open_sweep()
        await tree.learn_placed()
        await tree.note_orphans()
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(tree.run_refresher()),
                                          asyncio.create_task(tree.run_recovery())]
        if settings.parent_url:
            identity = await run_in_threadpool(_identity, database)
            app.state.registration = asyncio.create_task(
                keep_registered(settings, zone_transport, app.state.parent_contact,
                                identity=identity, rejoin_after=settings.rejoin_after))
            tasks.append(app.state.registration)
        yield
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await zone_transport.aclose()
        engine.close()
        if db is None:
            database.dispose()

    # redirect_slashes=False: Placement answers a path with a trailing slash
    # 404; a redirect would send the method and body on to a URL built from
    # the client's Host header.
    app = FastAPI(title="Strato", version=strato.__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, redirect_slashes=False, **_telemetry_off(),
                  dependencies=[Depends(_json_accepted)],
                  description="Distributed, hierarchical resource scheduler and placement "
                              "service with an OpenStack Placement compatible API.")
    app.state.db = database
    app.state.settings = settings
    # This process on the paths of zone-to-zone calls (api/middleware.py):
    # a call that comes back to it went round a cycle in the tree.
    app.state.zone_id = secrets.token_hex(8)
    engine = Engine(database, EngineConfig.from_env(
        weigher=settings.weigher, class_weights=settings.class_weights,
        randomize=settings.randomize_candidates, max_candidates=settings.max_candidates,
        max_combinations=settings.max_combinations))
    app.state.engine = engine
    app.state.scheduler = LocalScheduler(engine, zone=settings.zone_name,
                                         stale_after=settings.stale_after,
                                         zone_tags=tuple(settings.zone_tags),
                                         location_prefix=settings.location_prefix,
                                         plan_concurrency=settings.schedule_concurrency)
    tree = ZoneTree(db=database, local=app.state.scheduler, transport=zone_transport,
                    zone_id=app.state.zone_id,
                    config=TreeConfig(name=settings.zone_name,
                                      location_prefix=settings.location_prefix,
                                      tags=tuple(settings.zone_tags),
                                      summary_interval=settings.summary_interval,
                                      child_timeout=settings.child_timeout,
                                      request_timeout=settings.request_timeout,
                                      hold_ttl=settings.hold_ttl,
                                      request_retention=settings.request_retention,
                                      schedule_concurrency=settings.schedule_concurrency,
                                      ledger_commit=settings.ledger_commit))
    app.state.tree = tree
    app.state.policy = PolicyMode(settings.policy)
    app.state.policy_file = (PolicyFile(settings.policy_file, app.state.policy)
                             if settings.policy_file else None)
    app.state.metrics = Metrics(tree)
    # The parts report their work to the metrics (strato/observe.py).
    for part in (database, engine, app.state.scheduler, tree):
        part.observer = app.state.metrics
    app.state.recent = Recent()
    app.state.registration = None
    app.state.parent_contact = ParentContact()

    @app.exception_handler(errors.StratoError)
    async def _strato_error(request: Request, exc: errors.StratoError) -> Response:
        return strato_error_response(exc, _rid(request), accept=request.headers.get("accept"))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            detail = "The resource could not be found."
        elif exc.status_code == 405:
            # Placement's words, and every method the path takes (Starlette
            # names only the first route that matched the path).
            detail = f"The method {request.method} is not allowed for this resource."
            methods = _allowed(app, request)
            if methods:
                headers = {k: v for k, v in headers.items() if k.lower() != "allow"}
                headers["allow"] = ", ".join(methods)
        return error_response(exc.status_code, _TITLES.get(exc.status_code, detail), detail,
                              errors.DEFAULT, _rid(request), headers,
                              accept=request.headers.get("accept"))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        errs = exc.errors()
        parts = [_worded(e) for e in errs[:MAX_DESCRIBED]]
        return error_response(400, "Bad Request",
                              "; ".join(parts) + more_errors(len(errs), len(parts)), errors.DEFAULT,
                              _rid(request))

    @app.exception_handler(DataError)
    async def _data_error(request: Request, exc: DataError) -> Response:
        # The database refused a value (a NUL byte, an out-of-range integer)
        # that validation let through: still the client's input, never a 500.
        return error_response(400, "Bad Request",
                              f"invalid value in request: {type(exc.orig).__name__}",
                              errors.DEFAULT, _rid(request))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client went away (or was cut off: api/server.py's body timeout)
        # before its body arrived: nothing was done, and nobody to answer.
        log.info("client disconnected before its body on %s %s", request.method,
                 request.url.path)
        return error_response(408, "Request Timeout", "the request body did not arrive",
                              errors.DEFAULT, _rid(request))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        rid = _rid(request)
        # Answered outside the middleware that adds the header to every other answer.
        return error_response(500, "Internal Server Error",
                              f"unexpected error: {type(exc).__name__}", errors.DEFAULT,
                              rid, {"x-openstack-request-id": rid} if rid else None)

    for router in ROUTERS:
        app.include_router(router)
    openapi.install(app)
    # /docs without a CDN (api/routes/ui.py serves its page).
    app.mount(ui.DOCS_STATIC, StaticFiles(directory=ui.docs_assets()), name="docs-static")

    strategy = auth or _auth_strategy(settings)
    if settings.registration_token or settings.link_token:
        strategy = WithZoneTokens(strategy, registration=settings.registration_token,
                                  link=settings.link_token)
    # Runs inside StratoMiddleware: the middleware added last is the outermost.
    app.add_middleware(FastCandidates)
    app.add_middleware(ProvidersBelow, state=app.state)
    app.add_middleware(FastSchedule, state=app.state)
    app.add_middleware(StratoJson)
    app.add_middleware(PolicyFirst)  # before anything reads a /strato/v1 body
    app.add_middleware(StratoMiddleware, auth=strategy,
                       max_body_bytes=settings.max_body_bytes, zone_id=app.state.zone_id,
                       zone_name=settings.zone_name, contact=app.state.parent_contact)
    if settings.audit_log:
        # Around everything that answers (authentication's refusals included);
        # the caller and request id are read from the scope it filled in.
        app.add_middleware(AuditLog, destination=settings.audit_log, zone=settings.zone_name)
    app.add_middleware(HttpMetrics, metrics=app.state.metrics)
    app.add_middleware(TraceMiddleware, zone=settings.zone_name)
    if settings.cors_allowed_origins:
        app.add_middleware(CorsMiddleware, policy=CorsPolicy(
            settings.cors_allowed_origins, settings.cors_allow_headers))
    return app
