"""POST /strato/v1/schedule and /strato/v1/explain, read as a spec."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.api.auth import Context, NoAuth
from strato.config import Settings
from strato.store.db import Database
from tests.helpers import api


def host(c: TestClient, name: str, location: str | None = None, tags: list[str] | None = None,
         vcpu: int = 8, traits: list[str] | None = None) -> str:
    rp = c.post("/resource_providers", json={"name": name}).json()
    r = c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 8192}}})
    assert r.status_code == 200, r.text
    if traits:
        r = c.put(f"/resource_providers/{rp['uuid']}/traits", json={
            "traits": traits, "resource_provider_generation": 1})
        assert r.status_code == 200, r.text
    if location or tags:
        r = c.put(f"/strato/v1/providers/{rp['uuid']}/meta",
                  json={"location": location, "tags": tags or []})
        assert r.status_code == 200, r.text
    return str(rp["uuid"])


def req(n: int = 1, vcpu: int = 1, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"consumers": [str(uuid.uuid4()) for _ in range(n)],
                            "project_id": "p", "user_id": "u",
                            "groups": [{"resources": {"VCPU": vcpu}}]}
    body.update(kw)
    return body


def schedule(c: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    r = c.post("/strato/v1/schedule", json=body)
    assert r.status_code == status, r.text
    return dict(r.json())


def used(c: TestClient, rp: str) -> int:
    return int(c.get(f"/resource_providers/{rp}/usages").json()["usages"].get("VCPU", 0))


@pytest.fixture
def rack_hosts(client: TestClient) -> dict[str, str]:
    """8 hosts at site/room/rack/host: 2 sites, 2 rooms per site, 1 rack of 2 hosts per room."""
    out = {}
    for i in range(8):
        site = "dfw" if i < 4 else "ord"
        room = f"room{i // 2 % 2}"
        rack = f"rack{i // 2}"
        out[f"h{i}"] = host(client, f"h{i}", f"{site}/{room}/{rack}/h{i}",
                            tags=["hipaa"] if i in (1, 6) else [])
    return out


def test_places_and_claims(any_client: TestClient) -> None:
    rp = host(any_client, "h")
    body = req(2, vcpu=3)
    ans = schedule(any_client, body)
    assert [p["provider"] for p in ans["placements"]] == [rp, rp]
    assert used(any_client, rp) == 6
    for p in ans["placements"]:
        got = any_client.get(f"/allocations/{p['consumer_uuid']}").json()
        assert got["allocations"][rp]["resources"] == {"VCPU": 3}
        assert got["project_id"] == "p"


def test_dry_run_claims_nothing(client: TestClient) -> None:
    rp = host(client, "h")
    ans = schedule(client, req(1, dry_run=True))
    assert ans["dry_run"] and ans["placements"][0]["provider"] == rp
    assert used(client, rp) == 0


def test_atomic_is_all_or_nothing_and_non_atomic_places_what_fits(client: TestClient) -> None:
    rp = host(client, "h", vcpu=4)
    r = client.post("/strato/v1/schedule", json=req(3, vcpu=2))
    assert r.status_code == 409
    err = r.json()
    assert err["errors"][0]["code"] == "strato.no_valid_placement"
    assert "explain" in err
    assert used(client, rp) == 0
    ans = schedule(client, req(3, vcpu=2, atomic=False))
    assert len(ans["placements"]) == 2 and len(ans["unplaced"]) == 1
    assert used(client, rp) == 4


def test_location_pattern_and_pragma(client: TestClient, rack_hosts: dict[str, str]) -> None:
    ans = schedule(client, req(1, constraints=[{"type": "location", "pattern": "ord/*"}]))
    assert ans["placements"][0]["location"].startswith("ord/")
    ans = schedule(client, req(1, constraints=[
        {"type": "location", "pattern": "h5.rack2.room0.ord"}]))
    assert ans["placements"][0]["provider"] == rack_hosts["h5"]
    r = client.post("/strato/v1/schedule", json=req(1, constraints=[
        {"type": "location", "pattern": "lon/*"}]))
    assert r.status_code == 409
    assert "location lon/*: 8 providers" in r.json()["errors"][0]["detail"]


def test_tags_required_and_forbidden(client: TestClient, rack_hosts: dict[str, str]) -> None:
    ans = schedule(client, req(2, constraints=[{"type": "tags", "required": ["hipaa"]}],
                               group="g", ))
    assert {p["provider"] for p in ans["placements"]} <= {rack_hosts["h1"], rack_hosts["h6"]}
    ans = schedule(client, req(6, constraints=[{"type": "tags", "forbidden": ["hipaa"]}]))
    assert not {p["provider"] for p in ans["placements"]} & {rack_hosts["h1"],
                                                             rack_hosts["h6"]}


@pytest.mark.parametrize(("level", "distinct"), [("host", 8), ("rack", 4), ("room", 4),
                                                 ("site", 2)])
def test_anti_affinity_at_each_level(client: TestClient, rack_hosts: dict[str, str],
                                     level: str, distinct: int) -> None:
    rule = [{"type": "anti_affinity", "level": level}]
    placed = []
    for _ in range(distinct):
        ans = schedule(client, req(1, group="web", constraints=rule))
        placed.append(ans["placements"][0]["location"])
    depth = {"host": 4, "rack": 3, "room": 2, "site": 1}[level]
    domains = {"/".join(loc.split("/")[:depth]) for loc in placed}
    assert len(domains) == distinct
    r = client.post("/strato/v1/schedule", json=req(1, group="web", constraints=rule))
    assert r.status_code == 409
    assert f"anti_affinity web@{level}" in r.json()["errors"][0]["detail"]


def test_anti_affinity_among_new_instances(client: TestClient,
                                           rack_hosts: dict[str, str]) -> None:
    ans = schedule(client, req(4, group="db", constraints=[
        {"type": "anti_affinity", "level": "rack"}]))
    racks = {"/".join(p["location"].split("/")[:3]) for p in ans["placements"]}
    assert len(racks) == 4
    schedule(client, req(5, group="db2", constraints=[
        {"type": "anti_affinity", "level": "rack"}]), status=409)


@pytest.mark.parametrize("level", ["host", "rack", "room", "site"])
def test_affinity_at_each_level(client: TestClient, rack_hosts: dict[str, str],
                                level: str) -> None:
    rule = [{"type": "affinity", "level": level}]
    depth = {"host": 4, "rack": 3, "room": 2, "site": 1}[level]
    first = schedule(client, req(2, group="app", constraints=rule))
    later = schedule(client, req(1, group="app", constraints=rule))
    locs = [p["location"] for p in first["placements"] + later["placements"]]
    assert len({"/".join(loc.split("/")[:depth]) for loc in locs}) == 1


def test_affinity_with_another_group(client: TestClient, rack_hosts: dict[str, str]) -> None:
    db = schedule(client, req(1, group="db", constraints=[
        {"type": "location", "pattern": "ord/room1/*"}]))
    app = schedule(client, req(3, group="app", constraints=[
        {"type": "affinity", "group": "db", "level": "room"}]))
    assert all(p["location"].startswith("ord/room1/") for p in app["placements"])
    assert db["placements"][0]["location"].startswith("ord/room1/")


def test_soft_rules_relaxed_lowest_weight_first(client: TestClient,
                                                rack_hosts: dict[str, str]) -> None:
    # Both cannot hold: hipaa hosts are h1 (dfw) and h6 (ord); ask for lon and hipaa.
    ans = schedule(client, req(1, constraints=[
        {"type": "tags", "required": ["hipaa"], "hard": False, "weight": 5},
        {"type": "location", "pattern": "lon/*", "hard": False, "weight": 1}]))
    assert [r["type"] for r in ans["relaxed"]] == ["location"]
    assert ans["placements"][0]["provider"] in (rack_hosts["h1"], rack_hosts["h6"])
    ans = schedule(client, req(1, constraints=[
        {"type": "tags", "required": ["nope"], "hard": False, "weight": 1},
        {"type": "location", "pattern": "lon/*", "hard": False, "weight": 3}]))
    assert [r["type"] for r in ans["relaxed"]] == ["tags", "location"]
    # Satisfiable soft rules are kept, not relaxed.
    ans = schedule(client, req(1, constraints=[
        {"type": "location", "pattern": "dfw/*", "hard": False}]))
    assert ans["relaxed"] == [] and ans["placements"][0]["location"].startswith("dfw/")


def test_soft_anti_affinity_prefers_spreading(client: TestClient,
                                              rack_hosts: dict[str, str]) -> None:
    ans = schedule(client, req(10, group="w", constraints=[
        {"type": "anti_affinity", "level": "host", "hard": False, "weight": 1}]))
    assert len(ans["placements"]) == 10
    assert len({p["provider"] for p in ans["placements"]}) == 8
    assert [r["type"] for r in ans["relaxed"]] == ["anti_affinity"]


def test_relaxed_soft_anti_affinity_spreads_evenly(client: TestClient) -> None:
    # Two hosts, eight instances: the rule is relaxed, and they go 4 and 4
    # (they went 7 and 1, on whichever host scored best, before).
    hosts = [host(client, f"h{i}", location=f"dfw/room1/rack1/h{i}", vcpu=16)
             for i in range(2)]
    for weigher in ("spread", "pack"):
        ans = schedule(client, req(8, group=f"g-{weigher}", weigher={"name": weigher},
                                   constraints=[{"type": "anti_affinity", "level": "host",
                                                 "hard": False}]))
        assert [r["type"] for r in ans["relaxed"]] == ["anti_affinity"]
        assert sorted(used(client, h) for h in hosts) == (
            [4, 4] if weigher == "spread" else [8, 8])


def test_rare_hosts_are_kept_for_the_requests_that_ask_for_them(client: TestClient) -> None:
    # Five hosts; the two smallest (what `pack` would fill first) each have a
    # rare feature: a CPU feature trait, a compliance tag.
    plain = [host(client, f"h{i}") for i in range(3)]
    gpu = host(client, "gpu", vcpu=4, traits=["HW_CPU_X86_AVX512F"])
    hipaa = host(client, "hipaa", vcpu=4, tags=["hipaa"])
    pack = {"name": "pack"}
    ans = schedule(client, req(1, weigher=pack))
    assert ans["placements"][0]["provider"] in plain
    ans = schedule(client, req(1, weigher=pack, groups=[
        {"resources": {"VCPU": 1}, "required": ["HW_CPU_X86_AVX512F"]}]))
    assert ans["placements"][0]["provider"] == gpu
    ans = schedule(client, req(1, weigher=pack, constraints=[
        {"type": "tags", "required": ["hipaa"]}]))
    assert ans["placements"][0]["provider"] == hipaa
    # Turned off, packing alone decides: a 4-vCPU host.
    ans = schedule(client, req(1, weigher={**pack, "spare": False}))
    assert ans["placements"][0]["provider"] in (gpu, hipaa)
    # Spared, not forbidden: with the other hosts full, the rare ones are used.
    for rp in plain:
        schedule(client, req(1, vcpu=8 - used(client, rp), groups=[
            {"resources": {"VCPU": 8 - used(client, rp)}, "in_tree": rp}]))
    ans = schedule(client, req(1, vcpu=2, weigher=pack))
    assert ans["placements"][0]["provider"] in (gpu, hipaa)


def test_sparing_costs_no_instance(client: TestClient) -> None:
    plain = [host(client, f"h{i}") for i in range(3)]
    rare = host(client, "hipaa", tags=["hipaa"])
    ans = schedule(client, req(4, vcpu=8, atomic=False))
    assert sorted(p["provider"] for p in ans["placements"]) == sorted([*plain, rare])
    assert ans["unplaced"] == []


def test_request_id_is_idempotent(any_client: TestClient) -> None:
    rp = host(any_client, "h", vcpu=4)
    body = req(1, vcpu=1, request_id="req-42")
    first = schedule(any_client, body)
    again = schedule(any_client, body)
    assert again["placements"] == first["placements"] and again.get("replayed")
    assert used(any_client, rp) == 1
    other = {**body, "consumers": [str(uuid.uuid4())]}
    assert schedule(any_client, other)["placements"] == first["placements"]
    assert used(any_client, rp) == 1


def test_existing_consumer_is_refused(client: TestClient) -> None:
    host(client, "h")
    body = req(1)
    schedule(client, body)
    r = client.post("/strato/v1/schedule", json=body)
    assert r.status_code == 409
    assert r.json()["errors"][0]["code"] == "placement.concurrent_update"


def test_explain_counts_add_up(client: TestClient) -> None:
    for i in range(5):
        host(client, f"small{i}", vcpu=1)
    for i in range(3):
        host(client, f"big{i}", vcpu=16, traits=["HW_CPU_X86_AVX2"] if i == 0 else None)
    r = client.post("/strato/v1/explain", json=req(
        1, groups=[{"resources": {"VCPU": 4}, "required": ["HW_CPU_X86_AVX2"]}]))
    assert r.status_code == 200
    g = r.json()["explain"]["groups"][0]
    assert g["providers"] == 8
    assert sum(s["count"] for s in g["removed"]) + g["remaining"] == g["providers"]
    reasons = {s["reason"]: s["count"] for s in g["removed"]}
    assert reasons == {"VCPU: short of 4": 5, "trait HW_CPU_X86_AVX2 missing": 2}
    assert r.json()["placements"] and r.json()["dry_run"]


def test_explain_when_nothing_fits(client: TestClient) -> None:
    host(client, "h", vcpu=2)
    r = client.post("/strato/v1/explain", json=req(1, vcpu=4))
    assert r.status_code == 200
    assert r.json()["placements"] == [] and "VCPU: short of 4" in r.json()["detail"]


def test_a_zone_without_providers_says_so(client: TestClient) -> None:
    # Not "every provider passed the filters": there were none to filter.
    for path in ("/strato/v1/explain", "/strato/v1/schedule"):
        r = client.post(path, json=req(1))
        detail = r.json()["detail"] if r.status_code == 200 else r.json()["errors"][0]["detail"]
        assert "this zone has no providers: add some" in detail, r.text
    host(client, "h", vcpu=2)
    r = client.post("/strato/v1/explain", json=req(1, vcpu=4))
    assert r.json()["explain"]["summary"] == "VCPU: short of 4: 1 provider"


@pytest.mark.parametrize(("body", "needle"), [
    (req(1, groups=[{"resources": {"CUSTOM_NOPE": 1}}]), "CUSTOM_NOPE"),
    (req(1, groups=[{"resources": {"VCPU": 1}, "required": ["CUSTOM_NOPE"]}]), "CUSTOM_NOPE"),
    (req(1, group="g", constraints=[{"type": "anti_affinity", "level": "galaxy"}]), "galaxy"),
    (req(1, consumers=["not-a-uuid"]), "consumers"),
    (req(1, extra_field=1), "extra_field"),
    (req(1, atomic="yes"), "atomic"),
    # A weight for a class the zone does not know, as a group's class: 400 naming
    # the field (it was taken silently and weighed nothing).
    (req(1, weigher={"class_weights": {"CUSTOM_NOPE": 2}}),
     "weigher.class_weights: unknown resource class(es): CUSTOM_NOPE"),
    (req(1, weigher={"class_weights": {"VCPU": 1, "FOO": 2, "CUSTOM_NOPE": 1}}),
     "weigher.class_weights: unknown resource class(es): CUSTOM_NOPE, FOO"),
    (req(1, weigher={"class_weights": {"vcpu": 2}}), "'vcpu' is not a valid name"),
])
def test_bad_requests_are_400_and_claim_nothing(client: TestClient, body: dict[str, Any],
                                                needle: str) -> None:
    rp = host(client, "h")
    r = client.post("/strato/v1/schedule", json=body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["errors"][0]["detail"]
    assert used(client, rp) == 0


def test_class_weights_take_known_classes_custom_ones_too(client: TestClient) -> None:
    host(client, "h")
    assert client.put("/resource_classes/CUSTOM_GPU").status_code == 201
    for weights in ({"VCPU": 2, "MEMORY_MB": 0.5}, {"CUSTOM_GPU": 3}, {}):
        for path in ("/strato/v1/schedule", "/strato/v1/explain"):
            r = client.post(path, json=req(1, weigher={"class_weights": weights},
                                           dry_run=True))
            assert r.status_code == 200, (weights, r.text)
    r = client.post("/strato/v1/explain", json=req(1, weigher={"class_weights": {"FOO": 1}}))
    assert r.status_code == 400 and "weigher.class_weights" in r.text, r.text


def test_stale_hosts_are_excluded(client: TestClient) -> None:
    rp = host(client, "h")
    r = client.put(f"/strato/v1/providers/{rp}/meta",
                   json={"location": None, "tags": [], "heartbeat": True})
    assert r.status_code == 200, r.text
    r = client.post("/strato/v1/schedule", json=req(1))
    assert r.status_code == 409
    assert "stale" in r.json()["errors"][0]["detail"]
    assert client.post(f"/strato/v1/providers/{rp}/heartbeat", json={}).status_code in (200,
                                                                                        204)
    schedule(client, req(1))


def test_answers_carry_the_api_headers_and_bad_json_is_400(client: TestClient) -> None:
    """The schedule route is served by a lean path (strato/api/fast.py): its
    answers must look like every other route's."""
    host(client, "h", vcpu=2)
    for body, status in ((req(1), 200), (req(1, vcpu=4), 409)):
        r = client.post("/strato/v1/schedule", json=body)
        assert r.status_code == status, r.text
        assert r.headers["openstack-api-version"].startswith("placement ")
        assert r.headers["x-openstack-request-id"].startswith("req-")
        assert r.headers["content-type"] == "application/json"
        if status == 409:
            err = r.json()["errors"][0]
            assert err["request_id"] == r.headers["x-openstack-request-id"]
            assert r.json()["explain"]["summary"]
    r = client.post("/strato/v1/schedule", content=b"{not json",
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["errors"][0]["status"] == 400
    assert client.get("/strato/v1/schedule").status_code == 405


def test_the_lean_path_answers_like_the_framework(sqlite_database: Database) -> None:
    """POST /strato/v1/schedule takes a lean path (strato/api/fast.py): what it
    passes on to the route carries the API headers once, a refused token is
    Placement's 401, and an error nobody expected is a 500 in Placement's JSON
    body."""
    class Flaky(NoAuth):
        def authenticate(self, headers: dict[str, str]) -> Context:
            if headers.get("x-auth-token") == "boom":
                raise RuntimeError("auth backend down")
            return super().authenticate(headers)

    app = create_app(Settings(db_url=sqlite_database.url), db=sqlite_database,
                     migrate=False, auth=Flaky())
    with TestClient(app, headers={"x-auth-token": "admin"},
                    raise_server_exceptions=False) as c:
        passed_on = c.post("/strato/v1/schedule", json={"consumers": "nope"})
        assert passed_on.status_code == 400, passed_on.text
        assert len(passed_on.headers.get_list("x-openstack-request-id")) == 1
        assert len(passed_on.headers.get_list("openstack-api-version")) == 1
        assert passed_on.json()["errors"][0]["request_id"] == \
            passed_on.headers["x-openstack-request-id"]
        member = c.post("/strato/v1/schedule", json=req(1),
                        headers={"x-auth-token": "user", "x-roles": "member"})
        assert member.status_code == 403, member.text
        broken = c.post("/strato/v1/schedule", json=req(1), headers={"x-auth-token": "boom"})
        assert broken.status_code == 500
        assert broken.json()["errors"][0]["detail"] == "unexpected error: RuntimeError"
        assert c.post("/strato/v1/schedule", json=req(1), headers={"x-auth-token": ""}
                      ).status_code == 401


def test_a_release_frees_room_in_the_index_without_reading_the_store(
        client: TestClient) -> None:
    """DELETE /allocations/{consumer} reports what it freed to the scheduler's
    index as a claim does: the next request plans on it without reading the
    store back, and sees the room."""
    rp = host(client, "h1", vcpu=4)
    engine = client.app.state.scheduler.engine  # type: ignore[attr-defined]
    first = schedule(client, req(n=4))
    assert used(client, rp) == 4
    schedule(client, req(), status=409)  # full
    reads = engine.stats.incremental + engine.stats.full_loads
    for p in first["placements"][:2]:
        assert client.delete(f"/allocations/{p['consumer_uuid']}").status_code == 204
    assert client.delete(f"/allocations/{first['placements'][0]['consumer_uuid']}"
                         ).status_code == 404
    again = schedule(client, req(n=2))
    assert {p["provider"] for p in again["placements"]} == {rp}
    assert engine.stats.incremental + engine.stats.full_loads == reads
    assert used(client, rp) == 4


def test_placement_writes_reach_the_index_without_a_read(client: TestClient) -> None:
    """PUT /allocations (Nova's claim) runs in the writer's group commit and
    reports what moved, a replacement included, to the scheduler's index."""
    rp = host(client, "h1", vcpu=4)
    engine = client.app.state.scheduler.engine  # type: ignore[attr-defined]
    schedule(client, req())  # 1 used
    reads = engine.stats.incremental + engine.stats.full_loads
    consumer = str(uuid.uuid4())

    def put(vcpu: int, generation: int | None) -> None:
        r = client.put(f"/allocations/{consumer}", json={
            "allocations": {rp: {"resources": {"VCPU": vcpu}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": generation, "consumer_type": "INSTANCE"})
        assert r.status_code == 204, r.text
    put(3, None)
    schedule(client, req(), status=409)  # 4 of 4 used
    put(1, 1)  # replaced: 2 of 4 used
    schedule(client, req(n=2))
    schedule(client, req(), status=409)
    assert engine.stats.incremental + engine.stats.full_loads == reads
    assert used(client, rp) == 4


def test_placement_writes_never_wait_for_the_disk_on_the_loop(
        client: TestClient, sqlite_database: Database) -> None:
    """PUT and DELETE /allocations never fsync on the event loop, where a slow
    disk would stall every request the zone serves: they commit there
    without waiting for the disk (or in the writer thread), and each is
    answered only once an fsync in the syncer thread has it."""
    import threading

    from strato.observe import Observer

    assert sqlite_database.fsyncs
    lazy = sqlite_database._lazy
    assert lazy is not None
    rp = host(client, "h1", vcpu=4)
    where: list[str] = []
    fsyncs: list[str] = []
    real = lazy._fsync

    def fsync() -> bool:
        fsyncs.append(threading.current_thread().name)
        return real()
    lazy._fsync = fsync  # type: ignore[method-assign]

    class Where(Observer):
        def committed(self, seconds: float) -> None:
            where.append(threading.current_thread().name)
    sqlite_database.observer = Where()
    consumer = "0b8b1a0e-3a4c-4c0e-9a57-1d6c2b7e5f10"
    for vcpu, gen in ((1, None), (2, 1)):
        r = client.put(f"/allocations/{consumer}", json={
            "allocations": {rp: {"resources": {"VCPU": vcpu}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": gen, "consumer_type": "INSTANCE"})
        assert r.status_code == 204, r.text
        assert lazy._synced >= lazy.written >= 1  # on the disk before the answer
    assert client.delete(f"/allocations/{consumer}").status_code == 204
    assert lazy._synced >= lazy.written
    assert len(where) == 3
    inline = sqlite_database._inline
    if any(name != "strato-writer" for name in where):
        # Committed on the loop: only by the connection that never waits.
        assert inline is not None
        driver = inline.connection.driver_connection
        assert driver is not None
        assert driver.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert fsyncs and all(name.startswith("strato-") for name in fsyncs)
    assert used(client, rp) == 0


def test_an_explanation_does_not_repeat_every_aggregate_asked_for(client: TestClient) -> None:
    # 40,000 aggregates in one member_of list (1.5 MiB): every reason that
    # named them all made a 4.4 MB refusal. Reasons list the first few now.
    api.make_provider(client, "h", {"VCPU": {"total": 8}})
    aggs = [str(uuid.uuid4()) for _ in range(40_000)]
    r = client.post("/strato/v1/schedule", json={
        "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
        "groups": [{"resources": {"VCPU": 1}, "member_of": [aggs]}],
        "dry_run": True, "explain": True})
    assert r.status_code == 409, r.text[:300]
    assert len(r.content) < 20_000, len(r.content)
    assert " and 39995 more" in r.text


def test_existing_consumer_is_refused_when_nothing_else_fits(client: TestClient) -> None:
    """Its own allocations fill the zone: still a 409 concurrent_update, as when
    there is room (it said "no valid placement", which a retry repeats)."""
    host(client, "h", vcpu=4)
    body = req(1, vcpu=4)
    schedule(client, body)
    for again in (body, {**body, "consumers": [str(uuid.uuid4()), *body["consumers"]],
                         "atomic": False}):
        r = client.post("/strato/v1/schedule", json=again)
        assert r.status_code == 409, r.text
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update", r.text
    # A dry run claims nothing: it says what fits.
    r = client.post("/strato/v1/schedule", json={**body, "dry_run": True})
    assert r.status_code == 409, r.text
    assert r.json()["errors"][0]["code"] == "strato.no_valid_placement", r.text
