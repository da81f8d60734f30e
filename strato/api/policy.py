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


# -- an operator's policy file (oslo.policy) --------------------------------------

# Every Placement rule this API checks, so that a policy file's rules are
# checked against known names and the defaults are complete.
ACTIONS = (
    "placement:allocation_candidates:list", "placement:allocations:delete",
    "placement:allocations:list", "placement:allocations:manage",
    "placement:allocations:update", "placement:reshaper:reshape",
    "placement:resource_classes:create", "placement:resource_classes:delete",
    "placement:resource_classes:list", "placement:resource_classes:show",
    "placement:resource_classes:update", "placement:resource_providers:aggregates:list",
    "placement:resource_providers:aggregates:update",
    "placement:resource_providers:allocations:list", "placement:resource_providers:create",
    "placement:resource_providers:delete", "placement:resource_providers:inventories:create",
    "placement:resource_providers:inventories:delete",
    "placement:resource_providers:inventories:list",
    "placement:resource_providers:inventories:show",
    "placement:resource_providers:inventories:update", "placement:resource_providers:list",
    "placement:resource_providers:show", "placement:resource_providers:traits:delete",
    "placement:resource_providers:traits:list", "placement:resource_providers:traits:update",
    "placement:resource_providers:update", "placement:resource_providers:usages",
    "placement:traits:delete", "placement:traits:list", "placement:traits:show",
    "placement:traits:update", "placement:usages",
)


def default_check(mode: PolicyMode, action: str) -> str:
    """The rule `allowed` applies, in oslo.policy's language."""
    if mode is PolicyMode.OPEN:
        return "@"
    if action in _SERVICE_ONLY:
        new = "role:service"
    elif action in _PROJECT_READER:
        new = "role:admin or role:service or (role:reader and project_id:%(project_id)s)"
    else:
        new = "role:admin or role:service"
    return f"role:admin or ({new})" if mode is PolicyMode.LEGACY else new


class PolicyFile:
    """Placement's rules with an operator's policy file on top (Placement's
    YAML or JSON format, read by oslo.policy, the library Placement uses): a
    rule the file names replaces the default of `mode`; the others keep it.
    The file is read again when it changes. System-scoped tokens are refused
    whatever the file says, as Placement's rules are all project-scoped."""

    def __init__(self, path: str, mode: PolicyMode) -> None:
        import os

        try:
            from oslo_config import cfg
            from oslo_policy import policy as oslo
        except ImportError:
            raise ValueError("a policy file needs oslo.policy: pip install "
                             "'strato[policy]'") from None

        if not os.path.isfile(path):
            raise ValueError(f"{path} is not a readable file")
        conf = cfg.ConfigOpts()
        conf([], project="strato", default_config_files=[])
        self._enforcer = oslo.Enforcer(conf, policy_file=os.path.abspath(path), use_conf=False)
        self._enforcer.register_defaults([oslo.RuleDefault(a, default_check(mode, a))
                                          for a in ACTIONS])
        try:
            self._enforcer.load_rules(force_reload=True)
        except Exception as exc:  # its parser's errors are of several kinds
            raise ValueError(f"{path}: {exc}") from None
        self.unknown = sorted(set(self._enforcer.file_rules) - set(ACTIONS))

    def allowed(self, action: str, ctx: Context, project_id: str | None = None) -> bool:
        if ctx.system_scope:
            return False
        creds = {"roles": sorted(ctx.roles), "project_id": ctx.project_id,
                 "user_id": ctx.user_id}
        return bool(self._enforcer.enforce(action, {"project_id": project_id or ""}, creds,
                                           do_raise=False))

    def authorize(self, action: str, ctx: Context, project_id: str | None = None) -> None:
        if not self.allowed(action, ctx, project_id):
            raise errors.Forbidden(f"Policy does not allow {action} to be performed.")
