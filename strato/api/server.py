"""The HTTP server's own limits: what a client may send before the app sees it.

uvicorn (with httptools) reads a request's head into memory without a limit,
waits for a slow head or body for ever, and keeps a connection that never
sends a byte. A hostile client then holds memory (one request with 256 MiB
of headers) or connections (thousands of half-sent requests) with no token
at all. `GuardedHttp` is uvicorn's httptools protocol with Placement-like
bounds in front of the parser:

* a request head (request line and headers) of at most `max_header_bytes`,
  and at most `max_headers` header lines: otherwise 431 (414 when the request
  line alone, the URL, is past the limit), and the connection is closed
  before the parser buffers more;
* a head must arrive within `header_timeout` seconds of its first byte (or
  of the connection: a connection that sends nothing is closed too): 408;
* a body must keep coming: `body_timeout` seconds without a byte of a body
  that is not complete yet, and the connection is closed (408 if nothing was
  answered yet); and it must come at `min_body_rate` bytes a second on the
  whole: a body has `body_timeout` seconds, plus one for every
  `min_body_rate` bytes it has sent (as Apache's mod_reqtimeout MinRate), so
  that a client sending a byte now and then cannot hold a connection for ever;
* the number of open connections is uvicorn's `limit_concurrency`
  (`max_connections`): past it, requests are answered 503.

The limits come from the environment (`STRATO_MAX_HEADER_BYTES`, ...) so
that `strato serve --workers N` hands them to every worker; `strato serve`
sets them from its options. Bodies are bounded by the app (`max_body_bytes`,
413, api/middleware.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    min_body_rate: int = 1024
    max_connections: int = 1000

    ENV = {"max_header_bytes": "STRATO_MAX_HEADER_BYTES",
           "max_headers": "STRATO_MAX_HEADERS",
           "header_timeout": "STRATO_HEADER_TIMEOUT",
           "body_timeout": "STRATO_BODY_TIMEOUT",
           "min_body_rate": "STRATO_MIN_BODY_RATE",
           "max_connections": "STRATO_MAX_CONNECTIONS"}

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, with each one set in the environment instead."""
        values: dict[str, float | int] = {}
        for name, var in cls.ENV.items():
            raw = os.environ.get(var)
            if raw:
                kind = int if isinstance(getattr(cls(), name), int) else float
                values[name] = kind(raw)
        return cls(**values)  # type: ignore[arg-type]

    def check(self) -> None:
        """Raises ValueError naming the first limit out of range."""
        if self.max_header_bytes < 1024:
            raise ValueError("max header bytes must be at least 1024")
        if self.max_headers < 8:
            raise ValueError("max headers must be at least 8")
        if self.header_timeout <= 0 or self.body_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.min_body_rate < 1:
            raise ValueError("min body rate must be at least 1 byte a second")
        if self.max_connections < 1:
            raise ValueError("max connections must be at least 1")

    def export(self) -> None:
        """Into the environment, for this process's server and its workers."""
        for name, var in self.ENV.items():
            os.environ[var] = str(getattr(self, name))


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (see the module)."""

    limits = Limits.from_env()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes = 0
        self._in_head = True
        self._header_lines = 0
        self._tail = b""
        self._too_big = False
        self._line_done = False  # the request line of this head has ended
        self._timer: asyncio.TimerHandle | None = None
        self._body_start = 0.0
        self._body_bytes = 0
        self._arm(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # -- timers --------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        started = self.cycle is not None and self.cycle.response_started
        if self._in_head and self._head_bytes == 0:
            self.transport.close()  # an idle connection: nothing to answer
        elif not started:
            slow = not self._in_head and self._body_start and self._body_left() <= 0.001
            self._refuse(408, "request timeout: the body came too slowly (under "
                         f"{self.limits.min_body_rate} bytes a second)" if slow
                         else "request timeout: the request was not sent in time")
        else:
            self.transport.close()

    # -- reading -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            if self._head_bytes == 0:
                # A head has header_timeout from its first byte (a kept-alive
                # connection's next request too).
                self._arm(self.limits.header_timeout)
            # Where the request line ends, counted in the head's bytes.
            room = self.limits.max_header_bytes - self._head_bytes
            newline = -1 if self._line_done else data.find(b"\n")
            line_too_long = not self._line_done and (newline < 0 or newline >= room)
            self._line_done = self._line_done or newline >= 0
            if not self._head_fits(data):
                if line_too_long:
                    # The request line alone is past the limit: the URL.
                    self._refuse(414, "request URI too long")
                else:
                    self._refuse(431, "request header fields too large")
                return
        elif self.cycle is not None and not self.cycle.response_complete and self._timer:
            # The body is moving: a pause of body_timeout from now, within
            # what its rate so far allows.
            self._body_bytes += len(data)
            left = self._body_left()
            if left <= 0:
                self._refuse(408, "request timeout: the body came too slowly (under "
                             f"{self.limits.min_body_rate} bytes a second)")
                return
            self._arm(min(self.limits.body_timeout, left))
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self._too_big:
                self._refuse(431, "too many request header fields")
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def _unsupported_upgrade_warning(self) -> None:
        """An Upgrade header (Strato serves no WebSocket: `ws="none"`) is
        ignored and the request served as plain HTTP, as Placement does; not
        a warning per request (a client could flood the log with them)."""
        self.logger.debug("upgrade request served as plain HTTP")

    def _head_fits(self, data: bytes) -> bool:
        """Counts `data` against the head's limit: the part up to the end of
        the head when it is in `data`, else all of it."""
        room = self.limits.max_header_bytes - self._head_bytes
        seen = self._tail + data
        end = seen.find(_HEAD_END)
        used = len(data) if end < 0 else max(0, end + len(_HEAD_END) - len(self._tail))
        if end < 0:
            self._tail = seen[-(len(_HEAD_END) - 1):]
        self._head_bytes += used
        return used <= room

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_lines = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_lines += 1
        if self._header_lines > self.limits.max_headers:
            self._too_big = True
            raise ValueError("too many headers")  # stops the parser
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._tail = b""
        super().on_headers_complete()
        if self.parser is not None and not self.transport.is_closing():
            self._body_start = self.loop.time()
            self._body_bytes = 0
            self._arm(self.limits.body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        # A pipelined request may follow at once: it is a new head.
        self._in_head = True
        self._head_bytes = 0
        self._line_done = False

    def _body_left(self) -> float:
        """Seconds left for the body at its minimum rate (see the module)."""
        allowed = self.limits.body_timeout + self._body_bytes / self.limits.min_body_rate
        return self._body_start + allowed - self.loop.time()

    def send_400_response(self, msg: str) -> None:
        """A request the parser cannot read: Placement's error (uvicorn's is
        plain text, without a request id)."""
        self._refuse(400, msg)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        # Past the connection limit uvicorn answers with its own app, plain text.
        super()._start_asgi_task(cycle, _overloaded if app is service_unavailable else app)

    def _refuse(self, status: int, why: str) -> None:
        """Answer `status` in Placement's error format and close."""
        self._disarm()
        headers, body = refusal(status, why)
        head = f"HTTP/1.1 {status} {_TITLES[status]}\r\n".encode() + b"".join(
            k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(head + body)
        self.transport.close()


_TITLES = {400: "Bad Request", 408: "Request Timeout", 414: "URI Too Long",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def refusal(status: int, why: str) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of the server's own refusal: Placement's error,
    with a request id (in the body and its header) as the app's errors have."""
    request_id = f"req-{uuid.uuid4()}"
    body = json.dumps({"errors": [{"status": status, "title": _TITLES[status], "detail": why,
                                   "code": "placement.undefined_code",
                                   "request_id": request_id}]}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()),
               (b"x-openstack-request-id", request_id.encode()), (b"connection", b"close")]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    return headers, body


async def _overloaded(scope: Any, receive: Any, send: Any) -> None:
    headers, body = refusal(503, "too many connections: the server is at its limit; "
                                 "retry later")
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
