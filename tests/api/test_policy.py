"""Placement's policy defaults in their three modes (strato/api/policy.py)."""

from __future__ import annotations

import pytest

from strato.api.auth import Context
from strato.api.policy import PolicyMode, allowed

ADMIN = Context("u", "p", frozenset({"admin", "member", "reader"}))
SERVICE = Context("u", "p", frozenset({"service"}))
READER = Context("u", "p", frozenset({"reader"}))
SYSTEM_ADMIN = Context("u", None, frozenset({"admin"}), system_scope=True)
LIST = "placement:resource_providers:list"
RESHAPE = "placement:reshaper:reshape"
USAGES = "placement:usages"


@pytest.mark.parametrize(("mode", "ctx", "action", "project", "ok"), [
    (PolicyMode.LEGACY, ADMIN, LIST, None, True),
    (PolicyMode.LEGACY, SERVICE, LIST, None, True),
    (PolicyMode.LEGACY, READER, LIST, None, False),
    (PolicyMode.LEGACY, SYSTEM_ADMIN, LIST, None, False),
    (PolicyMode.LEGACY, ADMIN, RESHAPE, None, True),
    (PolicyMode.SECURE, ADMIN, RESHAPE, None, False),
    (PolicyMode.SECURE, SERVICE, RESHAPE, None, True),
    (PolicyMode.SECURE, READER, USAGES, "p", True),
    (PolicyMode.SECURE, READER, USAGES, "other", False),
    (PolicyMode.OPEN, READER, LIST, None, True),
    (PolicyMode.OPEN, SYSTEM_ADMIN, LIST, None, False),
])
def test_policy(mode: PolicyMode, ctx: Context, action: str, project: str | None,
                ok: bool) -> None:
    assert allowed(mode, action, ctx, project) is ok
