"""How a zone talks to another zone: one interface, two implementations.

* ``HttpTransport``: per-call timeouts; ``http://`` zones through the lean
  keep-alive client of ``zone/wire.py``, anything else through httpx.
* ``InProcessTransport``: the other zone's ASGI app called directly (no
  socket, no HTTP client), for tests and the simulator: hundreds of zones in one
  process, through exactly the same routes and serialisation as over HTTP.

Both answer ``Reply(status, body)`` or raise ``Unreachable`` (connection
refused, timeout, protocol error): the caller marks the zone unhealthy and
goes on elsewhere. ``Malformed``, a kind of ``Unreachable``, says the zone
did answer, but with something no zone says: a body larger than
``max_reply_bytes`` (refused before it is read, or cut off at the limit) or
a successful answer that is not JSON. Its answer is discarded; the caller
marks the zone faulty. ``timeout`` is the deadline of the whole call, from
connecting to the last byte of the answer, whatever the path.

``Unreachable.maybe_delivered`` tells the two kinds of failure apart: a
refused connection never reached the zone, but a timeout or a connection
broken after the request was sent (or an answer discarded as malformed) may
hide a claim the zone committed. A caller that goes elsewhere after such a failure must record it
as in doubt and cancel it at the zone when the zone answers again.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol
from urllib.parse import unquote

import httpx
import orjson

from strato import logs, trace
from strato.zone import wire
from strato.zone.protocol import (
    COUNTED_HEADER,
    PATH_HEADER,
    ZONE_PROTOCOL,
    ZONE_URL_SCHEMES,
    is_loop,
    zone_url,
)

# Zone-to-zone messages carry the protocol version, so mixed-version trees can
# tell. Answers are asked for uncompressed: their size is what is bounded.
HEADERS = {"openstack-api-version": "placement 1.39", "x-strato-zone-protocol": ZONE_PROTOCOL,
           "content-type": "application/json", "accept-encoding": "identity"}
# The largest answer a zone accepts from another (a summary of a large subtree
# or an answer for a thousand consumers is well under 1 MiB).
MAX_REPLY_BYTES = wire.MAX_BODY_BYTES
# The zones the request being answered passed through, this one last (set by
# the API's middleware): sent on, as PATH_HEADER, with every call it makes to
# another zone. Empty outside a request: a zone's own calls to its children
# (the background refresh, probes) start the path with its id
# (ObservedTransport); registration with the parent, a call up, sends none.
ZONE_PATH: ContextVar[tuple[str, ...]] = ContextVar("strato_zone_path", default=())
# Set by `unrouted`: calls carry no path at all.
_UNROUTED: ContextVar[bool] = ContextVar("strato_unrouted", default=False)
# Zones counted elsewhere (protocol.COUNTED_HEADER), for the call being made
# (set per child call: zone/subtree.py `usages`).
COUNTED: ContextVar[frozenset[str]] = ContextVar("strato_counted_zones",
                                                 default=frozenset())
# Distinct URLs whose syntax HttpTransport remembers having checked.
_CHECKED_URLS = 1024


@contextmanager
def unrouted() -> Iterator[None]:
    """Calls made inside carry no zone path, as a call up the tree does: a
    look at a zone that is not (yet) below this one, which must not make the
    zones it asks take this one for their caller (registration's look at a
    would-be child, zone/tree.py: `closes_cycle`)."""
    path, flag = ZONE_PATH.set(()), _UNROUTED.set(True)
    try:
        yield
    finally:
        _UNROUTED.reset(flag)
        ZONE_PATH.reset(path)


class Unreachable(Exception):
    """The zone did not answer (refused, timed out, broke the connection)."""

    def __init__(self, url: str, why: str, *, maybe_delivered: bool = False,
                 timed_out: bool = False) -> None:
        super().__init__(f"{url}: {why}")
        self.url = url
        self.why = why
        # True when the zone may have received (and acted on) the request.
        self.maybe_delivered = maybe_delivered
        # True when the call's deadline passed (rather than a refused or
        # broken connection).
        self.timed_out = timed_out


class Malformed(Unreachable):
    """The zone answered, but not as a zone does (too large, not JSON)."""

    def __init__(self, url: str, why: str) -> None:
        # The request arrived and may have been acted on.
        super().__init__(url, f"faulty: {why}", maybe_delivered=True)


# The headers of a zone's answer a caller may pass on (the rest are dropped):
# Placement's cache headers too (from microversion 1.15 a provider's GETs and
# writes carry them), so a provider route answered below keeps them.
KEPT_HEADERS = ("x-strato-incomplete", "retry-after", "location", "cache-control",
                "last-modified")
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any
    # Lower-case names; only KEPT_HEADERS.
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)


def _kept(headers: Mapping[str, str]) -> Mapping[str, str]:
    found = {k: headers[k] for k in KEPT_HEADERS if k in headers}
    return found or _NO_HEADERS


class Transport(Protocol):
    @property
    def schemes(self) -> frozenset[str]:
        """The URL schemes this transport can call zones at."""
        ...

    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float, version: str | None = None
                   ) -> Reply: ...

    async def aclose(self) -> None: ...


def _headers(token: str | None, version: str | None = None) -> dict[str, str]:
    """The zone protocol's headers; `version`: a Placement microversion other
    than the protocol's (a client's call passed on to a child)."""
    out = {**HEADERS, "x-auth-token": token or "admin"}
    if version is not None:
        out["openstack-api-version"] = f"placement {version}"
    path = ZONE_PATH.get()
    if path:
        out[PATH_HEADER] = ",".join(path)
    counted = COUNTED.get()
    if counted:
        out[COUNTED_HEADER] = ",".join(sorted(counted))
    # The request's global id goes on: the caller's, or this zone's own id when
    # the caller sent none, so every zone's log lines of one request share it.
    first = logs.GLOBAL_REQUEST_ID.get()
    first = first if first != "-" else logs.REQUEST_ID.get()
    if first != "-":
        out["x-openstack-request-id"] = first
    trace.inject(out)  # the caller's trace goes on (W3C traceparent), when tracing
    return out


def _reply(url: str, status: int, content: bytes,
           headers: Mapping[str, str] = _NO_HEADERS) -> Reply:
    """Decode a zone's answer. A successful answer must be JSON (or empty); an
    error's body is only informative: one that is not JSON (a proxy's HTML
    page) is kept as its size only. Of its headers, KEPT_HEADERS."""
    kept = _kept(headers) if headers else _NO_HEADERS
    if not content:
        return Reply(status, None, kept)
    try:
        return Reply(status, orjson.loads(content), kept)
    except orjson.JSONDecodeError:
        if 200 <= status < 300:
            raise Malformed(url, f"answered {status} with a body that is not JSON") from None
        # Not its text: a registered URL may point at a service that is not a
        # zone, and what it says must not be read back through our API.
        return Reply(status, {"raw": f"{len(content)} bytes that are not JSON"}, kept)


class _Traced:
    """A transport's `call`: its `_call` in a span (when tracing)."""

    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float, version: str | None = None) -> Reply:
        with trace.zone_call(url, method, path):
            return await self._call(url, method, path, token=token, json=json,
                                    timeout=timeout, version=version)

    async def _call(self, url: str, method: str, path: str, *, token: str | None,
                    json: Any = None, timeout: float, version: str | None = None) -> Reply:
        raise NotImplementedError


