"""/healthz, /readyz and /metrics: no token needed; readiness follows the
database (a real PostgreSQL database dropped under a running app); metrics
move with real requests."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store import in_doubt
from strato.store.db import Database
from strato.zone.inprocess import ZoneSpec, build
from tests.conftest import ADMIN, _pg_admin, pg_url
from tests.helpers import api
from tests.zone.test_tree import host


def value(text: str, name: str, **labels: str) -> float:
    """A sample's value from Prometheus text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-z_]+)(?:\{(.*)\})? ([0-9.e+-]+)$", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) \
                == ",".join(sorted(want.split(","))):
            return float(m.group(3))
    return 0.0


def test_health_needs_no_token(client: TestClient) -> None:
    anon = TestClient(client.app, raise_server_exceptions=False)
    r = anon.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = anon.get("/readyz")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ready"
    assert {k for k, c in body["checks"].items() if c["ok"]} == {"database", "schema", "index"}
    r = anon.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "strato_zone_info" in r.text
    # Everything else still needs one.
    assert anon.get("/resource_providers").status_code == 401


def test_metrics_move_with_requests(client: TestClient) -> None:
    rp = api.make_provider(client, "h1", {"VCPU": {"total": 4}})
    assert rp
    body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 1}}]}
    before = client.get("/metrics").text
    assert client.post("/strato/v1/schedule", json=body).status_code == 200
    big = {**body, "consumers": [str(uuid.uuid4())],
           "groups": [{"resources": {"VCPU": 64}}]}
    assert client.post("/strato/v1/schedule", json=big).status_code == 409
    after = client.get("/metrics").text
    for result, n in (("placed", 1), ("no_valid_placement", 1)):
        assert value(after, "strato_schedule_attempts_total", result=result) \
            - value(before, "strato_schedule_attempts_total", result=result) == n
    assert value(after, "strato_placements_total") - value(before, "strato_placements_total") == 1
    assert value(after, "strato_http_requests_total", method="GET",
                 route="/resource_providers/{uuid}", status="200") >= 0
    assert value(after, "strato_http_requests_total", method="POST",
                 route="/resource_providers", status="200") >= 1
    assert value(after, "strato_engine_providers") == 1
    # The decision, the claim and the store (its commits, and the fsyncs the
    # claim waited for: SQLite FULL), each timed.
    for name in ("strato_plan_duration_seconds_count", "strato_claim_duration_seconds_count",
                 "strato_db_commit_duration_seconds_count",
                 "strato_db_sync_duration_seconds_count",
                 "strato_engine_refresh_duration_seconds_count"):
        assert value(after, name) > value(before, name), name
    assert value(after, "strato_claim_duration_seconds_count") \
        - value(before, "strato_claim_duration_seconds_count") == 1
    assert value(after, "strato_requests_in_doubt") == 0
    assert "strato_claim_lost_races_total" in after
    client.get("/allocation_candidates?resources=VCPU:1&limit=1")
    text = client.get("/metrics").text
    assert value(text, "strato_allocation_candidates_returned_count") == 1
    # The lean paths (api/fast.py) skip the router: their routes are named all the same.
    for method, route in (("GET", "/allocation_candidates"), ("POST", "/strato/v1/schedule")):
        assert value(text, "strato_http_requests_total", method=method, route=route,
                     status="200") >= 1, route
    client.get(f"/resource_providers/{rp}/nope")
    assert value(client.get("/metrics").text, "strato_http_requests_total", method="GET",
                 route="unmatched", status="404") == 1
    assert value(text, "strato_allocation_candidates_returned_bucket", le="0.0") == 0
    assert value(text, "strato_allocation_candidates_returned_bucket", le="1.0") == 1


