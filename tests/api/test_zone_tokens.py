"""Zone link tokens (issue 15): what a parent holding this zone's link token
(role parent_zone) may do here, what a child holding the registration token
(role zone) may do, and who may cancel a request."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database

LATEST = {"openstack-api-version": "placement latest"}


@pytest.fixture
def app_client(sqlite_database: Database) -> Iterator[TestClient]:
    app = create_app(Settings(db_url=sqlite_database.url, registration_token="join",
                              link_token="link"), db=sqlite_database, migrate=False)
    with TestClient(app, headers=LATEST, raise_server_exceptions=False) as c:
        yield c


def _as(token: str, roles: str | None = None) -> dict[str, str]:
    return {"x-auth-token": token, **({"x-roles": roles} if roles else {})}


def test_the_link_token_is_the_parents_protocol_and_nothing_else(app_client: TestClient
                                                                  ) -> None:
    c = app_client
    rp = c.post("/resource_providers", json={"name": "h"}, headers=_as("admin")).json()["uuid"]
    link = _as("link")
    for method, path, body in (
            ("GET", "/strato/v1/summary", None),
            ("GET", "/strato/v1/children", None),
            ("GET", "/resource_providers", None),
            ("GET", f"/resource_providers/{rp}/inventories", None),
            ("PUT", f"/resource_providers/{rp}/traits",
             {"resource_provider_generation": 0, "traits": []}),
            ("PUT", "/traits/CUSTOM_FROM_ABOVE", None),
            ("GET", "/strato/v1/groups/web", None),
            ("POST", "/strato/v1/requests/cancel", {"request_id": "r1@root#0123abcd"}),
            ("POST", "/strato/v1/schedule", {
                "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 1}}]})):
        r = c.request(method, path, json=body, headers=link)
        assert r.status_code not in (401, 403), (method, path, r.status_code, r.text)
    for method, path, body in (
            ("POST", "/strato/v1/children", {"name": "x", "url": "http://127.0.0.1:9"}),
            ("DELETE", "/strato/v1/children/x", None),
            ("POST", "/resource_providers", {"name": "new"}),
            ("DELETE", "/traits/CUSTOM_FROM_ABOVE", None),
            ("POST", "/reshaper", {"inventories": {}, "allocations": {}}),
            ("POST", f"/strato/v1/providers/{rp}/heartbeat", {}),
            ("GET", "/ui", None),
            ("POST", "/strato/v1/requests/cancel", {"request_id": "a-clients-request"}),
            # ... nor this zone's own parts (ids it made itself).
            ("POST", "/strato/v1/requests/cancel", {"request_id": "r2@local#0123abcd"})):
        r = c.request(method, path, json=body, headers=link)
        assert r.status_code == 403, (method, path, r.status_code, r.text)


def test_a_role_named_parent_zone_from_elsewhere_is_not_the_link(app_client: TestClient
                                                                 ) -> None:
    """Only the link token makes a caller this zone's parent: a token that
    merely carries a role of that name (development mode's X-Roles, or a
    Keystone role) gets nothing from it."""
    r = app_client.get("/strato/v1/summary", headers=_as("u:p", "parent_zone"))
    assert r.status_code == 403, r.text


def test_the_registration_token_registers_and_nothing_else(app_client: TestClient) -> None:
    c = app_client
    r = c.post("/strato/v1/children", json={"name": "kid", "url": "http://127.0.0.1:9"},
               headers=_as("join"))
    assert r.status_code in (200, 201), r.text
    for method, path in (("GET", "/strato/v1/summary"), ("GET", "/resource_providers")):
        assert c.request(method, path, headers=_as("join")).status_code == 403


def test_only_an_admin_or_the_sending_parent_cancels(app_client: TestClient) -> None:
    c = app_client
    body = {"request_id": "nova-request-1"}
    # A service user schedules, but may not cancel another caller's request.
    r = c.post("/strato/v1/requests/cancel", json=body, headers=_as("nova:svc", "service"))
    assert r.status_code == 403, r.text
    assert "only by the zone that sent it" in r.json()["errors"][0]["detail"]
    r = c.post("/strato/v1/requests/cancel", json=body, headers=_as("admin"))
    assert r.status_code == 200, r.text


def test_a_write_refused_by_policy_is_refused_before_its_body_is_read(
        app_client: TestClient) -> None:
    """As Placement checks its policy before it reads a body: a caller without
    the right gets 403 for a malformed body too, not a 400 about its content
    (which would mean the server parsed it, megabytes of it, for nobody)."""
    c = app_client
    user = _as("u:p")
    junk = b'{"consumers": ' + b"[" * 50 + b"1" + b"]" * 50 + b', "tags": "x"}'
    for method, path in (("POST", "/strato/v1/schedule"), ("POST", "/strato/v1/explain"),
                         ("POST", "/strato/v1/claims"), ("POST", "/strato/v1/claims/confirm"),
                         ("POST", "/strato/v1/claims/release"),
                         ("POST", "/strato/v1/requests/cancel"),
                         ("PUT", f"/strato/v1/providers/{uuid.uuid4()}/meta"),
                         ("POST", f"/strato/v1/providers/{uuid.uuid4()}/heartbeat"),
                         ("POST", "/strato/v1/children")):
        r = c.request(method, path, content=junk, headers={
            **user, "content-type": "application/json"})
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        err = r.json()["errors"][0]
        assert err["detail"].startswith("Policy does not allow strato:"), err
        assert err["request_id"], err
    # Those allowed still get their body checked.
    r = c.post("/strato/v1/schedule", content=junk,
               headers={**_as("admin"), "content-type": "application/json"})
    assert r.status_code == 400, r.text
    r = c.post("/strato/v1/children", json={"name": "kid", "url": "http://127.0.0.1:9",
                                            "tags": ["t"] * 100_000}, headers=_as("join"))
    assert r.status_code == 400 and "tags" in r.text, r.text