class HttpTransport(_Traced):
    schemes = frozenset({"http", "https"})

    def __init__(self, max_connections: int = 64, *, lean: bool | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        # https calls verify the other zone (and show ours, with mutual TLS:
        # strato/tls.py); plain http ones go through the lean client below.
        self._client = httpx.AsyncClient(
            verify=ssl_context if ssl_context is not None else True,
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))
        if lean is None:
            # STRATO_ZONE_HTTP=httpx sends every zone call through httpx.
            lean = os.environ.get("STRATO_ZONE_HTTP", "lean") != "httpx"
        self._wire = wire.WireClient() if lean else None
        self.max_reply_bytes = max_reply_bytes
        # URL -> why no zone can be called there (None: it can be).
        self._checked: dict[str, str | None] = {}

    def _unusable(self, url: str) -> str | None:
        """Why `url` is no address to call (a child stored by an older
        version, say): such a zone is unreachable, never a crash."""
        if url not in self._checked:
            if len(self._checked) >= _CHECKED_URLS:
                self._checked.clear()
            try:
                zone_url(url, self.schemes)
                self._checked[url] = None
            except ValueError as exc:
                self._checked[url] = f"not a URL a zone can be called at: {exc}"
        return self._checked[url]

    async def _call(self, url: str, method: str, path: str, *, token: str | None,
                    json: Any = None, timeout: float, version: str | None = None) -> Reply:
        unusable = self._unusable(url)
        if unusable is not None:
            raise Unreachable(url, unusable)
        if self._wire is not None and url.startswith("http://"):
            return await self._lean(url, method, path, token, json, timeout, version)
        limit = self.max_reply_bytes
        try:
            # httpx's timeouts bound each read, not the call: a zone that
            # trickles its answer would hold us for ever. The deadline is ours.
            async with asyncio.timeout(timeout):
                async with self._client.stream(
                        method, url.rstrip("/") + path, headers=_headers(token, version),
                        content=orjson.dumps(json) if json is not None else None,
                        timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0))) as resp:
                    status = resp.status_code
                    content = await _read_capped(resp, limit)
                    head_in = {k: resp.headers[k] for k in KEPT_HEADERS if k in resp.headers}
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Never connected: the zone cannot have seen the request.
            raise Unreachable(url, f"{type(exc).__name__}: {exc}") from None
        except (TimeoutError, httpx.TimeoutException):
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except wire.TooLarge as exc:
            raise Malformed(url, str(exc)) from None
        except httpx.HTTPError as exc:
            raise Unreachable(url, f"{type(exc).__name__}: {exc}",
                              maybe_delivered=True) from None
        return _reply(url, status, content, head_in)

    async def _lean(self, url: str, method: str, path: str, token: str | None, json: Any,
                    timeout: float, version: str | None = None) -> Reply:
        assert self._wire is not None
        try:
            status, content, head_in = await self._wire.request(
                url, method, path, _headers(token, version),
                orjson.dumps(json) if json is not None else None,
                timeout=timeout, connect_timeout=min(timeout, 2.0),
                max_body=self.max_reply_bytes)
        except wire.NotSent as exc:
            raise Unreachable(url, str(exc)) from None
        except TimeoutError:
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except wire.TooLarge as exc:
            raise Malformed(url, str(exc)) from None
        except wire.Broken as exc:
            raise Unreachable(url, str(exc), maybe_delivered=True) from None
        return _reply(url, status, content, head_in)

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._wire is not None:
            await self._wire.aclose()


