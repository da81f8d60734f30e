"""JSON responses (orjson) and Placement's error body, in the format the client
asks for."""

from __future__ import annotations

import html
import re
from contextvars import ContextVar
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


# Whether this request's errors carry `code`: Placement's do from microversion
# 1.23 on, and not before (nor when the version header itself is refused).
# Zone-to-zone calls always get it: a zone tells a conflict from other errors by
# it, whatever version it forwards. Set per request by the middleware.
ERROR_CODES: ContextVar[bool] = ContextVar("error_codes", default=True)


def error_body(status: int, title: str, detail: str, code: str, request_id: str | None,
               fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """Placement's error body; `fields` adds members to the error (a 406 for the
    microversion names the range served)."""
    error: dict[str, Any] = {"status": status, "title": title, "detail": detail}
    if ERROR_CODES.get():
        error["code"] = code
    return {"errors": [{**error, "request_id": request_id, **(fields or {})}]}


# The formats webob offers for an error, in its order of preference on a tie
# (exc.WSGIHTTPException.generate_response); plain text when neither is acceptable.
_ERROR_FORMATS = ("text/html", "application/json")


def _quality(offer: str, ranges: list[tuple[str, float]]) -> float:
    """The q of `offer` under the most specific range that matches it."""
    kind = offer.split("/")[0]
    best: tuple[int, float] = (-1, 0.0)
    for media, q in ranges:
        rank = 2 if media == offer else 1 if media == f"{kind}/*" else 0 if media == "*/*" else -1
        if rank > best[0]:
            best = (rank, q)
    return best[1]


# RFC 7231's Accept grammar, as webob checks it (webob.acceptparse): Placement
# reads a header that does not match it as no header at all.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = r'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_OWS = r"[ \t]*"
_VALUE = f"(?:{_TOKEN}|{_QUOTED})"
_RANGE = (f"{_TOKEN}/{_TOKEN}(?:{_OWS};{_OWS}(?![qQ]=){_TOKEN}={_VALUE})*"
          f"(?:{_OWS};{_OWS}[qQ]=(?:0(?:\\.[0-9]{{0,3}})?|1(?:\\.0{{0,3}})?)"
          f"(?:{_OWS};{_OWS}{_TOKEN}(?:={_VALUE})?)*)?")
_ACCEPT = re.compile(f"^(?:$)|(?:(?:,|{_RANGE})(?:{_OWS},(?:{_OWS}{_RANGE})?)*)$")


def valid_accept(accept: str) -> bool:
    return _ACCEPT.match(accept) is not None


def accept_ranges(accept: str) -> list[tuple[str, float]]:
    """An Accept header's media ranges with their q (an unreadable q is 0)."""
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        media, *params = (x.strip() for x in part.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media:
            ranges.append((media.lower(), q))
    return ranges


def error_media_type(accept: str | None) -> str:
    """The format of an error body, chosen as Placement (webob) chooses it: JSON when
    `Accept` is absent or `*/*`, else the acceptable one of HTML and JSON with the
    highest q (in that order on a tie); plain text when neither is."""
    if not accept or accept.strip() == "*/*":
        return "application/json"
    if not valid_accept(accept):
        return "text/html"  # webob: every format acceptable, its first one
    ranges = accept_ranges(accept)
    scored = [(_quality(offer, ranges), -i, offer) for i, offer in enumerate(_ERROR_FORMATS)]
    q, _, offer = max(scored)
    return offer if q > 0 else "text/plain"


def error_response(status: int, title: str, detail: str, code: str, request_id: str | None,
                   headers: dict[str, str] | None = None, accept: str | None = None,
                   fields: dict[str, Any] | None = None) -> Response:
    """Placement's error: its JSON body, or webob's HTML or plain text page when the
    request's `Accept` prefers one of those."""
    media = error_media_type(accept)
    if media == "application/json":
        return json_response(error_body(status, title, detail, code, request_id, fields),
                             status, headers)
    line = f"{status} {title}"
    if media == "text/html":
        text = (f"<html>\n <head>\n  <title>{html.escape(line)}</title>\n </head>\n <body>\n"
                f"  <h1>{html.escape(line)}</h1>\n  {html.escape(detail)}<br /><br />\n\n\n"
                " </body>\n</html>")
    else:
        text = f"{line}\n\n{detail}\n\n"
    return Response(text, status_code=status, headers=headers, media_type=media)


def strato_error_response(exc: errors.StratoError, request_id: str | None,
                          accept: str | None = None) -> Response:
    """A StratoError as Placement's error body (or page, as `accept` prefers); a
    503 says when to retry, and a schedule error carries its explanation beside
    `errors`."""
    headers = None
    if isinstance(exc, errors.ServiceUnavailable):
        headers = {"retry-after": str(max(1, round(exc.retry_after)))}
    if error_media_type(accept) != "application/json":
        return error_response(exc.status, exc.title, exc.detail, exc.code, request_id,
                              headers, accept)
    body = error_body(exc.status, exc.title, exc.detail, exc.code, request_id)
    explain = getattr(exc, "explain", None)
    if explain is not None:
        body["explain"] = explain
    if getattr(exc, "replayed", False):
        # The answer kept for the request id (a refusal too): a new id tries again.
        body["replayed"] = True
    return json_response(body, exc.status, headers)


def http_date(when: datetime | None) -> str:
    when = when or datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return format_datetime(when, usegmt=True)


def cache_headers(last_modified: datetime | None) -> dict[str, str]:
    """Headers Placement adds to GETs from microversion 1.15."""
    return {"last-modified": http_date(last_modified), "cache-control": "no-cache"}


class StatusOf:
    """`send` for a middleware that needs the status it answered with: it
    passes every message on, keeping the status (500 until one is sent)."""

    __slots__ = ("send", "status")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)
