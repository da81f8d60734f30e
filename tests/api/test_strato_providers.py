"""/strato/v1/providers: metadata, heartbeats and the stale list, read as a spec."""

from __future__ import annotations

import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database
from tests.conftest import ADMIN


def _provider(client: TestClient, name: str, parent: str | None = None) -> str:
    body: dict[str, Any] = {"name": name}
    if parent:
        body["parent_provider_uuid"] = parent
    r = client.post("/resource_providers", json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["uuid"])


def test_put_and_get_meta_with_inheritance(any_client: TestClient) -> None:
    host = _provider(any_client, "host")
    numa = _provider(any_client, "numa0", host)
    r = any_client.put(f"/strato/v1/providers/{host}/meta",
                       json={"location": "m1.rack1.room1.dfw", "tags": ["pci-dss", "hipaa"]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["location"] == got["own_location"] == "dfw/room1/rack1/m1"
    assert got["tags"] == ["hipaa", "pci-dss"]
    assert (got["heartbeat"], got["stale"], got["last_report_at"]) == (False, False, None)
    child = any_client.get(f"/strato/v1/providers/{numa}/meta").json()
    assert (child["location"], child["own_location"]) == ("dfw/room1/rack1/m1", None)
    assert child["root_provider_uuid"] == host


@pytest.mark.parametrize(("body", "field"), [
    ({"location": "dfw/a.b", "tags": []}, "location"),
    ({"location": "dfw//x", "tags": []}, "location"),
    ({"location": "dfw", "tags": ["PCI"]}, "tags"),
    ({"location": "dfw", "tags": "hipaa"}, "tags"),
    ({"location": 5, "tags": []}, "location"),
    ({"tags": []}, "location"),
    ({"location": "dfw", "tags": [], "colour": "red"}, "colour"),
])
def test_bad_input_is_400_naming_the_field_and_changes_nothing(
        client: TestClient, body: dict[str, Any], field: str) -> None:
    host = _provider(client, "host")
    ok = {"location": "ord/r1", "tags": ["hipaa"]}
    assert client.put(f"/strato/v1/providers/{host}/meta", json=ok).status_code == 200
    r = client.put(f"/strato/v1/providers/{host}/meta", json=body)
    assert r.status_code == 400, r.text
    assert field in r.json()["errors"][0]["detail"]
    got = client.get(f"/strato/v1/providers/{host}/meta").json()
    assert (got["location"], got["tags"]) == ("ord/r1", ["hipaa"])


def test_a_location_outside_the_zone_prefix_is_400_and_changes_nothing(
        sqlite_database: Database) -> None:
    # A parent prunes this zone by its prefix: a provider elsewhere would be
    # out of reach of the requests that ask for where it is.
    app = create_app(Settings(db_url=sqlite_database.url, location_prefix="dfw"),
                     db=sqlite_database, migrate=False)
    with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as client:
        host = _provider(client, "host")
        for inside in ("dfw", "dfw/room1/rack1/m1", "m1.rack1.room1.dfw", None):
            body = {"location": inside, "tags": []}
            r = client.put(f"/strato/v1/providers/{host}/meta", json=body)
            assert r.status_code == 200, (inside, r.text)
        for outside in ("ord/room1", "m1.rack1.room1.ord", "dfwx/room1", "room1.dfw2"):
            r = client.put(f"/strato/v1/providers/{host}/meta",
                           json={"location": outside, "tags": ["hipaa"]})
            assert r.status_code == 400, (outside, r.text)
            detail = r.json()["errors"][0]["detail"]
            assert "location" in detail and "'dfw'" in detail, detail
        got = client.get(f"/strato/v1/providers/{host}/meta").json()
        assert (got["location"], got["own_location"], got["tags"]) == (None, None, [])


def test_unknown_provider_is_404(client: TestClient) -> None:
    missing = "00000000-0000-0000-0000-000000000001"
    assert client.get(f"/strato/v1/providers/{missing}/meta").status_code == 404
    assert client.post(f"/strato/v1/providers/{missing}/heartbeat").status_code == 404
    r = client.put(f"/strato/v1/providers/{missing}/meta", json={"location": None, "tags": []})
    assert r.status_code == 404


def test_admin_only(client: TestClient) -> None:
    host = _provider(client, "host")
    user = {"x-auth-token": "alice:p1"}
    assert client.get(f"/strato/v1/providers/{host}/meta", headers=user).status_code == 403
    assert client.post(f"/strato/v1/providers/{host}/heartbeat", headers=user).status_code == 403
    assert client.get("/strato/v1/providers", headers=user).status_code == 403


def test_heartbeat_staleness_and_stale_list(sqlite_database: Database) -> None:
    # Long enough that a loaded machine does not make the fresh heartbeat stale.
    app = create_app(Settings(db_url=sqlite_database.url, stale_after=2.0),
                     db=sqlite_database, migrate=False)
    with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as c:
        host = _provider(c, "host")
        api_only = _provider(c, "api-only")
        r = c.post(f"/strato/v1/providers/{host}/heartbeat")
        assert r.status_code == 200, r.text
        assert r.json()["resource_provider_generation"] == 0 and not r.json()["was_stale"]
        assert c.get("/strato/v1/providers?stale=true").json()["providers"] == []
        time.sleep(2.1)
        listed = c.get("/strato/v1/providers?stale=true").json()
        assert listed["stale_after"] == 2.0
        assert [p["uuid"] for p in listed["providers"]] == [host]
        assert listed["providers"][0]["stale_reason"].startswith("stale: no report for ")
        fresh = c.get("/strato/v1/providers?stale=false").json()["providers"]
        assert [p["uuid"] for p in fresh] == [api_only]
        assert c.post(f"/strato/v1/providers/{host}/heartbeat").json()["was_stale"] is True
        got = c.get(f"/strato/v1/providers/{host}/meta").json()
        assert got["stale"] is False and got["heartbeat"] is True
        assert got["last_report_at"].endswith("Z")


def test_tag_filter_and_openapi(client: TestClient) -> None:
    a, _ = _provider(client, "a"), _provider(client, "b")
    client.put(f"/strato/v1/providers/{a}/meta", json={"location": None, "tags": ["hipaa"]})
    got = client.get("/strato/v1/providers?tag=hipaa").json()["providers"]
    assert [p["uuid"] for p in got] == [a]
    spec = client.get("/openapi.json").json()
    assert {"MetaUpdate", "MetaView", "MetaList", "HeartbeatView"} <= set(
        spec["components"]["schemas"])
    assert "/strato/v1/providers/{uuid}/heartbeat" in spec["paths"]


def test_a_zones_tag_is_every_providers(sqlite_database: Database) -> None:
    """`strato serve --tag hipaa`: the scheduler's tag rules see it on every
    provider of the zone, and so does the listing's filter."""
    app = create_app(Settings(db_url=sqlite_database.url, zone_tags=("hipaa",)),
                     db=sqlite_database, migrate=False)
    with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as c:
        a, b = _provider(c, "a"), _provider(c, "b")
        c.put(f"/strato/v1/providers/{a}/meta", json={"location": None, "tags": ["gpu"]})
        got = c.get("/strato/v1/providers?tag=hipaa").json()["providers"]
        assert sorted(p["uuid"] for p in got) == sorted([a, b])
        assert [p["uuid"] for p in c.get("/strato/v1/providers?tag=gpu").json()[
            "providers"]] == [a]
        assert c.get("/strato/v1/providers?tag=other").json()["providers"] == []
        meta = c.get(f"/strato/v1/providers/{a}/meta").json()
        assert meta["tags"] == ["gpu"] and meta["zone_tags"] == ["hipaa"]
