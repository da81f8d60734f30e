"""The one ASGI middleware in front of every route.

Per request, before any handler: a request id, the zones the request passed
through (a call back into one of them is refused: the tree has a cycle), the
microversion, the authentication context and the body size limit. On the way
out it adds the version and request-id headers to every answer, errors
included.
"""

from __future__ import annotations

import base64
import logging
import uuid
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strato import logs
from strato.api import microversion
from strato.api.auth import CONTEXT_KEY, AuthStrategy
from strato.api.responses import (
    ERROR_CODES,
    REQUEST_ID_KEY,
    accept_ranges,
    error_response,
    valid_accept,
)
from strato.model import errors
from strato.zone.protocol import MAX_PATH, PATH_HEADER
from strato.zone.registration import ParentContact
from strato.zone.transport import COUNTED, ZONE_PATH

log = logging.getLogger("strato.api")

# Routes anyone may call: the version document and the API description.
PUBLIC_PATHS = frozenset({"/", "/openapi.json", "/docs", "/healthz", "/readyz", "/metrics"})
# Swagger UI's own files, served for /docs (api/routes/ui.py).
PUBLIC_PREFIX = "/docs/static/"
# Pages a browser opens: it sends the token as HTTP Basic's password, and is
# asked for it on a 401 (api/routes/ui.py).
BROWSER_PATHS = frozenset({"/ui"})
STRATO_PREFIX = "/strato/"
# Sent on every zone-to-zone call (strato/zone/transport.py HEADERS).
ZONE_PROTOCOL_HEADER = "x-strato-zone-protocol"
CHILDREN_PATH = "/strato/v1/children"


