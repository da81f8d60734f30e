"""A lean HTTP/1.1 client for zone-to-zone calls over plain ``http://``.

Zone-to-zone traffic is small JSON requests between Strato servers, many per
placement (every level of the tree forwards the request and reads the
answer). Measured on the seven-process demo tree, httpx's client machinery
was half of a routing zone's CPU time. This client does only what those calls
need: keep-alive connections per host, a ``Content-Length`` request body, and
a response framed by ``Content-Length`` or chunked encoding. ``HttpTransport``
uses it for ``http://`` URLs and httpx for everything else (``https://``).

It tells a request that never left (connection refused) from one that may
have reached the zone (the connection broke or the deadline passed after the
request was written): see ``Unreachable.maybe_delivered``.

A zone's answer is bounded: a head over ``MAX_HEADER_BYTES`` or a body over
the caller's ``max_body`` is refused as soon as it is known to be too large
(a declared ``Content-Length`` before any of the body is read; a chunked or
unframed body once it passes the limit), so that a broken or hostile zone
cannot make its parent buffer gigabytes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from strato.zone.protocol import zone_url

# uvicorn closes idle keep-alive connections after 5 s: reuse them for less.
IDLE_REUSE_S = 4.0
MAX_IDLE_PER_HOST = 32
MAX_HEADER_BYTES = 64 * 1024
# Unframed bodies (read to the end of the connection) are read this much at a time.
READ_SIZE = 64 * 1024
# The largest answer body read unless the caller says otherwise.
MAX_BODY_BYTES = 16 * 1024 * 1024


class NotSent(Exception):
    """The request never reached the zone (no connection)."""


class Broken(Exception):
    """The connection failed after the request was (maybe) written."""


class TooLarge(Exception):
    """The answer's body is larger than the caller accepts (it was not read)."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"answer larger than {limit} bytes"
                         + (f" (Content-Length {declared})" if declared is not None else ""))
        self.limit = limit


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    last_used: float = 0.0

    def usable(self) -> bool:
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and time.monotonic() - self.last_used < IDLE_REUSE_S)

    def close(self) -> None:
        self.writer.close()


@dataclass
class WireClient:
    _idle: dict[tuple[str, int], list[_Conn]] = field(default_factory=dict)
    _targets: dict[str, tuple[str, int, str]] = field(default_factory=dict)

    def _target(self, url: str) -> tuple[str, int, str]:
        found = self._targets.get(url)
        if found is None:
            try:
                # Its text goes into the request line and Host header as is.
                parts = urlsplit(zone_url(url, ("http",)))
            except ValueError as exc:
                raise NotSent(f"not a URL a zone can be called at: {exc}") from None
            assert parts.hostname is not None  # zone_url requires a host
            found = (parts.hostname, parts.port or 80, parts.path.rstrip("/"))
            self._targets[url] = found
        return found

    async def request(self, url: str, method: str, path: str, headers: dict[str, str],
                      body: bytes | None, *, timeout: float, connect_timeout: float,
                      max_body: int = MAX_BODY_BYTES) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers: lower-case names). Raises NotSent, Broken,
        TooLarge or TimeoutError.
        `timeout` bounds the whole exchange, from writing the request to the
        last byte of the answer."""
        host, port, prefix = self._target(url)
        key = (host, port)
        conn = self._take(key)
        if conn is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), connect_timeout)
            except ConnectionRefusedError:
                raise NotSent("connection refused") from None
            except TimeoutError:
                raise NotSent(f"connect timed out after {connect_timeout:g}s") from None
            except OSError as exc:
                raise NotSent(f"cannot connect: {exc}") from None
            conn = _Conn(reader, writer)
        # An IPv6 address is bracketed in a Host header (RFC 7230 5.4).
        shown = f"[{host}]" if ":" in host else host
        head = [f"{method} {prefix}{path} HTTP/1.1", f"Host: {shown}:{port}",
                f"Content-Length: {len(body) if body else 0}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        try:
            async with asyncio.timeout(timeout):
                conn.writer.write(data)
                await conn.writer.drain()
                status, payload, keep, head_in = await _read_response(conn.reader, max_body)
        except (TimeoutError, TooLarge):
            # The rest of the answer is unread: the connection cannot be reused.
            conn.close()
            raise
        except (OSError, asyncio.IncompleteReadError) as exc:
            conn.close()
            why = ("connection closed before the answer"
                   if isinstance(exc, asyncio.IncompleteReadError | ConnectionError)
                   else f"connection failed: {exc}")
            raise Broken(why) from None
        except (asyncio.LimitOverrunError, ValueError) as exc:
            conn.close()
            raise Broken(f"not an HTTP answer: {exc}") from None
        if keep:
            self._give(key, conn)
        else:
            conn.close()
        return status, payload, head_in

    def _take(self, key: tuple[str, int]) -> _Conn | None:
        pool = self._idle.get(key)
        while pool:
            conn = pool.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    def _give(self, key: tuple[str, int], conn: _Conn) -> None:
        conn.last_used = time.monotonic()
        pool = self._idle.setdefault(key, [])
        if len(pool) < MAX_IDLE_PER_HOST:
            pool.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()


async def _read_response(reader: asyncio.StreamReader, max_body: int
                         ) -> tuple[int, bytes, bool, dict[str, str]]:
    """Status, body, whether the connection may be reused, and the headers
    (lower-case names). Raises TooLarge
    as soon as the body is known to pass `max_body` bytes."""
    while True:
        raw = await reader.readuntil(b"\r\n\r\n")
        if len(raw) > MAX_HEADER_BYTES:
            raise ValueError("response head too large")
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
        status = int(parts[1])
        if status >= 200 or status == 101:
            break  # 1xx interim answers (100 Continue) are skipped
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    keep = parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        total = 0
        while True:
            # The stream's own limit (64 KiB) bounds a size line that never ends.
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size < 0:
                raise ValueError("negative chunk size")
            total += size
            if total > max_body:
                raise TooLarge(max_body)
            if size == 0:
                # Trailers, if any, end with an empty line.
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return status, b"".join(chunks), keep, headers
    length = headers.get("content-length")
    if length is not None:
        declared = int(length)
        if declared < 0:
            raise ValueError("negative Content-Length")
        if declared > max_body:
            raise TooLarge(max_body, declared)
        return status, await reader.readexactly(declared), keep, headers
    if status in (204, 304):
        return status, b"", keep, headers
    # No framing: the body runs to the end of the connection.
    pieces: list[bytes] = []
    total = 0
    while chunk := await reader.read(READ_SIZE):
        total += len(chunk)
        if total > max_body:
            raise TooLarge(max_body)
        pieces.append(chunk)
    return status, b"".join(pieces), False, headers
