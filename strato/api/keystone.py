"""Keystone tokens (`strato serve --keystone-url …`), as Placement checks them
through keystonemiddleware: the `X-Auth-Token` of each request is validated
by Keystone (`GET /v3/auth/tokens`, with this zone's own service credentials),
and its user, project, roles (implied ones included) and system scope become
the request's context, which Placement's policy rules then read.

Validated tokens are kept for `cache_seconds` (never past their expiry) in a
bounded cache keyed by the token's SHA-256; refused ones for a few seconds.
A cache miss is validated in a worker thread, never on the event loop. When
Keystone cannot be asked the answer is 503, not 401: the token may be good.

The zone's static `--auth-token`, when set, is still accepted as an admin
token (zone links and operators' tools), compared in constant time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool

from strato.api.auth import Context, Unauthorized, _token
from strato.model import errors

REFUSED_SECONDS = 10.0
MAX_VALIDATING = 8  # validations asked of Keystone at once, per process


class KeystoneAuth:
    def __init__(self, url: str, *, username: str, password: str, project: str,
                 domain: str = "Default", admin_token: str | None = None,
                 cache_seconds: float = 300.0, max_cached: int = 10_000,
                 timeout: float = 5.0) -> None:
        try:
            from keystoneauth1 import session
            from keystoneauth1.identity import v3
        except ImportError as exc:  # pragma: no cover (an extra)
            raise RuntimeError("--keystone-url needs keystoneauth1: pip install "
                               "'strato[keystone]'") from exc
        self.url = url.rstrip("/")
        if not self.url.endswith("/v3"):
            self.url += "/v3"
        self._session = session.Session(auth=v3.Password(
            auth_url=self.url, username=username, password=password, project_name=project,
            user_domain_name=domain, project_domain_name=domain), timeout=timeout)
        self._admin = admin_token.encode() if admin_token else None
        self.cache_seconds = cache_seconds
        self.max_cached = max_cached
        self._cache: OrderedDict[bytes, tuple[float, Context | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[bytes, asyncio.Future[tuple[Context | None, float]]] = {}
        self._gate: asyncio.Semaphore | None = None

    def authenticate(self, headers: dict[str, str]) -> Context:
        """Synchronous form (a caller not on an event loop)."""
        token = _token(headers)
        found = self._static(token) or self._cached(token)
        return found if found is not None else self._remember(token, self._validate(token))

    async def authenticate_async(self, headers: dict[str, str]) -> Context:
        token = _token(headers)
        found = self._static(token) or self._cached(token)
        if found is not None:
            return found
        # One validation per token at a time (concurrent requests with a new
        # token wait for the same answer), and at most MAX_VALIDATING at once:
        # a flood of made-up tokens cannot take every worker thread.
        key = self._key(token)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._validate_bounded(token))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return self._remember(token, await asyncio.shield(pending))

    async def _validate_bounded(self, token: str) -> tuple[Context | None, float]:
        if self._gate is None:
            self._gate = asyncio.Semaphore(MAX_VALIDATING)
        async with self._gate:
            return await run_in_threadpool(self._validate, token)

    def _static(self, token: str) -> Context | None:
        if self._admin is not None and hmac.compare_digest(
                token.encode("latin-1", "replace"), self._admin):
            return Context(user_id="admin", project_id="admin", roles=frozenset({"admin"}))
        return None

    @staticmethod
    def _key(token: str) -> bytes:
        return hashlib.sha256(token.encode("latin-1", "replace")).digest()

    def _cached(self, token: str) -> Context | None:
        key = self._key(token)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            until, ctx = hit
            if until < time.monotonic():
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
        if ctx is None:
            raise Unauthorized("The X-Auth-Token is not valid (Keystone refused it)")
        return ctx

    def _remember(self, token: str, found: tuple[Context | None, float]) -> Context:
        ctx, seconds = found
        with self._lock:
            self._cache[self._key(token)] = (time.monotonic() + seconds, ctx)
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        if ctx is None:
            raise Unauthorized("The X-Auth-Token is not valid (Keystone refused it)")
        return ctx

    def _validate(self, token: str) -> tuple[Context | None, float]:
        """(the token's context, or None if Keystone refused it; seconds to keep
        the verdict)."""
        from keystoneauth1 import exceptions as ks

        try:
            r = self._session.get(f"{self.url}/auth/tokens", raise_exc=False,
                                  headers={"X-Subject-Token": token,
                                           "Accept": "application/json"})
        except ks.ClientException as exc:
            raise errors.ServiceUnavailable(
                f"Keystone at {self.url} could not be asked: {type(exc).__name__}",
                retry_after=2.0) from None
        if r.status_code in (401, 403, 404):
            return None, REFUSED_SECONDS
        if r.status_code != 200:
            raise errors.ServiceUnavailable(
                f"Keystone at {self.url} answered {r.status_code} to a token validation",
                retry_after=2.0)
        try:
            body: dict[str, Any] = r.json()["token"]
            ctx = _context(body)
            left = _seconds_left(body.get("expires_at"))
        except (ValueError, KeyError, TypeError):
            raise errors.ServiceUnavailable(
                f"Keystone at {self.url} answered a token validation with a body "
                "this zone cannot read", retry_after=2.0) from None
        if left <= 0:
            return None, REFUSED_SECONDS
        return ctx, min(self.cache_seconds, left)


def _context(token: dict[str, Any]) -> Context:
    roles = frozenset(str(r["name"]).lower() for r in token.get("roles") or [])
    project = token.get("project")
    return Context(user_id=str(token["user"]["id"]),
                   project_id=str(project["id"]) if isinstance(project, dict) else None,
                   roles=roles, system_scope="system" in token)


def _seconds_left(expires_at: Any) -> float:
    if not isinstance(expires_at, str):
        return 0.0
    when = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()
