"""A zone's answers are bounded in size and time, whatever the other end sends.

A hostile HTTP server on 127.0.0.1 answers in each way a broken or lying zone
could; both client paths (the lean one for http://, httpx for everything
else) must give up quickly, hold little memory, and say why in the right
kind of error: ``Malformed`` for an answer too large or not JSON,
``Unreachable`` for a deadline or a broken answer.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from strato.zone.transport import (
    MAX_REPLY_BYTES,
    HttpTransport,
    InProcessTransport,
    Malformed,
    Unreachable,
)

Script = Callable[[asyncio.StreamWriter], Awaitable[None]]
MiB = 1024 * 1024
BLOCK = b"x" * (64 * 1024)


async def _drain_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))


async def eight_gib_then_trickle(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8589934592\r\n\r\n")
    while True:
        w.write(b"x")
        await w.drain()
        await asyncio.sleep(0.05)


async def endless_chunked(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        w.write(b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK))
        await w.drain()


async def endless_unframed(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.0 200 OK\r\n\r\n")
    while True:
        w.write(BLOCK)
        await w.drain()


async def huge_chunk_size(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n200000000\r\n")
    while True:
        w.write(BLOCK)
        await w.drain()


async def endless_headers(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\n")
    i = 0
    while True:
        w.write(b"X-Header-%d: %s\r\n" % (i, b"v" * 100))
        i += 1
        await w.drain()


async def trickled_headers(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\n")
    while True:
        w.write(b"X")
        await w.drain()
        await asyncio.sleep(0.05)


async def slow_body(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{")
    while True:
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b" ")


async def not_json(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>ok</html>")
    await w.drain()


async def not_json_error(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 11\r\n\r\n<html>502</")
    await w.drain()


async def just_under_the_limit(w: asyncio.StreamWriter) -> None:
    body = b'"' + b"x" * (2 * MiB - 2) + b'"'
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await w.drain()


async def hostile(script: Script, scenario: Callable[[str], Awaitable[None]]) -> None:
    handlers: set[asyncio.Task[Any]] = set()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await _drain_request(reader)
            await script(writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client gave up (what we want), or the test is over
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await scenario(f"http://127.0.0.1:{port}")
    finally:
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        server.close()
        await server.wait_closed()


def call_hostile(script: Script, *, lean: bool, timeout: float = 5.0,
                 limit: int = MAX_REPLY_BYTES) -> tuple[BaseException | Any, float, int]:
    """(what the call raised or returned, seconds taken, peak traced bytes)."""
    out: dict[str, Any] = {}

    async def scenario(url: str) -> None:
        t = HttpTransport(lean=lean, max_reply_bytes=limit)
        start = time.monotonic()
        tracemalloc.start()
        tracemalloc.reset_peak()
        try:
            out["got"] = await t.call(url, "POST", "/strato/v1/schedule", token=None,
                                      json={"q": 1}, timeout=timeout)
        except Unreachable as exc:
            out["got"] = exc
        finally:
            out["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            out["took"] = time.monotonic() - start
            await t.aclose()

    asyncio.run(hostile(script, scenario))
    return out["got"], out["took"], out["peak"]


PATHS = [pytest.param(True, id="lean"), pytest.param(False, id="httpx")]


@pytest.mark.parametrize("lean", PATHS)
@pytest.mark.parametrize("script", [eight_gib_then_trickle, endless_chunked,
                                    endless_unframed, huge_chunk_size])
def test_too_large_is_refused_quickly_in_bounded_memory(script: Script, lean: bool) -> None:
    got, took, peak = call_hostile(script, lean=lean)
    assert isinstance(got, Malformed), got
    assert got.maybe_delivered is True
    assert "larger than" in got.why and got.why.startswith("faulty:")
    assert took < 4.0
    assert peak < 50 * MiB, f"{peak / MiB:.1f} MiB"


@pytest.mark.parametrize("lean", PATHS)
def test_declared_length_is_refused_before_reading(lean: bool) -> None:
    got, took, peak = call_hostile(eight_gib_then_trickle, lean=lean)
    assert isinstance(got, Malformed)
    assert "8589934592" in got.why
    assert took < 1.0
    assert peak < 5 * MiB


@pytest.mark.parametrize("lean", PATHS)
def test_an_answer_under_the_limit_is_read(lean: bool) -> None:
    got, _, _ = call_hostile(just_under_the_limit, lean=lean, limit=2 * MiB)
    assert not isinstance(got, BaseException), got
    assert got.status == 200 and len(got.body) == 2 * MiB - 2
    got, _, _ = call_hostile(just_under_the_limit, lean=lean, limit=2 * MiB - 1)
    assert isinstance(got, Malformed)


@pytest.mark.parametrize("lean", PATHS)
@pytest.mark.parametrize("script", [endless_headers, trickled_headers])
def test_headers_that_never_end(script: Script, lean: bool) -> None:
    got, took, peak = call_hostile(script, lean=lean, timeout=1.0)
    assert isinstance(got, Unreachable), got
    assert got.maybe_delivered is True
    assert took < 2.5
    assert peak < 50 * MiB


@pytest.mark.parametrize("lean", PATHS)
def test_timeout_is_a_deadline_for_the_whole_call(lean: bool) -> None:
    # Each byte comes well within a read timeout; the call as a whole does not.
    got, took, _ = call_hostile(slow_body, lean=lean, timeout=0.5)
    assert isinstance(got, Unreachable) and not isinstance(got, Malformed), got
    assert "timed out after 0.5s" in got.why
    assert got.maybe_delivered is True
    assert took < 1.5


@pytest.mark.parametrize("lean", PATHS)
def test_non_json_success_is_malformed_and_an_error_page_only_counted(lean: bool) -> None:
    """Its text is not kept: a registered URL may be a service that is not a
    zone, and what it says must not be read back through our API."""
    got, _, _ = call_hostile(not_json, lean=lean)
    assert isinstance(got, Malformed), got
    assert "not JSON" in got.why
    got, _, _ = call_hostile(not_json_error, lean=lean)
    assert not isinstance(got, BaseException), got
    assert got.status == 502 and got.body == {"raw": "11 bytes that are not JSON"}


# -- in process --------------------------------------------------------------------------

async def _endless_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    while True:
        await send({"type": "http.response.body", "body": BLOCK, "more_body": True})


async def _declared_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"8589934592")]})
    while True:
        await send({"type": "http.response.body", "body": BLOCK, "more_body": True})


async def _html_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"<html>"})


async def _failing_app(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("the child's app broke")


@pytest.mark.parametrize(("app", "kind", "why"), [
    (_endless_app, Malformed, "larger than"),
    (_declared_app, Malformed, "larger than"),
    (_html_app, Malformed, "not JSON"),
    (_failing_app, Unreachable, "RuntimeError"),
])
def test_in_process_answers_are_bounded_too(app: Any, kind: type[Unreachable],
                                            why: str) -> None:
    async def main() -> None:
        t = InProcessTransport(max_reply_bytes=4 * MiB)
        t.register("inproc://liar", app)
        tracemalloc.start()
        try:
            with pytest.raises(kind) as info:
                await t.call("inproc://liar", "GET", "/strato/v1/summary", token=None,
                             timeout=5)
            assert why in info.value.why
            assert tracemalloc.get_traced_memory()[1] < 50 * MiB
        finally:
            tracemalloc.stop()
            await t.aclose()
    asyncio.run(main())
