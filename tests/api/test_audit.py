"""The audit log (issue 15): every write, who asked, the outcome, as JSON lines."""

from __future__ import annotations

import json
import stat
import time
import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database


def lines(path: Path, n: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # written by the log's own thread
        got = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if len(got) >= n:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {n} lines")


def test_every_write_is_audited(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    db = Database(f"sqlite:///{tmp_path / 'a.db'}")
    app = create_app(Settings(db_url=db.url, audit_log=str(log), zone_name="dfw"), db=db)
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            admin = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}
            r = c.post("/resource_providers", json={"name": "h1"}, headers=admin)
            assert r.status_code == 200, r.text
            rp = r.json()["uuid"]
            c.put(f"/resource_providers/{rp}/inventories", headers=admin, json={
                "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
            c.post("/strato/v1/schedule", headers=admin, json={  # the lean path
                "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 1}}]})
            c.get("/resource_providers", headers=admin)            # a read: not audited
            c.delete(f"/resource_providers/{rp}", headers={"x-auth-token": "bob:proj1",
                                                           "x-roles": "reader"})
            c.post("/resource_providers", json={"name": "x"})      # no token
            c.post("/resource_providers", json={"name": 5}, headers=admin)   # invalid
    finally:
        db.dispose()
    got = lines(log, 6)
    assert len(got) == 6, got
    assert [(g["method"], g["status"]) for g in got] == [
        ("POST", 200), ("PUT", 200), ("POST", 200), ("DELETE", 403), ("POST", 401),
        ("POST", 400)]
    first = got[0]
    assert first["zone"] == "dfw" and first["user"] == "admin" and first["outcome"] == "done"
    assert str(first["request_id"]).startswith("req-")
    assert got[1]["route"] == "/resource_providers/{uuid}/inventories"
    assert got[2]["path"] == got[2]["route"] == "/strato/v1/schedule"
    refused = got[3]
    assert (refused["user"], refused["project"], refused["roles"], refused["outcome"]) == (
        "bob", "proj1", ["reader"], "refused")
    assert got[4]["user"] is None
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