async def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    """The raw body of a streamed answer, refused once it passes `limit`."""
    declared = resp.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise wire.TooLarge(limit, int(declared))
    if resp.headers.get("content-encoding", "identity").lower() != "identity":
        # Asked for identity: a compressed answer could inflate past any limit.
        raise httpx.DecodingError("compressed answer (asked for identity)")
    parts = []
    total = 0
    async for chunk in resp.aiter_raw():
        total += len(chunk)
        if total > limit:
            raise wire.TooLarge(limit)
        parts.append(chunk)
    return b"".join(parts)


class _AppFailed(Exception):
    """The in-process app returned without starting an answer."""


async def _asgi_call(app: Any, method: str, path: str, headers: dict[str, str],
                     body: bytes | None, limit: int
                     ) -> tuple[int, bytes, dict[str, str]]:
    """(status, body) of one HTTP request to an ASGI app, called directly: the
    app sees what a server would give it, and its answer is refused once it
    passes `limit` (wire.TooLarge). httpx's ASGITransport does the same job,
    at several times the cost (URL parsing, cookies, its models) on every
    call of an in-process tree."""
    raw, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": method, "scheme": "http",
        "path": unquote(raw), "raw_path": raw.encode(), "query_string": query.encode(),
        "root_path": "", "client": ("127.0.0.1", 123), "server": ("zone", 80),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        + [(b"host", b"zone"), (b"content-length", str(len(body or b"")).encode())],
    }
    pending = [{"type": "http.request", "body": body or b"", "more_body": False}]
    status = 0
    parts: list[bytes] = []
    size = 0
    done = asyncio.Event()
    head_in: dict[str, str] = {}

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await done.wait()  # nothing more to read: as a server, until the answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", []):
                if (name.lower() == b"content-length" and value.strip().isdigit()
                        and int(value) > limit):
                    raise wire.TooLarge(limit, int(value))
                head_in[name.decode("latin-1").lower()] = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise wire.TooLarge(limit)
            parts.append(chunk)
            if not message.get("more_body", False):
                done.set()
    try:
        await app(scope, receive, send)
    finally:
        done.set()
    if not status:
        raise _AppFailed("the zone's app returned without an answer")
    return status, b"".join(parts), head_in


