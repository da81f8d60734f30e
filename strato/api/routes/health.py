"""Health and metrics: /healthz, /readyz, /metrics (cheap, no token needed).

* ``GET /healthz``: the process answers (no database access).
* ``GET /readyz``: 200 when the zone can serve: database reachable, schema at
  the code's revision, in-memory index loaded, and (with ``--parent``) not
  refused by its parent; 503 with each check's state otherwise.
* ``GET /metrics``: Prometheus text format (strato/api/metrics.py).
"""

from __future__ import annotations

import asyncio
import hmac
import os
from functools import lru_cache
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

import strato
from strato.api.metrics import CONTENT_TYPE, Metrics
from strato.api.responses import json_response
from strato.store import migrate

router = APIRouter(tags=["health"])


@lru_cache(maxsize=1)
def _head() -> str:
    return migrate.head_revision()
DB_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz(request: Request) -> Response:
    """The process answers."""
    return json_response({"status": "ok", "zone": request.app.state.settings.zone_name,
                          "version": strato.__version__, "pid": os.getpid()})


def _schema(request: Request) -> dict[str, Any]:
    db = request.app.state.db
    with db.read() as conn:
        conn.exec_driver_sql("SELECT 1")
    current = migrate.current_revision(db)
    head = _head()
    return {"database": {"ok": True},
            "schema": {"ok": current == head, "revision": current, "expected": head}}


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Whether this zone can serve requests now, and why not."""
    state = request.app.state
    checks: dict[str, Any]
    try:
        checks = await asyncio.wait_for(run_in_threadpool(_schema, request), DB_TIMEOUT_S)
    except TimeoutError:
        checks = {"database": {"ok": False, "error": f"no answer in {DB_TIMEOUT_S:g}s"},
                  "schema": {"ok": False, "error": "database not reachable"}}
    except Exception as exc:  # any driver error: not ready, and why
        checks = {"database": {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]},
                  "schema": {"ok": False, "error": "database not reachable"}}
    checks["index"] = {"ok": bool(state.engine.loaded),
                       "providers": int(state.engine.index.size)}
    contact = getattr(state, "parent_contact", None)
    if state.settings.parent_url and contact is not None:
        # Refused (a wrong token, a name another zone holds) needs an
        # operator; removed by one at the parent, this zone serves alone.
        checks["parent"] = {"ok": contact.state not in ("refused", "invalid"),
                            "state": contact.state,
                            "url": state.settings.parent_url}
    ready = all(c["ok"] for c in checks.values())
    return json_response({"status": "ready" if ready else "not ready",
                          "zone": state.settings.zone_name, "checks": checks},
                         200 if ready else 503)


def _metrics_token_ok(request: Request, want: str) -> bool:
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else \
        request.headers.get("x-auth-token", "")
    return hmac.compare_digest(given.encode("utf-8", "replace"), want.encode("utf-8"))


@router.get("/metrics", response_class=PlainTextResponse, responses={
    200: {"description": "Prometheus text format", "content": {CONTENT_TYPE.split(";")[0]: {}}},
    401: {"description": "With --metrics-token: the token is missing or wrong."}})
async def metrics(request: Request) -> Response:
    want = request.app.state.settings.metrics_token
    if want and not _metrics_token_ok(request, want):
        return json_response({"errors": [{
            "status": 401, "title": "Unauthorized", "code": "placement.undefined_code",
            "detail": "GET /metrics needs the metrics token (Authorization: Bearer TOKEN)"}]},
            401, headers={"www-authenticate": 'Bearer realm="strato metrics"'})
    m: Metrics = request.app.state.metrics
    body = await run_in_threadpool(m.exposition)
    return Response(body, media_type=CONTENT_TYPE)