def test_metrics_of_a_tree(tmp_path: Path) -> None:
    """Through a three-zone tree: each zone counts the request it answered,
    its calls to its child by outcome, and its requests in doubt."""
    async def main() -> dict[str, str]:
        tree = build(tmp_path, [ZoneSpec("root"), ZoneSpec("mid", parent="root"),
                                ZoneSpec("cell", parent="mid")])
        try:
            await tree.link()
            await host(tree.client("cell"), "h0", "site1/rack0/h0")
            await tree.zone_tree("mid").refresh(fresh=True)
            await tree.zone_tree("root").refresh(fresh=True)
            r = await tree.client("root").post("/strato/v1/schedule", json={
                "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 1}}]})
            assert r.status_code == 200, r.text
            tree.kill("cell")
            await tree.zone_tree("mid").refresh(fresh=True)
            with tree.dbs["mid"].write() as conn:
                in_doubt.add(conn, "cell", "r1", [str(uuid.uuid4())], "lost answer")
            return {z: (await tree.client(z).get("/metrics")).text
                    for z in ("root", "mid", "cell")}
        finally:
            await tree.aclose()

    text = asyncio.run(main())
    for z in ("root", "mid", "cell"):
        assert value(text[z], "strato_schedule_attempts_total", result="placed") == 1, z
    assert value(text["cell"], "strato_placements_total") == 1
    assert value(text["cell"], "strato_claim_duration_seconds_count") == 1
    assert value(text["root"], "strato_child_call_duration_seconds_count", child="mid",
                 outcome="ok") >= 2
    assert value(text["mid"], "strato_child_call_duration_seconds_count", child="cell",
                 outcome="unreachable") >= 1
    assert value(text["mid"], "strato_requests_in_doubt", child="cell") == 1
    assert value(text["mid"], "strato_child_healthy", child="cell") == 0
    assert value(text["root"], "strato_child_healthy", child="mid") == 1


@pytest.fixture
def doomed_pg() -> Iterator[str]:
    name = f"strato_h_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    yield name
    with admin.connect() as c:
        c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.mark.postgres
def test_readyz_follows_the_database(doomed_pg: str) -> None:
    db = Database(pg_url(doomed_pg))
    app = create_app(Settings(db_url=db.url), db=db)
    try:
        with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as c:
            assert c.get("/readyz").status_code == 200
            admin = _pg_admin()
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE "{doomed_pg}" WITH (FORCE)')
            admin.dispose()
            r = c.get("/readyz")
            assert r.status_code == 503, r.text
            assert r.json()["checks"]["database"]["ok"] is False
            assert c.get("/healthz").status_code == 200  # the process still answers
    finally:
        db.dispose()


def test_metrics_behind_their_own_token(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    app = create_app(Settings(db_url=db.url, metrics_token="scrape-me"), db=db)
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            r = c.get("/metrics")
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
            assert c.get("/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
            utf8 = {"authorization": b"Bearer \xc3\xa9"}
            assert c.get("/metrics", headers=utf8).status_code == 401
            r = c.get("/metrics", headers={"authorization": "Bearer scrape-me"})
            assert r.status_code == 200 and "strato_zone_info" in r.text
            assert c.get("/metrics", headers={"x-auth-token": "scrape-me"}).status_code == 200
            assert c.get("/healthz").status_code == 200  # still open
    finally:
        db.dispose()



def test_readyz_says_what_the_parent_last_said(sqlite_database: Database) -> None:
    """Registering (the parent not reached yet) and registered are ready; a
    refusal (a wrong token, a name taken) needs an operator: 503; a zone an
    operator removed at the parent serves alone: ready."""
    from strato.process import free_port
    parent = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    app = create_app(Settings(db_url=sqlite_database.url, zone_name="dfw", parent_url=parent,
                              advertise_url="http://127.0.0.1:1"), db=sqlite_database)
    with TestClient(app) as c:
        for state, code in (("registering", 200), ("registered", 200), ("refused", 503),
                            ("removed", 200), ("invalid", 503)):
            if state != "registering":
                app.state.parent_contact.state = state
            r = c.get("/readyz")
            assert r.status_code == code, (state, r.text)
            assert r.json()["checks"]["parent"] == {"ok": code == 200, "state": state,
                                                    "url": parent}
