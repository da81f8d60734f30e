"""Behaviour every route shares: errors, versions, auth, limits."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database


def test_root_needs_no_token_and_reports_versions(client: TestClient) -> None:
    r = client.get("/", headers={"x-auth-token": ""})
    assert r.status_code == 200
    v = r.json()["versions"][0]
    assert (v["min_version"], v["max_version"], v["status"]) == ("1.0", "1.39", "CURRENT")


def test_version_and_request_id_headers_on_every_answer(client: TestClient) -> None:
    r = client.get("/resource_providers/nope", headers={"openstack-api-version":
                                                        "placement 1.14"})
    assert r.status_code == 404
    assert r.headers["openstack-api-version"] == "placement 1.14"
    assert "openstack-api-version" in r.headers["vary"]
    rid = r.headers["x-openstack-request-id"]
    assert r.json()["errors"][0]["request_id"] == rid


def test_no_version_header_means_1_0(client: TestClient) -> None:
    r = client.get("/resource_providers", headers={"openstack-api-version": ""})
    assert r.headers["openstack-api-version"] == "placement 1.0"
    r = client.get("/resource_providers", headers={"openstack-api-version": "compute 2.1"})
    assert r.headers["openstack-api-version"] == "placement 1.0"


def test_latest(client: TestClient) -> None:
    r = client.get("/", headers={"openstack-api-version": "placement latest"})
    assert r.headers["openstack-api-version"] == "placement 1.39"


def test_unknown_route_and_method(client: TestClient) -> None:
    r = client.get("/nowhere")
    assert r.status_code == 404 and r.json()["errors"][0]["status"] == 404
    r = client.patch("/resource_providers")
    assert r.status_code == 405
    assert "allow" in {k.lower() for k in r.headers}
    assert r.json()["errors"][0]["title"] == "Method Not Allowed"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
@pytest.mark.parametrize("path", ["/resource_providers/", "/traits/", "/usages/?project_id=p",
                                  "/resource_providers/7c6f9bb6-0d9e-4b0b-9d6a-43f1d3c2a1b4/",
                                  "/strato/v1/summary/"])
def test_a_trailing_slash_is_404_not_a_redirect(client: TestClient, method: str,
                                                path: str) -> None:
    # Placement's routes match no path with a trailing slash (404). A redirect
    # (Starlette's default) sent the client, body and method included, to a
    # URL built from its Host header.
    r = client.request(method, path, headers={"host": "elsewhere.example"},
                       json={"name": "x"} if method in ("POST", "PUT") else None,
                       follow_redirects=False)
    assert r.status_code == 404
    assert "location" not in r.headers
    assert r.json()["errors"][0]["status"] == 404


def test_too_large_body_is_413_and_changes_nothing(sqlite_database: Database) -> None:
    app = create_app(Settings(db_url=sqlite_database.url, max_body_bytes=1024),
                     db=sqlite_database, migrate=False)
    with TestClient(app, headers={"x-auth-token": "admin",
                                  "openstack-api-version": "placement latest"}) as c:
        r = c.post("/resource_providers", json={"name": "x" * 2000})
        assert r.status_code == 413
        assert r.json()["errors"][0]["detail"]
        assert c.get("/resource_providers").json()["resource_providers"] == []


def test_configured_token(sqlite_database: Database) -> None:
    app = create_app(Settings(db_url=sqlite_database.url, auth_token="s3cret"),
                     db=sqlite_database, migrate=False)
    with TestClient(app) as c:
        assert c.get("/resource_providers", headers={"x-auth-token": "admin"}
                     ).status_code == 401
        assert c.get("/resource_providers", headers={"x-auth-token": "s3cret"}
                     ).status_code == 200
        r = c.get("/resource_providers")
        assert r.status_code == 401
        # A configured token is not given away: no development-mode hint.
        assert "admin" not in r.json()["errors"][0]["detail"]


def test_development_mode_says_which_token_to_send(sqlite_database: Database) -> None:
    app = create_app(Settings(db_url=sqlite_database.url), db=sqlite_database, migrate=False)
    with TestClient(app) as c:
        r = c.get("/resource_providers")
        assert r.status_code == 401
        assert "'X-Auth-Token: admin'" in r.json()["errors"][0]["detail"]


def test_nul_bytes_are_never_a_500(any_client: TestClient) -> None:
    assert any_client.get("/resource_providers/%00").status_code == 404
    r = any_client.get("/resource_providers?name=%00")
    assert r.status_code in (200, 400)
    r = any_client.post("/resource_providers", json={"name": "a\x00b"})
    assert r.status_code == 400
    assert "NUL character" in r.json()["errors"][0]["detail"]


@pytest.mark.parametrize("value", ["placement latest latest", "placement 1.5 extra",
                                   "placement 1.5, placement 1.x"])
def test_a_malformed_version_is_400(client: TestClient, value: str) -> None:
    """`placement <major.minor>` or `placement latest`; anything else after
    `placement` is malformed, never served at 1.0 (Placement answers 400)."""
    r = client.get("/resource_providers", headers={"openstack-api-version": value})
    assert r.status_code == 400, r.text
    assert "invalid version string" in r.json()["errors"][0]["detail"]
    # A bare `placement` names no version: skipped (microversion-parse's reading).
    r = client.get("/resource_providers", headers={"openstack-api-version": "placement"})
    assert r.status_code == 200 and r.headers["openstack-api-version"] == "placement 1.0"
    r = client.get("/resource_providers",
                   headers={"openstack-api-version": "compute 2.1, placement 1.5"})
    assert r.headers["openstack-api-version"] == "placement 1.5"


@pytest.mark.parametrize(("value", "status", "served"), [
    ("placement LATEST", 400, None),  # 'latest' is lower case only
    ("placement 1.-1", 406, None),    # a version, just not one there is
    ("placement 1.+5", 200, "placement 1.5"),
    ("placement 01.05", 200, "placement 1.5"),
])
def test_a_version_is_read_as_microversion_parse_reads_it(client: TestClient, value: str,
                                                          status: int, served: str | None
                                                          ) -> None:
    """Placement's reading: 'latest', or two parts that Python's int() takes
    (then 406 unless it is a version there is); anything else is a 400."""
    r = client.get("/resource_providers", headers={"openstack-api-version": value})
    assert r.status_code == status, r.text
    if served:
        assert r.headers["openstack-api-version"] == served


@pytest.mark.parametrize(("path", "accept", "media"), [
    ("/metrics", "text/plain", "text/plain"),
    ("/metrics", "text/plain;version=0.0.4", "text/plain"),
    ("/ui", "text/html", "text/html"),
    ("/docs", "text/html", "text/html"),
])
def test_a_page_that_is_no_json_is_served_to_a_client_that_accepts_what_it_is(
        client: TestClient, path: str, accept: str, media: str) -> None:
    # Placement's 406 ("Only application/json is provided") is for its JSON
    # routes; these pages are Prometheus text and HTML.
    r = client.get(path, headers={"accept": accept})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(media)


def test_a_json_route_still_refuses_a_client_that_takes_no_json(client: TestClient) -> None:
    assert client.get("/healthz", headers={"accept": "text/plain"}).status_code == 406
    assert client.get("/resource_providers", headers={"accept": "text/html"}).status_code == 406
