"""The lean zone-to-zone HTTP client against small loopback servers that
answer in each framing, stall, or hang up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from strato.process import free_port
from strato.zone import wire
from strato.zone.transport import HttpTransport, Unreachable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


def serve(handler: Handler, scenario: Callable[[str], Awaitable[None]]) -> None:
    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await scenario(f"http://127.0.0.1:{port}")
        finally:
            server.close()
    asyncio.run(main())


def test_content_length_keep_alive_and_chunked() -> None:
    seen: list[bytes] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append(body)
            if len(seen) == 1:
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n"
                             b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"a\": 1}")
            else:
                writer.write(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"3\r\n{\"b\r\n5;x=y\r\n\": 2}\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def scenario(url: str) -> None:
        t = HttpTransport()
        try:
            r1 = await t.call(url, "POST", "/x", token=None, json={"q": 1}, timeout=5)
            r2 = await t.call(url, "GET", "/y", token=None, timeout=5)
        finally:
            await t.aclose()
        assert (r1.status, r1.body) == (200, {"a": 1})
        assert (r2.status, r2.body) == (409, {"b": 2})
        assert seen == [b'{"q":1}', b""]
        assert connections == 1  # kept alive
    serve(handler, scenario)


def test_refused_is_not_delivered() -> None:
    async def main() -> None:
        t = HttpTransport()
        try:
            with pytest.raises(Unreachable) as info:
                await t.call(f"http://127.0.0.1:{free_port()}", "POST", "/x", token=None,
                             json={}, timeout=2)
        finally:
            await t.aclose()
        assert info.value.maybe_delivered is False
    asyncio.run(main())


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://[::1", "http://127.0.0.1:-1",
                                 "http://127.0.0.1:1/\r\nX-Evil: 1", "inproc://dfw",
                                 "https://127.0.0.1:99999"])
def test_an_address_no_zone_can_be_called_at_is_unreachable(url: str, lean: bool) -> None:
    """A child stored by an older version with such a URL: a zone that does
    not answer (the request never left), not an error of the caller."""
    async def main() -> None:
        t = HttpTransport(lean=lean)
        try:
            with pytest.raises(Unreachable) as info:
                await t.call(url, "GET", "/strato/v1/summary", token=None, timeout=2)
        finally:
            await t.aclose()
        assert info.value.maybe_delivered is False
        assert "not a URL" in info.value.why
        with pytest.raises(wire.NotSent):
            await wire.WireClient().request(url, "GET", "/", {}, None, timeout=1,
                                            connect_timeout=1)
    asyncio.run(main())


@pytest.mark.parametrize("behaviour", ["stall", "hang_up", "garbage"])
def test_failures_after_sending_may_have_been_delivered(behaviour: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if behaviour == "stall":
            await asyncio.sleep(5)
        elif behaviour == "garbage":
            writer.write(b"SMTP ready\r\n\r\n")
            await writer.drain()
        writer.close()

    async def scenario(url: str) -> None:
        t = HttpTransport()
        try:
            with pytest.raises(Unreachable) as info:
                await t.call(url, "POST", "/x", token=None, json={}, timeout=0.3)
        finally:
            await t.aclose()
        assert info.value.maybe_delivered is True
        if behaviour == "stall":
            assert "timed out" in info.value.why
    serve(handler, scenario)


def test_connection_close_and_unframed_bodies() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n[1, 2]")
        await writer.drain()
        writer.close()

    async def scenario(url: str) -> None:
        c = wire.WireClient()
        try:
            for _ in range(2):  # a new connection each time
                status, body, _ = await c.request(url, "GET", "/", {}, None, timeout=2,
                                               connect_timeout=1)
                assert (status, body) == (200, b"[1, 2]")
            assert not any(c._idle.values())
        finally:
            await c.aclose()
    serve(handler, scenario)


def test_an_ipv6_zone_gets_a_bracketed_host_header() -> None:
    """RFC 7230: an IPv6 literal in Host is in brackets (was `Host: ::1:port`)."""
    hosts: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        hosts.extend(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                     if line.lower().startswith(b"host:"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async def main() -> None:
        try:
            server = await asyncio.start_server(handler, "::1", 0)
        except OSError:
            pytest.skip("no IPv6 loopback here")
        port = server.sockets[0].getsockname()[1]
        t = HttpTransport(lean=True)
        try:
            r = await t.call(f"http://[::1]:{port}", "GET", "/x", token=None, timeout=5)
        finally:
            await t.aclose()
            server.close()
        assert r.status == 200
        assert hosts == [f"[::1]:{port}".encode()]
    asyncio.run(main())