class InProcessTransport(_Traced):
    """Zones registered by URL (e.g. ``inproc://dfw``) and called in-process."""

    # Any zone URL: one not registered here is a zone that does not answer.
    schemes = frozenset(ZONE_URL_SCHEMES)

    def __init__(self, *, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self.max_reply_bytes = max_reply_bytes
        self._apps: dict[str, Any] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self.down: set[str] = set()
        # Fault injection: calls to these zones ("inproc://x") or to one route of
        # them ("inproc://x /strato/v1/claims") run, then their answer is lost
        # (as when a zone dies between its commit and its reply).
        self.lose_answers: set[str] = set()
        # Fault injection: calls wait this many seconds before the zone sees
        # them (a paused or partitioned zone that resumes later). As over a
        # network, a caller that gives up does not stop the call.
        self.delays: dict[str, float] = {}

    def register(self, url: str, app: Any) -> None:
        """Serve `url` with `app` (again: its next call goes to the new app)."""
        self._apps[url.rstrip("/")] = app

    def _matches(self, faults: Any, key: str, path: str) -> bool:
        return key in faults or f"{key} {path.split('?')[0]}" in faults

    async def _call(self, url: str, method: str, path: str, *, token: str | None,
                    json: Any = None, timeout: float, version: str | None = None) -> Reply:
        key = url.rstrip("/")
        if key in self.down or key not in self._apps:
            raise Unreachable(url, "connection refused")
        app = self._apps[key]
        delay = self.delays.get(f"{key} {path.split('?')[0]}", self.delays.get(key, 0.0))
        headers = _headers(token, version)
        content = orjson.dumps(json) if json is not None else None

        async def deliver() -> tuple[int, bytes, dict[str, str]]:
            if delay:
                await asyncio.sleep(delay)
            return await _asgi_call(app, method, path, headers, content,
                                    self.max_reply_bytes)
        # Its own task: as over a network, a caller that gives up (its
        # deadline) does not stop the call.
        task = asyncio.ensure_future(deliver())
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            # No sockets in-process: enforce the deadline around the whole call.
            async with asyncio.timeout(timeout):
                status, body, head_in = await asyncio.shield(task)
        except TimeoutError:
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except wire.TooLarge as exc:
            raise Malformed(url, str(exc)) from None
        except Exception as exc:
            # The other zone's app failed while answering: to this zone, a
            # broken connection.
            raise Unreachable(url, f"{type(exc).__name__}: {exc}"[:300],
                              maybe_delivered=True) from None
        if self._matches(self.lose_answers, key, path):
            raise Unreachable(url, "connection reset after the request was sent",
                              maybe_delivered=True)
        return _reply(url, status, body, head_in)

    async def settle(self) -> None:
        """Wait for calls whose callers gave up (a resumed zone finishing them)."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def aclose(self) -> None:
        for t in list(self._inflight):
            t.cancel()
        await asyncio.gather(*list(self._inflight), return_exceptions=True)


class ObservedTransport:
    """A zone's calls to its children, each timed and told to `report`
    (url, seconds, outcome: ok, error for a 5xx answer, loop for a 508
    strato.zone_loop, unreachable, malformed).
    A call made outside a request carries the path ``zone_id`` (this zone):
    in a cycle, the zone it comes back to can tell."""

    def __init__(self, inner: Transport, report: Callable[[str, float, str], None],
                 zone_id: str | None = None) -> None:
        self.inner = inner
        self.report = report
        self.zone_id = zone_id

    @property
    def schemes(self) -> frozenset[str]:
        return self.inner.schemes

    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float, version: str | None = None) -> Reply:
        start = time.perf_counter()
        outcome = "unreachable"
        started = (ZONE_PATH.set((self.zone_id,))
                   if self.zone_id and not ZONE_PATH.get() and not _UNROUTED.get() else None)
        try:
            reply = await self.inner.call(url, method, path, token=token, json=json,
                                          timeout=timeout, version=version)
            outcome = ("loop" if is_loop(reply.status, reply.body)
                       else "error" if reply.status >= 500 else "ok")
            return reply
        except Malformed:
            outcome = "malformed"
            raise
        finally:
            if started is not None:
                ZONE_PATH.reset(started)
            self.report(url, time.perf_counter() - start, outcome)

    async def aclose(self) -> None:
        await self.inner.aclose()
