"""An operator's policy file (issue 15), read by oslo.policy as Placement
reads its own: the rules it names replace the defaults, the rest keep them."""

from __future__ import annotations

import itertools
import os
import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from strato.api import policy
from strato.api.app import create_app
from strato.api.auth import Context
from strato.api.policy import ACTIONS, PolicyFile, PolicyMode
from strato.config import Settings
from strato.store.db import Database

PACKAGE = Path(__file__).resolve().parents[2] / "strato"
CONTEXTS = [
    Context("admin", "admin", frozenset({"admin"})),
    Context("svc", "service", frozenset({"service"})),
    Context("rita", "p1", frozenset({"reader"})),
    Context("alice", "p1", frozenset({"member", "reader"})),
    Context("nobody", "p1", frozenset()),
    Context("root", None, frozenset({"admin"}), system_scope=True),
]


def test_every_rule_the_api_checks_is_known() -> None:
    used = set()
    for f in PACKAGE.rglob("*.py"):
        used |= set(re.findall(r'"(placement:[a-z_:]+)"', f.read_text()))
    assert used == set(ACTIONS)


def test_an_empty_file_keeps_each_modes_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "policy.yaml"
    empty.write_text("# nothing changed\n")
    for mode in PolicyMode:
        rules = PolicyFile(str(empty), mode)
        for action, ctx, project in itertools.product(ACTIONS, CONTEXTS, ("p1", "p2", None)):
            assert rules.allowed(action, ctx, project) == policy.allowed(
                mode, action, ctx, project), (mode, action, ctx, project)


def test_a_file_overrides_rules_through_the_api(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text('"placement:resource_providers:list": "role:reader"\n'
                    '"placement:usages": "!"\n')
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    app = create_app(Settings(db_url=db.url, policy_file=str(path)), db=db)
    v = {"openstack-api-version": "placement 1.39"}
    reader = {**v, "x-auth-token": "rita:p1", "x-roles": "reader"}
    member = {**v, "x-auth-token": "mo:p1", "x-roles": "member"}
    admin = {**v, "x-auth-token": "admin"}
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            assert c.get("/resource_providers", headers=reader).status_code == 200
            assert c.get("/resource_providers", headers=member).status_code == 403
            assert c.get("/usages?project_id=p1", headers=admin).status_code == 403
            assert c.post("/resource_providers", json={"name": "h"},
                          headers=admin).status_code == 200   # a default kept
            assert c.post("/resource_providers", json={"name": "h2"},
                          headers=reader).status_code == 403
            # Changed on disk: read again, no restart.
            path.write_text('"placement:usages": "role:admin"\n')
            later = time.time() + 5
            os.utime(path, (later, later))
            assert c.get("/usages?project_id=p1", headers=admin).status_code == 200
            assert c.get("/resource_providers", headers=reader).status_code == 403
    finally:
        db.dispose()


def test_a_bad_file_is_refused_with_its_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a readable file"):
        PolicyFile(str(tmp_path / "missing.yaml"), PolicyMode.LEGACY)
    bad = tmp_path / "bad.yaml"
    bad.write_text('"placement:usages": [unclosed\n')
    with pytest.raises(ValueError, match=r"bad\.yaml"):
        PolicyFile(str(bad), PolicyMode.LEGACY)
    odd = tmp_path / "odd.yaml"
    odd.write_text('"placement:no_such_rule": "@"\n')
    assert PolicyFile(str(odd), PolicyMode.LEGACY).unknown == ["placement:no_such_rule"]
