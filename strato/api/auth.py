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
    # This zone's parent, with the link token (set by WithZoneTokens alone, not
    # by a role of that name from another strategy).
    zone_link: bool = False

    @property
    def is_admin(self) -> bool:
        return bool(self.roles & ADMIN_ROLES)


class AuthStrategy(Protocol):
    def authenticate(self, headers: dict[str, str]) -> Context: ...


def _token(headers: dict[str, str], hint: str = "") -> str:
    token = headers.get("x-auth-token")
    if not token:
        raise Unauthorized("Authentication required: send an X-Auth-Token header" + hint)
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

    # What a first `curl` without a token is told: the README's development token.
    HINT = (" (development mode: 'X-Auth-Token: admin' is an admin; 'user:project' gets "
            "the roles in X-Roles)")

    def authenticate(self, headers: dict[str, str]) -> Context:
        token = _token(headers, self.HINT)
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
# The role a zone's parent calls it with (its --link-token): the zone
# protocol and the Placement calls a parent routes to its subtree, nothing
# else (strato/api/deps.py says which).
PARENT_ROLE = "parent_zone"


class WithZoneTokens:
    """Another strategy, plus the tokens of zone links:

    * the registration token (role `zone`): child zones register with it
      (`--parent-token` on their side); it may register a zone and do nothing
      else, so a child holds no admin rights on its parent;
    * the link token (role `parent_zone`): this zone gives it to its parent at
      registration instead of its admin token, so the parent can ask for
      placements, claims, cancels and summaries and route Placement calls
      below, but not manage this zone's children or cancel other callers'
      requests."""

    def __init__(self, inner: AuthStrategy, *, registration: str | None = None,
                 link: str | None = None) -> None:
        self.inner = inner
        self._tokens = [(t.encode(), Context(user_id=user, project_id=None,
                                             roles=frozenset({role}),
                                             zone_link=role == PARENT_ROLE))
                        for t, user, role in ((registration, "zone", REGISTRATION_ROLE),
                                              (link, "parent-zone", PARENT_ROLE)) if t]
        slow = getattr(inner, "authenticate_async", None)
        if slow is not None:
            self.authenticate_async = self._async

    def _zone(self, headers: dict[str, str]) -> Context | None:
        given = headers.get("x-auth-token", "").encode("latin-1", "replace")
        if not given:
            return None
        found = None
        for token, ctx in self._tokens:  # every one compared, in constant time
            if hmac.compare_digest(given, token):
                found = ctx
        return found

    def authenticate(self, headers: dict[str, str]) -> Context:
        return self._zone(headers) or self.inner.authenticate(headers)

    async def _async(self, headers: dict[str, str]) -> Context:
        found = self._zone(headers)
        if found is not None:
            return found
        slow = self.inner.authenticate_async  # type: ignore[attr-defined]
        ctx: Context = await slow(headers)
        return ctx
