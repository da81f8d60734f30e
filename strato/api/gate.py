"""Strato's own write routes refuse a caller their policy refuses before the
body is read.

FastAPI reads and validates a route's body before the route runs, and
StratoJson (api/body.py) scans every /strato/v1 body first: a caller without
the right could make the server parse megabytes on its event loop before it
is told 403. Placement checks its policy before it reads a body, and so do
Strato's Placement routes; this gate does it for /strato/v1, with the same
rules and words as the routes' own checks (`deps.require_admin` and the
registration route's), which still run: this only answers sooner.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from strato.api import deps
from strato.api.auth import CONTEXT_KEY, REGISTRATION_ROLE, Context
from strato.api.responses import REQUEST_ID_KEY, strato_error_response
from strato.model import errors

PREFIX = "/strato/v1/"
# A write route with a body -> the action its route checks. Registration
# (`CHILDREN`) also takes the registration token.
ACTIONS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(r"^/strato/v1/schedule/?$"), "strato:schedule:create"),
    ("POST", re.compile(r"^/strato/v1/explain/?$"), "strato:schedule:explain"),
    ("POST", re.compile(r"^/strato/v1/claims/?$"), "strato:claims:create"),
    ("POST", re.compile(r"^/strato/v1/claims/confirm/?$"), "strato:claims:confirm"),
    ("POST", re.compile(r"^/strato/v1/claims/release/?$"), "strato:claims:release"),
    ("POST", re.compile(r"^/strato/v1/requests/cancel/?$"), "strato:requests:cancel"),
    ("PUT", re.compile(r"^/strato/v1/providers/[^/]+/meta/?$"), "strato:providers:meta:update"),
    ("POST", re.compile(r"^/strato/v1/providers/[^/]+/heartbeat/?$"),
     "strato:providers:heartbeat"),
    ("POST", re.compile(r"^/strato/v1/children/?$"), "strato:children:create"),
)
CHILDREN = "strato:children:create"
WRITES = frozenset(m for m, _, _ in ACTIONS)


def action_of(method: str, path: str) -> str | None:
    for m, pattern, action in ACTIONS:
        if m == method and pattern.match(path):
            return action
    return None


def allowed(ctx: Context, action: str) -> bool:
    if action == CHILDREN:
        return ctx.is_admin or REGISTRATION_ROLE in ctx.roles
    return ctx.is_admin or (action in deps.PARENT_ACTIONS and deps.is_parent(ctx))


class PolicyFirst:
    """403 for a /strato/v1 write its caller may not make, with its body unread."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = scope.get(CONTEXT_KEY)
        # An admin (the common caller of these routes) passes at once.
        if (scope["type"] == "http" and isinstance(ctx, Context) and not ctx.is_admin
                and scope["method"] in WRITES and scope["path"].startswith(PREFIX)):
            action = action_of(scope["method"], scope["path"])
            if action is not None and not allowed(ctx, action):
                rid = scope.get(REQUEST_ID_KEY)
                accept = next((v.decode("latin-1") for k, v in scope["headers"]
                               if k.lower() == b"accept"), None)
                response = strato_error_response(
                    errors.Forbidden(f"Policy does not allow {action} to be performed."),
                    rid if isinstance(rid, str) else None, accept)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
