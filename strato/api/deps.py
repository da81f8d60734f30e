"""What handlers need from the request: the database, the caller, the version."""

from __future__ import annotations

from starlette.requests import Request

from strato.api import policy
from strato.api.auth import CONTEXT_KEY, Context
from strato.api.policy import PolicyMode
from strato.model import errors
from strato.store.db import Database


def db(request: Request) -> Database:
    database: Database = request.app.state.db
    return database


def context(request: Request) -> Context:
    ctx = request.scope.get(CONTEXT_KEY)
    if not isinstance(ctx, Context):
        raise errors.StratoError("no authentication context")
    return ctx


def require_admin(request: Request, action: str) -> Context:
    """403 unless the caller has the admin or service role (Strato's own routes)."""
    ctx = context(request)
    if not ctx.is_admin:
        raise errors.Forbidden(f"Policy does not allow {action} to be performed.")
    return ctx


def authorize(request: Request, action: str, project_id: str | None = None) -> Context:
    """The caller, or a 403 if the app's Placement policy (strato/api/policy.py)
    refuses it `action` (on `project_id`'s data, for the rules that look at it)."""
    ctx = context(request)
    rules: policy.PolicyFile | None = getattr(request.app.state, "policy_file", None)
    if rules is not None:
        rules.authorize(action, ctx, project_id)
        return ctx
    mode: PolicyMode = getattr(request.app.state, "policy", PolicyMode.LEGACY)
    policy.authorize(mode, action, ctx, project_id)
    return ctx
