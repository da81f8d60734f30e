"""Zone credentials (issue 15): a child registers with its parent's
registration token, which may register a zone and do nothing else; so a
child (or whoever holds that token) has no admin rights on its parent."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from tests.e2e.test_zone_tree import wait_for, zone


def test_a_child_registers_with_a_token_that_can_do_nothing_else(tmp_path: Path) -> None:
    root = zone(tmp_path, "root", extra=["--auth-token", "root-admin",
                                         "--registration-token", "join-me"]).start()
    cell = None
    try:
        cell = zone(tmp_path, "cell", root, ["--auth-token", "cell-admin",
                                             "--parent-token", "join-me"]).start()
        admin = httpx.Client(base_url=root.url, headers={"x-auth-token": "root-admin"})
        wait_for(lambda: [k["name"] for k in admin.get("/strato/v1/children").json()[
            "children"]] == ["cell"])
        joiner = httpx.Client(base_url=root.url, timeout=30, headers={
            "x-auth-token": "join-me", "openstack-api-version": "placement latest"})
        for method, path, body in (
                ("GET", "/resource_providers", None),
                ("POST", "/resource_providers", {"name": "x"}),
                ("GET", "/strato/v1/children", None),
                ("DELETE", "/strato/v1/children/cell", None),
                ("GET", "/strato/v1/summary", None),
                ("POST", "/strato/v1/requests/cancel", {"request_id": "r1"}),
                ("POST", "/strato/v1/schedule", {
                    "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 1}}]})):
            r = joiner.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.status_code, r.text)
        # It cannot re-point the registered cell to itself (no identity of cell's).
        r = joiner.post("/strato/v1/children", json={"name": "cell",
                                                     "url": "http://127.0.0.1:9"})
        assert r.status_code == 409, r.text
        assert [k["url"] for k in admin.get("/strato/v1/children").json()["children"]] \
            == [cell.url]
        # A wrong token is a 401, as before.
        r = httpx.get(f"{root.url}/strato/v1/children", headers={"x-auth-token": "nope"})
        assert r.status_code == 401
        admin.close()
        joiner.close()
    finally:
        for p in (cell, root):
            if p is not None:
                p.stop()