def basic_token(headers: dict[str, str]) -> None:
    """`Authorization: Basic` (any user, the token as password) as X-Auth-Token,
    unless the request carries one already."""
    auth = headers.get("authorization", "")
    if "x-auth-token" in headers or auth[:6].lower() != "basic ":
        return
    try:
        decoded = base64.b64decode(auth[6:].strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return  # not Basic credentials: no token, so a 401
    _, sep, password = decoded.partition(":")
    if sep and password:
        headers["x-auth-token"] = password


def accepts_json(accept: str | None) -> bool:
    """Whether an Accept header allows application/json (as Placement checks it:
    application/json, application/* or */* with a q above 0; no header, or one
    out of RFC 7231's grammar, which webob disregards: yes)."""
    if not accept or not accept.strip() or not valid_accept(accept):
        return True
    return any(q > 0 and media in ("application/json", "application/*", "*/*")
               for media, q in accept_ranges(accept))


def zone_path(headers: dict[str, str], zone_id: str, zone_name: str) -> tuple[str, ...]:
    """The zones a call passed through (PATH_HEADER), this one added last.
    LoopDetected when this zone is among them already, or when they are more
    than a tree may be deep: the zone tree has a cycle, and asking the
    children again would only go round it."""
    raw = headers.get(PATH_HEADER)
    if not raw:
        return (zone_id,)
    seen = tuple(p.strip() for p in raw.split(",", MAX_PATH + 1))
    if zone_id in seen:
        raise errors.LoopDetected(
            f"this call came back to zone {zone_name!r} after {len(seen)} zone(s) "
            f"({PATH_HEADER}): the zone tree has a cycle; remove the child registration "
            "that leads back here (DELETE /strato/v1/children/{name})")
    if len(seen) > MAX_PATH:
        raise errors.LoopDetected(
            f"this call passed through more than {MAX_PATH} zones ({PATH_HEADER}): the zone "
            "tree has a cycle or is deeper than a tree may be")
    return (*seen, zone_id)


class StratoMiddleware:
    def __init__(self, app: ASGIApp, auth: AuthStrategy, max_body_bytes: int,
                 zone_id: str, zone_name: str, contact: ParentContact | None = None) -> None:
        self.app = app
        # When a zone above last called this one (zone/registration.py).
        self.contact = contact
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        # This process's id on the paths of zone-to-zone calls (PATH_HEADER).
        self.zone_id = zone_id
        self.zone_name = zone_name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The zones this request passed through, for the calls it makes to
        # other zones; none after it (an in-process caller's context), nor
        # the zones its caller counted elsewhere (only GET /usages says).
        token, counted = ZONE_PATH.set(()), COUNTED.set(frozenset())
        try:
            await self._serve(scope, receive, send)
        finally:
            COUNTED.reset(counted)
            ZONE_PATH.reset(token)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = f"req-{uuid.uuid4()}"
        scope[REQUEST_ID_KEY] = request_id
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        # Every log line of this request names it (strato/logs.py).
        logs.REQUEST_ID.set(request_id)
        logs.GLOBAL_REQUEST_ID.set(headers.get("x-openstack-request-id", "-")[:64])
        out_headers: list[tuple[bytes, bytes]] = [
            (b"x-openstack-request-id", request_id.encode())]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [_absolute(scope, headers, k, v)
                                      for k, v in message.get("headers", [])] + out_headers
            await send(message)

        try:
            # First: a call that went round a cycle is refused whatever it
            # carries (the token it has may be for another zone).
            ZONE_PATH.set(zone_path(headers, self.zone_id, self.zone_name))
            # Strato's own API (/strato/...) and zone-to-zone calls always say
            # their code (a client tells strato.zone_unavailable from a full
            # cloud by it, with or without a version header); Placement's
            # routes from microversion 1.23 on, as Placement's do.
            always = ZONE_PROTOCOL_HEADER in headers or scope["path"].startswith(STRATO_PREFIX)
            ERROR_CODES.set(always)
            version = microversion.parse(headers)
            ERROR_CODES.set(always or version >= microversion.V1_23)
            scope[microversion.SCOPE_KEY] = version
            out_headers += [
                (b"openstack-api-version", f"placement {version}".encode()),
                (b"vary", b"openstack-api-version"),
            ]
            path = scope["path"]
            if path in BROWSER_PATHS:
                basic_token(headers)
            if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIX):
                slow = getattr(self.auth, "authenticate_async", None)
                # A strategy that may ask another service (Keystone) does so
                # off the event loop.
                scope[CONTEXT_KEY] = (await slow(headers) if slow is not None
                                      else self.auth.authenticate(headers))
                if (self.contact is not None and PATH_HEADER in headers
                        and not (path == CHILDREN_PATH and scope["method"] == "POST")):
                    # A zone above called (not a child registering itself).
                    self.contact.hear()
            undecodable = undecodable_query(scope.get("query_string", b""))
            if undecodable is not None:
                raise errors.BadRequest(f"Invalid query string parameters: {undecodable}")
            nul = nul_parameter(scope.get("query_string", b""))
            if nul is not None:
                raise errors.BadRequest(
                    f"Invalid query string parameters: {nul!r} holds a NUL character, "
                    "which no stored text does")
            length = headers.get("content-length")
            if length is not None and not length.strip().isdigit():
                raise errors.BadRequest("content-length header must be an integer")
            if length is not None and int(length) > 0 and not headers.get("content-type"):
                raise errors.BadRequest("content-type header required when "
                                        "content-length > 0")
            if length is not None and int(length) > self.max_body_bytes:
                raise errors.PayloadTooLarge(
                    f"request body of {length} bytes exceeds the limit of "
                    f"{self.max_body_bytes} bytes")
        except errors.StratoError as exc:
            extra = None
            if isinstance(exc, errors.LoopDetected):
                log.warning("refused %s %s: %s", scope["method"], scope["path"], exc.detail)
            if exc.status == 401:
                extra = {"www-authenticate": 'Basic realm="strato", charset="UTF-8"'
                         if scope["path"] in BROWSER_PATHS else 'Keystone uri="local"'}
            resp = error_response(exc.status, exc.title, exc.detail, exc.code, request_id,
                                  extra, accept=headers.get("accept"),
                                  fields=exc.fields if isinstance(
                                      exc, errors.UnacceptableVersion) else None)
            await resp(scope, receive, send_with_headers)
            return

        if "content-length" not in headers and scope["method"] in ("POST", "PUT", "PATCH"):
            # A body without a length (chunked): read it here, up to the limit,
            # so that an oversize one is a 413 on every route (a route that
            # parses its body itself would otherwise make the error a 400 or
            # a 500), then hand it on. Memory: at most the limit.
            body = await _read_capped(receive, self.max_body_bytes)
            if body is None:
                big = errors.PayloadTooLarge(
                    f"request body exceeds the limit of {self.max_body_bytes} bytes")
                resp = error_response(big.status, big.title, big.detail, big.code, request_id,
                                      accept=headers.get("accept"))
                await resp(scope, receive, send_with_headers)
                return
            receive = replay_body(body, receive)
        await self.app(scope, self._limited(receive), send_with_headers)

    def _limited(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes

        async def wrapped() -> Message:
            nonlocal seen
            message: dict[str, Any] = dict(await receive())
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise errors.PayloadTooLarge(
                        f"request body exceeds the limit of {limit} bytes")
            return message

        return wrapped


def undecodable_query(query: bytes) -> str | None:
    """Why the query string, once %-decoded, is not UTF-8, or None. Placement
    (webob) answers such a query with a 400; decoded with replacement
    characters it would be a lookup of a name no one sent."""
    if b"%" not in query and query.isascii():
        return None
    try:
        unquote_to_bytes(query.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError as exc:
        return str(exc)
    return None


def nul_parameter(query: bytes) -> str | None:
    """The name of the first query parameter whose name or value holds a NUL
    character (%00), or None. PostgreSQL's text cannot hold one: a lookup was
    a 400 naming no parameter there, an empty answer on SQLite."""
    if b"%00" not in query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name
    return None


async def _read_capped(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it is longer than `limit`."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def read_body(receive: Receive) -> tuple[bytes, Message | None]:
    """The whole body, and None; or what came of it and the message that came
    before its end (a disconnect): for `replay_body`."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), None


def replay_body(body: bytes, receive: Receive, then: Message | None = None) -> Receive:
    """`receive` for an app that reads a body already read: `body`, then what
    the client sends next (its disconnect). `then`: a message that came before
    the body's end (a disconnect), given after `body` (which has more to come)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if then is not None:
        pending = [{"type": "http.request", "body": body, "more_body": True}, then]

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()  # the disconnect, when it comes
    return again


def _absolute(scope: Scope, headers: dict[str, str], key: bytes, value: bytes
              ) -> tuple[bytes, bytes]:
    """A relative Location made absolute with the request's scheme and host,
    as Placement (webob) answers it."""
    if key.lower() != b"location" or not value.startswith(b"/"):
        return key, value
    host = headers.get("host")
    if not host:
        server = scope.get("server")
        if not server:
            return key, value
        host = f"{server[0]}:{server[1]}"
    return key, f"{scope.get('scheme', 'http')}://{host}".encode("latin-1") + value
