"""How a zone talks to another zone: one interface, two implementations.

* ``HttpTransport``: per-call timeouts; ``http://`` zones through the lean
  keep-alive client of ``zone/wire.py``, anything else through httpx.
* ``InProcessTransport``: the other zone's ASGI app called directly (httpx's
  ASGITransport), for tests and the simulator: hundreds of zones in one
  process, through exactly the same routes and serialisation as over HTTP.

Both answer ``Reply(status, body)`` or raise ``Unreachable`` (connection
refused, timeout, protocol error): the caller marks the zone unhealthy and
goes on elsewhere. ``Unreachable.maybe_delivered`` tells the two kinds of
failure apart: a refused connection never reached the zone, but a timeout or
a connection broken after the request was sent may hide a claim the zone
committed. A caller that goes elsewhere after such a failure must record it
as in doubt and cancel it at the zone when the zone answers again.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from strato.zone import wire

# Zone-to-zone messages carry this version, so mixed-version trees can tell.
ZONE_PROTOCOL = "1"
HEADERS = {"openstack-api-version": "placement 1.39", "x-strato-zone-protocol": ZONE_PROTOCOL,
           "content-type": "application/json"}


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


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any


class Transport(Protocol):
    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float) -> Reply: ...

    async def aclose(self) -> None: ...


def _headers(token: str | None) -> dict[str, str]:
    return {**HEADERS, "x-auth-token": token or "admin"}


def _decode(resp: httpx.Response) -> Reply:
    try:
        body = orjson.loads(resp.content) if resp.content else None
    except orjson.JSONDecodeError:
        body = {"raw": resp.text[:500]}
    return Reply(resp.status_code, body)


class HttpTransport:
    def __init__(self, max_connections: int = 64, *, lean: bool | None = None) -> None:
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections))
        if lean is None:
            # STRATO_ZONE_HTTP=httpx sends every zone call through httpx.
            lean = os.environ.get("STRATO_ZONE_HTTP", "lean") != "httpx"
        self._wire = wire.WireClient() if lean else None

    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float) -> Reply:
        if self._wire is not None and url.startswith("http://"):
            return await self._lean(url, method, path, token, json, timeout)
        try:
            resp = await self._client.request(
                method, url.rstrip("/") + path, headers=_headers(token),
                content=orjson.dumps(json) if json is not None else None,
                timeout=httpx.Timeout(timeout, connect=min(timeout, 2.0)))
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Never connected: the zone cannot have seen the request.
            raise Unreachable(url, f"{type(exc).__name__}: {exc}") from None
        except httpx.TimeoutException:
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except httpx.HTTPError as exc:
            raise Unreachable(url, f"{type(exc).__name__}: {exc}",
                              maybe_delivered=True) from None
        return _decode(resp)

    async def _lean(self, url: str, method: str, path: str, token: str | None, json: Any,
                    timeout: float) -> Reply:
        assert self._wire is not None
        try:
            status, content = await self._wire.request(
                url, method, path, _headers(token),
                orjson.dumps(json) if json is not None else None,
                timeout=timeout, connect_timeout=min(timeout, 2.0))
        except wire.NotSent as exc:
            raise Unreachable(url, str(exc)) from None
        except TimeoutError:
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except wire.Broken as exc:
            raise Unreachable(url, str(exc), maybe_delivered=True) from None
        try:
            body = orjson.loads(content) if content else None
        except orjson.JSONDecodeError:
            body = {"raw": content[:500].decode("utf-8", "replace")}
        return Reply(status, body)

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._wire is not None:
            await self._wire.aclose()


class InProcessTransport:
    """Zones registered by URL (e.g. ``inproc://dfw``) and called in-process."""

    def __init__(self) -> None:
        self._apps: dict[str, Any] = {}
        self._clients: dict[str, httpx.AsyncClient] = {}
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
        self._apps[url.rstrip("/")] = app

    def _matches(self, faults: Any, key: str, path: str) -> bool:
        return key in faults or f"{key} {path.split('?')[0]}" in faults

    async def call(self, url: str, method: str, path: str, *, token: str | None,
                   json: Any = None, timeout: float) -> Reply:
        key = url.rstrip("/")
        if key in self.down or key not in self._apps:
            raise Unreachable(url, "connection refused")
        client = self._clients.get(key)
        if client is None:
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self._apps[key]),
                                       base_url="http://zone")
            self._clients[key] = client
        delay = self.delays.get(f"{key} {path.split('?')[0]}", self.delays.get(key, 0.0))

        async def deliver() -> httpx.Response:
            if delay:
                await asyncio.sleep(delay)
            return await client.request(method, path, headers=_headers(token),
                                        content=orjson.dumps(json) if json is not None
                                        else None)
        task = asyncio.ensure_future(deliver())
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            # No sockets in-process: enforce the deadline around the whole call.
            resp = await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            raise Unreachable(url, f"timed out after {timeout:.3g}s",
                              maybe_delivered=True, timed_out=True) from None
        except httpx.HTTPError as exc:
            raise Unreachable(url, f"{type(exc).__name__}: {exc}",
                              maybe_delivered=True) from None
        if self._matches(self.lose_answers, key, path):
            raise Unreachable(url, "connection reset after the request was sent",
                              maybe_delivered=True)
        return _decode(resp)

    async def settle(self) -> None:
        """Wait for calls whose callers gave up (a resumed zone finishing them)."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    async def aclose(self) -> None:
        for t in list(self._inflight):
            t.cancel()
        await asyncio.gather(*list(self._inflight), return_exceptions=True)
        for c in self._clients.values():
            await c.aclose()
        self._clients.clear()
