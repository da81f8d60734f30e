"""JSON responses (orjson) and Placement's error body."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import orjson
from starlette.responses import Response

from strato.model import errors

REQUEST_ID_KEY = "strato.request_id"


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers=headers)


def error_body(status: int, title: str, detail: str, code: str, request_id: str | None
               ) -> dict[str, Any]:
    return {"errors": [{"status": status, "title": title, "detail": detail, "code": code,
                        "request_id": request_id}]}


def error_response(status: int, title: str, detail: str, code: str, request_id: str | None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return json_response(error_body(status, title, detail, code, request_id), status, headers)


def strato_error_response(exc: errors.StratoError, request_id: str | None) -> JSONResponse:
    """A StratoError as Placement's error body; a 503 says when to retry, and a
    schedule error carries its explanation beside `errors`."""
    body = error_body(exc.status, exc.title, exc.detail, exc.code, request_id)
    explain = getattr(exc, "explain", None)
    if explain is not None:
        body["explain"] = explain
    headers = None
    if isinstance(exc, errors.ServiceUnavailable):
        headers = {"retry-after": str(max(1, round(exc.retry_after)))}
    return json_response(body, exc.status, headers)


def http_date(when: datetime | None) -> str:
    when = when or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return format_datetime(when, usegmt=True)


def cache_headers(last_modified: datetime | None) -> dict[str, str]:
    """Headers Placement adds to GETs from microversion 1.15."""
    return {"last-modified": http_date(last_modified), "cache-control": "no-cache"}
