"""Who may do what: Placement's default policy rules, in one place.

Every Placement rule is project-scoped: a system-scoped token (the
`OpenStack-System-Scope` header) is refused whatever its roles. Three modes,
as Placement's deployments choose them:

* ``legacy`` (Placement's default, enforce_new_defaults off): a rule passes
  under its new default or under the old one (the admin role);
* ``secure`` (enforce_new_defaults on): the new defaults only, so a plain
  admin may not reshape (that is the service role's);
* ``open``: any authenticated caller, as Placement's tests open every rule.

Strato's own ``/strato/v1`` routes are not Placement's: they need the admin or
service role in every mode (``deps.require_admin``).
"""

from __future__ import annotations

from enum import StrEnum

from strato.api.auth import Context
from strato.model import errors


class PolicyMode(StrEnum):
    LEGACY = "legacy"
    SECURE = "secure"
    OPEN = "open"


# Placement's new defaults that differ from "admin or service".
_SERVICE_ONLY = frozenset({"placement:reshaper:reshape"})
_PROJECT_READER = frozenset({"placement:usages"})


def _new_default(action: str, ctx: Context, project_id: str | None) -> bool:
    if action in _SERVICE_ONLY:
        return "service" in ctx.roles
    if action in _PROJECT_READER and "reader" in ctx.roles and project_id is not None \
            and ctx.project_id == project_id:
        return True
    return ctx.is_admin


def allowed(mode: PolicyMode, action: str, ctx: Context, project_id: str | None = None) -> bool:
    """Whether `ctx` may perform Placement's `action` (on `project_id`'s data, where it
    matters)."""
    if ctx.system_scope:
        return False
    if mode is PolicyMode.OPEN:
        return True
    if mode is PolicyMode.LEGACY and "admin" in ctx.roles:
        return True
    return _new_default(action, ctx, project_id)


def authorize(mode: PolicyMode, action: str, ctx: Context, project_id: str | None = None
              ) -> None:
    if not allowed(mode, action, ctx, project_id):
        raise errors.Forbidden(f"Policy does not allow {action} to be performed.")
