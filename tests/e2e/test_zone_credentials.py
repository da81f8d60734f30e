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


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={
        "x-auth-token": token, "openstack-api-version": "placement latest"})


def test_a_parent_calls_its_child_with_a_link_token_that_can_do_only_that(
        tmp_path: Path) -> None:
    """The cell gives its parent --link-token, not its admin token: the parent
    places, claims, reads and routes through it, and can do nothing else there."""
    root = zone(tmp_path, "root", extra=["--auth-token", "root-admin",
                                         "--registration-token", "join-me"]).start()
    cell = None
    try:
        cell = zone(tmp_path, "cell", root, ["--auth-token", "cell-admin",
                                             "--parent-token", "join-me",
                                             "--link-token", "cell-link"]).start()
        cell_admin = _client(cell.url, "cell-admin")
        host = cell_admin.post("/resource_providers", json={"name": "h0"}).json()["uuid"]
        r = cell_admin.put(f"/resource_providers/{host}/inventories", json={
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
        assert r.status_code == 200, r.text
        admin = _client(root.url, "root-admin")

        def summarised() -> bool:
            kids = admin.get("/strato/v1/children").json()["children"]
            return bool(kids) and kids[0]["health"]["healthy"] is True \
                and kids[0]["summary"] is not None
        wait_for(summarised)
        # Through the link: a placement, a routed read and a routed write.
        consumer = str(uuid.uuid4())
        r = admin.post("/strato/v1/schedule", json={
            "consumers": [consumer], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 2}}]})
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"].endswith("cell")
        assert cell_admin.get(f"/allocations/{consumer}").json()["allocations"]
        r = admin.get(f"/resource_providers/{host}/inventories")
        assert r.status_code == 200 and r.json()["inventories"]["VCPU"]["total"] == 8
        r = admin.put(f"/resource_providers/{host}/traits", json={
            "resource_provider_generation": r.json()["resource_provider_generation"],
            "traits": ["HW_CPU_X86_AVX2"]})
        assert r.status_code == 200, r.text
        # The link token at the cell: the protocol, nothing else.
        link = _client(cell.url, "cell-link")
        assert link.get("/strato/v1/summary").status_code == 200
        assert link.get("/resource_providers").status_code == 200
        assert link.get("/strato/v1/children").status_code == 200  # its UI lists them
        for method, path, body in (
                ("POST", "/strato/v1/children", {"name": "evil", "url": "http://127.0.0.1:9"}),
                ("DELETE", "/strato/v1/children/any", None),
                ("POST", "/reshaper", {"inventories": {}, "allocations": {}}),
                ("POST", f"/strato/v1/providers/{host}/heartbeat", {}),
                # Only requests the parent sent (ids it made) are the parent's to cancel.
                ("POST", "/strato/v1/requests/cancel", {"request_id": "someone-elses"})):
            r = link.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.status_code, r.text)
        r = link.post("/strato/v1/requests/cancel",
                      json={"request_id": "r1@root#0123abcd"})
        assert r.status_code == 200, r.text
        # The cell's admin token never left the cell; a wrong token is a 401.
        for f in tmp_path.glob("root.db*"):
            assert b"cell-admin" not in f.read_bytes()
        for c in (admin, cell_admin, link):
            c.close()
    finally:
        for p in (cell, root):
            if p is not None:
                p.stop()
