"""What handlers need from the request: the database, the caller, the version."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Connection
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from strato.api import policy
from strato.api.auth import CONTEXT_KEY, PARENT_ROLE, Context
from strato.api.policy import PolicyMode
from strato.model import errors
from strato.store.db import Database

T = TypeVar("T")


def db(request: Request) -> Database:
    database: Database = request.app.state.db
    return database


async def write(request: Request, job: Callable[[Connection], T]) -> T:
    """`job` in a write transaction, in a worker thread (as a `def` route runs):
    a write may wait, for SQLite's lock held by another process or for
    PostgreSQL's row locks held by another worker, and the event loop, which
    answers every other request, must not wait with it."""
    def run() -> T:
        with db(request).write() as conn:
            return job(conn)
    return await run_in_threadpool(run)


def context(request: Request) -> Context:
    ctx = request.scope.get(CONTEXT_KEY)
    if not isinstance(ctx, Context):
        raise errors.StratoError("no authentication context")
    return ctx


# What a parent zone may ask of this zone with its link token (role
# parent_zone): the zone protocol, and the provider metadata it routes from
# above (issue 14), and the list of this zone's children (its UI shows them).
# Not: adding or removing children, the UI, agents' heartbeats.
PARENT_ACTIONS = frozenset({
    "strato:summary:show", "strato:children:list", "strato:groups:show", "strato:schedule:create",
    "strato:schedule:explain", "strato:claims:create", "strato:claims:confirm",
    "strato:claims:release", "strato:requests:cancel", "strato:requests:list",
    "strato:providers:list", "strato:providers:meta:show", "strato:providers:meta:update",
})
# Placement's rules a parent's routed calls never need (api/below.py routes
# reads, writes to existing providers, allocations and new traits and
# resource classes): creating providers here, deleting traits or resource
# classes, reshaping.
PARENT_DENIED = frozenset({"placement:reshaper:reshape", "placement:resource_providers:create",
                           "placement:traits:delete", "placement:resource_classes:delete"})


def is_parent(ctx: Context) -> bool:
    """The caller is this zone's parent, with the link token (and no admin role)."""
    return (ctx.zone_link and PARENT_ROLE in ctx.roles and not ctx.is_admin
            and not ctx.system_scope)


def require_admin(request: Request, action: str) -> Context:
    """403 unless the caller has the admin or service role (Strato's own routes),
    or is this zone's parent asking for one of PARENT_ACTIONS."""
    ctx = context(request)
    if not (ctx.is_admin or (action in PARENT_ACTIONS and is_parent(ctx))):
        raise errors.Forbidden(f"Policy does not allow {action} to be performed.")
    return ctx


def authorize(request: Request, action: str, project_id: str | None = None) -> Context:
    """The caller, or a 403 if the app's Placement policy (strato/api/policy.py)
    refuses it `action` (on `project_id`'s data, for the rules that look at it)."""
    ctx = context(request)
    if is_parent(ctx):
        # The parent routes a call its own policy allowed its client (issue 14):
        # the link token stands for that, whatever this zone's rules say.
        if action in PARENT_DENIED:
            raise errors.Forbidden(f"Policy does not allow {action} to be performed.")
        return ctx
    rules: policy.PolicyFile | None = getattr(request.app.state, "policy_file", None)
    if rules is not None:
        rules.authorize(action, ctx, project_id)
        return ctx
    mode: PolicyMode = getattr(request.app.state, "policy", PolicyMode.LEGACY)
    policy.authorize(mode, action, ctx, project_id)
    return ctx
