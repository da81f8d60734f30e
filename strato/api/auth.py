"""Authentication: a small replaceable strategy, applied by the middleware.

Two strategies for now:

* ``TokenAuth``: a configured admin token; anything else is 401.
* ``NoAuth``: development mode, like Placement's ``noauth2``: token ``admin``
  is an admin; any other token ``user[:project]`` gets the roles named in
  ``X-Roles`` and the project in ``X-Project-Id`` (or after the colon); with
  ``OpenStack-System-Scope`` the token is system-scoped, with no project.

A strategy returns a ``Context`` or raises; routes read the context from the
request scope.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Protocol

from strato.model import errors

CONTEXT_KEY = "strato.context"
ADMIN_ROLES = frozenset({"admin", "service"})


class Unauthorized(errors.StratoError):
    status = 401
    title = "Unauthorized"


@dataclass(frozen=True, slots=True)
class Context:
    user_id: str
    project_id: str | None
    roles: frozenset[str] = field(default_factory=frozenset)
    # A system-scoped token (no project): Placement's rules are all project-scoped.
    system_scope: bool = False

    @property
    def is_admin(self) -> bool:
        return bool(self.roles & ADMIN_ROLES)


class AuthStrategy(Protocol):
    def authenticate(self, headers: dict[str, str]) -> Context: ...


def _token(headers: dict[str, str]) -> str:
    token = headers.get("x-auth-token")
    if not token:
        raise Unauthorized("Authentication required: send an X-Auth-Token header")
    return token


def _roles(headers: dict[str, str]) -> frozenset[str]:
    return frozenset(r.strip().lower() for r in headers.get("x-roles", "").split(",")
                     if r.strip())


class TokenAuth:
    """One shared admin token (operators, agents, parent zones)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    def authenticate(self, headers: dict[str, str]) -> Context:
        # Header values arrive decoded as latin-1 (their bytes, one by one): back
        # to bytes, they compare with the token's UTF-8, so a non-ASCII token works.
        given = _token(headers).encode("latin-1", "replace")
        if not hmac.compare_digest(given, self._token):
            raise Unauthorized("The X-Auth-Token is not valid")
        return Context(user_id="admin", project_id="admin", roles=frozenset({"admin"}))


class NoAuth:
    """Development mode, compatible with Placement's noauth2 middleware."""

    def authenticate(self, headers: dict[str, str]) -> Context:
        token = _token(headers)
        user, _, project = token.partition(":")
        if headers.get("openstack-system-scope"):
            roles = _roles(headers) | (frozenset({"admin"}) if user == "admin" else frozenset())
            return Context(user_id=user, project_id=None, roles=roles, system_scope=True)
        if user == "admin":  # as noauth2: user admin, any project, is an admin
            return Context(user_id="admin", project_id=project or "admin",
                           roles=frozenset({"admin"}) | _roles(headers))
        return Context(user_id=user, project_id=project or headers.get("x-project-id"),
                       roles=_roles(headers))


REGISTRATION_ROLE = "zone"


class WithRegistration:
    """Another strategy, plus this zone's registration token: the credential
    child zones register with (`--parent-token` on their side). It grants the
    `zone` role, which may register a zone and do nothing else, so a child
    holds no admin rights on its parent."""

    def __init__(self, inner: AuthStrategy, token: str) -> None:
        self.inner = inner
        self._token = token.encode()
        slow = getattr(inner, "authenticate_async", None)
        if slow is not None:
            self.authenticate_async = self._async

    def _registration(self, headers: dict[str, str]) -> Context | None:
        given = headers.get("x-auth-token", "").encode("latin-1", "replace")
        if given and hmac.compare_digest(given, self._token):
            return Context(user_id="zone", project_id=None,
                           roles=frozenset({REGISTRATION_ROLE}))
        return None

    def authenticate(self, headers: dict[str, str]) -> Context:
        return self._registration(headers) or self.inner.authenticate(headers)

    async def _async(self, headers: dict[str, str]) -> Context:
        found = self._registration(headers)
        if found is not None:
            return found
        slow = self.inner.authenticate_async  # type: ignore[attr-defined]
        ctx: Context = await slow(headers)
        return ctx
