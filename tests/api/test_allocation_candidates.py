"""GET /allocation_candidates, read as a spec of Placement's behaviour."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.api.routes import allocation_candidates as ac
from strato.config import Settings
from strato.store.db import Database
from strato.store.migrate import upgrade
from tests.conftest import ADMIN
from tests.engine.cloud import AGG_A, AGG_B, SHARES, Cloud, inv

COMPUTE = "resources=VCPU:1,MEMORY_MB:512"


@pytest.fixture
def cloud(client: TestClient) -> Cloud:
    return Cloud(client)


def test_one_candidate_per_fitting_host_with_summaries(any_client: TestClient) -> None:
    cloud = Cloud(any_client)
    cloud.host("cn1", VCPU=8, MEMORY_MB=4096, traits=("CUSTOM_FAST",))
    cloud.host("cn2", VCPU=4, MEMORY_MB=1024)
    cloud.host("tiny", VCPU=4, MEMORY_MB=256)
    body = cloud.candidates(COMPUTE)
    assert sorted(next(iter(p)) for p in cloud.picks(body)) == ["cn1", "cn2"]
    assert cloud.picks(body)[0]["cn1"] == {"VCPU": 1, "MEMORY_MB": 512}
    assert cloud.mappings(body)[0] == {"": ["cn1"]}
    cn1 = body["provider_summaries"][cloud.uuids["cn1"]]
    assert cn1 == {"resources": {"VCPU": {"capacity": 8, "used": 0},
                                 "MEMORY_MB": {"capacity": 4096, "used": 0}},
                   "traits": ["CUSTOM_FAST"], "parent_provider_uuid": None,
                   "root_provider_uuid": cloud.uuids["cn1"]}
    assert set(body["provider_summaries"]) == {cloud.uuids["cn1"], cloud.uuids["cn2"]}


def test_capacity_reserved_ratio_and_unit_rules(cloud: Cloud) -> None:
    cloud.host("ratio", VCPU=inv(2, allocation_ratio=4.0))           # capacity 8
    cloud.host("reserved", VCPU=inv(8, reserved=6))                  # capacity 2
    cloud.host("maxunit", VCPU=inv(8, max_unit=2))
    cloud.host("minunit", VCPU=inv(8, min_unit=4))
    cloud.host("step", VCPU=inv(8, step_size=2))
    got = {next(iter(p)) for p in cloud.picks(cloud.candidates("resources=VCPU:3"))}
    assert got == {"ratio"}
    got = {next(iter(p)) for p in cloud.picks(cloud.candidates("resources=VCPU:4"))}
    assert got == {"ratio", "minunit", "step"}


def test_usage_is_seen_at_once_and_never_exceeded(cloud: Cloud) -> None:
    cloud.host("cn1", VCPU=4, MEMORY_MB=2048)
    assert len(cloud.candidates("resources=VCPU:4")["allocation_requests"]) == 1
    cloud.allocate(str(uuid.uuid4()), {"cn1": {"VCPU": 1}})
    body = cloud.candidates("resources=VCPU:3")
    assert body["provider_summaries"][cloud.uuids["cn1"]]["resources"]["VCPU"]["used"] == 1
    assert cloud.candidates("resources=VCPU:4")["allocation_requests"] == []


def test_spread_ranks_the_freest_first_and_limit_applies_after(cloud: Cloud) -> None:
    for name, used in (("busy", 6), ("idle", 0), ("half", 4)):
        cloud.host(name, VCPU=8)
        if used:
            cloud.allocate(str(uuid.uuid4()), {name: {"VCPU": used}})
    order = [next(iter(p)) for p in cloud.picks(cloud.candidates("resources=VCPU:1"))]
    assert order == ["idle", "half", "busy"]
    limited = cloud.picks(cloud.candidates("resources=VCPU:1&limit=2"))
    assert [next(iter(p)) for p in limited] == ["idle", "half"]


def test_pack_weigher_by_configuration(sqlite_database: Database,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine reads its configuration when the app is built.
    monkeypatch.setenv("STRATO_WEIGHER", "pack")
    app = create_app(Settings(db_url=sqlite_database.url), db=sqlite_database, migrate=False)
    client = TestClient(app, headers=ADMIN)
    cloud = Cloud(client)
    for name, used in (("busy", 6), ("idle", 0)):
        cloud.host(name, VCPU=8)
        if used:
            cloud.allocate(str(uuid.uuid4()), {name: {"VCPU": used}})
    order = [next(iter(p)) for p in cloud.picks(cloud.candidates("resources=VCPU:1"))]
    assert order == ["busy", "idle"]


def test_ties_break_by_provider_uuid(cloud: Cloud) -> None:
    for i in range(5):
        cloud.host(f"same{i}", VCPU=8)
    body = cloud.candidates("resources=VCPU:1&limit=3")
    uuids = [next(iter(ar["allocations"])) for ar in body["allocation_requests"]]
    assert uuids == sorted(cloud.uuids.values())[:3]


def test_required_forbidden_and_any_of_traits(cloud: Cloud) -> None:
    cloud.host("a", VCPU=4, traits=("CUSTOM_A",))
    cloud.host("b", VCPU=4, traits=("CUSTOM_B",))
    cloud.host("ab", VCPU=4, traits=("CUSTOM_A", "CUSTOM_B"))
    cloud.host("none", VCPU=4)

    def names(q: str) -> set[str]:
        return {next(iter(p)) for p in cloud.picks(cloud.candidates(q))}

    assert names("resources=VCPU:1&required=CUSTOM_A") == {"a", "ab"}
    assert names("resources=VCPU:1&required=!CUSTOM_A") == {"b", "none"}
    assert names("resources=VCPU:1&required=CUSTOM_A,!CUSTOM_B") == {"a"}
    assert names("resources=VCPU:1&required=in:CUSTOM_A,CUSTOM_B") == {"a", "b", "ab"}
    assert names("resources=VCPU:1&required=CUSTOM_A&required=CUSTOM_B") == {"ab"}
    # Before 1.39 only the last `required` counts.
    body = cloud.candidates("resources=VCPU:1&required=CUSTOM_A&required=CUSTOM_B", "1.38")
    assert {cloud.names[next(iter(ar["allocations"]))]
            for ar in body["allocation_requests"]} == {"b", "ab"}


def test_member_of_any_all_and_forbidden(cloud: Cloud) -> None:
    cloud.host("a", VCPU=4, aggs=(AGG_A,))
    cloud.host("b", VCPU=4, aggs=(AGG_B,))
    cloud.host("ab", VCPU=4, aggs=(AGG_A, AGG_B))
    cloud.host("none", VCPU=4)

    def names(q: str) -> set[str]:
        return {next(iter(p)) for p in cloud.picks(cloud.candidates(q))}

    assert names(f"resources=VCPU:1&member_of={AGG_A}") == {"a", "ab"}
    assert names(f"resources=VCPU:1&member_of=in:{AGG_A},{AGG_B}") == {"a", "b", "ab"}
    assert names(f"resources=VCPU:1&member_of={AGG_A}&member_of={AGG_B}") == {"ab"}
    assert names(f"resources=VCPU:1&member_of=!{AGG_A}") == {"b", "none"}
    assert names(f"resources=VCPU:1&member_of=!in:{AGG_A},{AGG_B}") == {"none"}
    assert names(f"resources=VCPU:1&member_of={uuid.uuid4()}") == set()


def test_nested_tree_spreads_the_unsuffixed_group(cloud: Cloud) -> None:
    cloud.host("cn", DISK_GB=100)
    cloud.host("numa0", parent="cn", VCPU=4, MEMORY_MB=1024)
    cloud.host("numa1", parent="cn", VCPU=4, MEMORY_MB=1024)
    body = cloud.candidates("resources=VCPU:1,MEMORY_MB:512,DISK_GB:10")
    picks = cloud.picks(body)
    assert len(picks) == 4  # VCPU and MEMORY_MB each from either NUMA node
    assert all(p["cn"] == {"DISK_GB": 10} for p in picks)
    # Summaries list the whole tree, with parents and roots.
    summ = body["provider_summaries"]
    assert set(summ) == {cloud.uuids[n] for n in ("cn", "numa0", "numa1")}
    assert summ[cloud.uuids["numa0"]]["parent_provider_uuid"] == cloud.uuids["cn"]
    assert summ[cloud.uuids["numa0"]]["root_provider_uuid"] == cloud.uuids["cn"]
    # Before 1.29 a candidate may take from one provider per tree only.
    assert cloud.candidates("resources=VCPU:1,MEMORY_MB:512,DISK_GB:10",
                            "1.28")["allocation_requests"] == []


def test_granular_groups_policies(cloud: Cloud) -> None:
    cloud.host("cn", VCPU=8)
    cloud.host("numa0", parent="cn", VCPU=4)
    cloud.host("numa1", parent="cn", VCPU=4)
    q = "resources1=VCPU:1&resources2=VCPU:1"
    detail, _ = cloud.error(q)
    assert "group_policy" in detail
    none = cloud.mappings(cloud.candidates(q + "&group_policy=none"))
    assert len(none) == 9  # any provider for each group, including the same one twice
    isolate = cloud.mappings(cloud.candidates(q + "&group_policy=isolate"))
    assert len(isolate) == 6
    assert all(m["1"] != m["2"] for m in isolate)


def test_granular_group_needs_one_provider_to_have_it_all(cloud: Cloud) -> None:
    cloud.host("cn", VCPU=8)
    cloud.host("pf", parent="cn", SRIOV_NET_VF=8, traits=("CUSTOM_PHYSNET1",))
    body = cloud.candidates("resources=VCPU:1&resources_NET=SRIOV_NET_VF:2"
                            "&required_NET=CUSTOM_PHYSNET1")
    assert cloud.picks(body) == [{"cn": {"VCPU": 1}, "pf": {"SRIOV_NET_VF": 2}}]
    assert cloud.mappings(body) == [{"": ["cn"], "_NET": ["pf"]}]
    assert cloud.candidates("resources_NET=SRIOV_NET_VF:2,VCPU:1")["allocation_requests"] == []


def test_sharing_provider_serves_its_aggregate(cloud: Cloud) -> None:
    cloud.host("cn1", VCPU=8, aggs=(AGG_A,))
    cloud.host("cn2", VCPU=8, aggs=(AGG_B,))
    cloud.host("nfs", DISK_GB=1000, traits=(SHARES,), aggs=(AGG_A,))
    body = cloud.candidates("resources=VCPU:1,DISK_GB:100")
    assert cloud.picks(body) == [{"cn1": {"VCPU": 1}, "nfs": {"DISK_GB": 100}}]
    assert cloud.mappings(body) == [{"": ["cn1", "nfs"]}]
    assert cloud.uuids["nfs"] in body["provider_summaries"]
    # A granular group can be served by the sharing provider too.
    body = cloud.candidates("resources=VCPU:1&resources1=DISK_GB:100&group_policy=none")
    assert cloud.picks(body) == [{"cn1": {"VCPU": 1}, "nfs": {"DISK_GB": 100}}]


def test_in_tree(cloud: Cloud) -> None:
    cloud.host("cn1", VCPU=8)
    cloud.host("child", parent="cn1", VCPU=8)
    cloud.host("cn2", VCPU=8)
    body = cloud.candidates(f"resources=VCPU:1&in_tree={cloud.uuids['child']}")
    assert {next(iter(p)) for p in cloud.picks(body)} == {"cn1", "child"}
    assert cloud.candidates(f"resources=VCPU:1&in_tree={uuid.uuid4()}"
                            )["allocation_requests"] == []


def test_root_required(cloud: Cloud) -> None:
    cloud.host("cn1", VCPU=8, traits=("CUSTOM_ROOT",))
    cloud.host("numa", parent="cn1", VCPU=8, traits=("CUSTOM_CHILD",))
    cloud.host("cn2", VCPU=8)

    def names(q: str) -> set[str]:
        return {next(iter(p)) for p in cloud.picks(cloud.candidates(q))}

    assert names("resources=VCPU:1&root_required=CUSTOM_ROOT") == {"cn1", "numa"}
    assert names("resources=VCPU:1&root_required=!CUSTOM_ROOT") == {"cn2"}
    assert names("resources=VCPU:1&root_required=CUSTOM_CHILD") == set()


def test_same_subtree_with_a_resourceless_group(cloud: Cloud) -> None:
    cloud.host("cn", VCPU=8)
    cloud.host("nic1", parent="cn", traits=("CUSTOM_NIC",))
    cloud.host("pf1", parent="nic1", SRIOV_NET_VF=4)
    cloud.host("nic2", parent="cn")
    cloud.host("pf2", parent="nic2", SRIOV_NET_VF=4)
    q = ("resources=VCPU:1&resources_PORT=SRIOV_NET_VF:1&required_NIC=CUSTOM_NIC"
         "&group_policy=none")
    detail, code = cloud.error(q)
    assert "same_subtree" in detail and code == "placement.query.bad_value"
    body = cloud.candidates(q + "&same_subtree=_NIC,_PORT")
    assert cloud.mappings(body) == [{"": ["cn"], "_NIC": ["nic1"], "_PORT": ["pf1"]}]


def test_old_microversions_shape_the_answer(cloud: Cloud) -> None:
    cloud.host("cn1", VCPU=8, MEMORY_MB=1024, traits=("CUSTOM_X",))
    u = cloud.uuids["cn1"]
    old = cloud.candidates("resources=VCPU:1", "1.10")
    assert old["allocation_requests"] == [
        {"allocations": [{"resource_provider": {"uuid": u}, "resources": {"VCPU": 1}}]}]
    assert old["provider_summaries"][u] == {"resources": {"VCPU": {"capacity": 8, "used": 0}}}
    v12 = cloud.candidates("resources=VCPU:1", "1.12")
    assert v12["allocation_requests"] == [{"allocations": {u: {"resources": {"VCPU": 1}}}}]
    v27 = cloud.candidates("resources=VCPU:1", "1.27")["provider_summaries"][u]
    assert set(v27["resources"]) == {"VCPU", "MEMORY_MB"} and v27["traits"] == ["CUSTOM_X"]
    assert "root_provider_uuid" not in v27
    assert "mappings" in cloud.candidates("resources=VCPU:1", "1.34")["allocation_requests"][0]


@pytest.mark.parametrize(("query", "version", "needle"), [
    ("", "latest", "at least one resources"),
    ("resources=VCPU", "latest", "Badly formed resources"),
    ("resources=VCPU:0", "latest", "requires amount >= 1"),
    ("resources=CUSTOM_NOPE:1", "latest", "Invalid resource class"),
    ("resources=VCPU:1&required=CUSTOM_NOPE", "latest", "No such trait(s): CUSTOM_NOPE"),
    ("resources=VCPU:1&limit=0", "latest", "limit"),
    ("resources=VCPU:1&limit=x", "latest", "limit"),
    ("resources=VCPU:1&group_policy=maybe", "latest", "is not one of"),
    ("resources=VCPU:1&bogus=1", "latest", "'bogus' does not match any of the regexes"),
    ("resources_X=VCPU:1", "1.32", "'resources_X' does not match any of the regexes"),
    ("resources1=VCPU:1", "1.24", "'resources1' was unexpected"),
    ("resources=VCPU:1&limit=1", "1.15", "'limit' was unexpected"),
    ("resources=VCPU:1&in_tree=nope", "latest", "in_tree"),
    ("resources=VCPU:1&member_of=nope", "latest", "valid UUID"),
    ("resources=VCPU:1&required=A,!A", "latest", "Conflicting"),
    ("resources=VCPU:1&root_required=CUSTOM_A&root_required=CUSTOM_B", "latest",
     "only once"),
    ("resources=VCPU:1&root_required=HW_CPU_X86_AVX2", "1.34", "'root_required' does not match"),
    ("resources1=VCPU:1&same_subtree=1,2&group_policy=none", "latest", "Real suffixes"),
    ("resources1=VCPU:1&same_subtree=,1&group_policy=none", "latest", "Empty string"),
    ("required=CUSTOM_X&resources1=VCPU:1", "1.35", "orphaned traits"),
    ("member_of1=a0000000-0000-4000-8000-00000000000a", "latest", "at least one resources"),
    ("required=HW_CPU_X86_AVX2", "1.20", "'resources' is a required property"),
    ("resources=VCPU:1&member_of=!a0000000-0000-4000-8000-00000000000a", "1.31",
     "Forbidden member_of parameters are not supported"),
])
def test_invalid_queries_are_400_with_a_reason(cloud: Cloud, query: str, version: str,
                                               needle: str) -> None:
    detail, _ = cloud.error(query, version)
    assert needle in detail


def test_route_needs_1_10(client: TestClient) -> None:
    r = client.get("/allocation_candidates?resources=VCPU:1",
                   headers={"openstack-api-version": "placement 1.9"})
    assert r.status_code == 404


# -- stale providers (issue 7): out of new candidates, allocations kept ---------

def _heartbeat_on(c: TestClient, provider: str) -> None:
    """Subject a provider to heartbeats without a report: stale at once."""
    r = c.put(f"/strato/v1/providers/{provider}/meta",
              json={"location": None, "tags": [], "heartbeat": True})
    assert r.status_code == 200, r.text
    assert r.json()["stale"] is True


def test_stale_provider_leaves_candidates_until_it_reports(cloud: Cloud,
                                                          client: TestClient) -> None:
    cloud.host("cn1", VCPU=8)
    cloud.host("cn2", VCPU=8)
    consumer = str(uuid.uuid4())
    cloud.allocate(consumer, {"cn1": {"VCPU": 2}})

    def names() -> set[str]:
        return {next(iter(p)) for p in cloud.picks(cloud.candidates("resources=VCPU:1"))}

    assert names() == {"cn1", "cn2"}
    _heartbeat_on(client, cloud.uuids["cn1"])
    assert names() == {"cn2"}
    # Its allocation and usage are untouched.
    allocs = client.get(f"/allocations/{consumer}").json()["allocations"]
    assert allocs[cloud.uuids["cn1"]]["resources"] == {"VCPU": 2}
    usages = client.get(f"/resource_providers/{cloud.uuids['cn1']}/usages").json()
    assert usages["usages"] == {"VCPU": 2}
    # A report brings it back at once, with its usage.
    r = client.post(f"/strato/v1/providers/{cloud.uuids['cn1']}/heartbeat")
    assert r.status_code == 200 and r.json()["was_stale"] is True
    assert names() == {"cn1", "cn2"}
    body = cloud.candidates("resources=VCPU:1")
    assert body["provider_summaries"][cloud.uuids["cn1"]]["resources"]["VCPU"]["used"] == 2


def test_stale_root_takes_its_nested_providers_out(cloud: Cloud, client: TestClient) -> None:
    cloud.host("cn1", DISK_GB=100)
    cloud.host("numa0", parent="cn1", VCPU=4)
    cloud.host("cn2", VCPU=4, DISK_GB=100)
    _heartbeat_on(client, cloud.uuids["cn1"])
    body = cloud.candidates("resources=VCPU:1")
    assert cloud.picks(body) == [{"cn2": {"VCPU": 1}}]
    assert set(body["provider_summaries"]) == {cloud.uuids["cn2"]}
    assert cloud.candidates(f"resources=VCPU:1&in_tree={cloud.uuids['numa0']}"
                            )["allocation_requests"] == []


def test_stale_sharing_provider_is_not_shared(cloud: Cloud, client: TestClient) -> None:
    cloud.host("cn1", VCPU=8, aggs=(AGG_A,))
    cloud.host("nfs", DISK_GB=1000, traits=(SHARES,), aggs=(AGG_A,))
    cloud.host("nfs2", DISK_GB=1000, traits=(SHARES,), aggs=(AGG_A,))
    _heartbeat_on(client, cloud.uuids["nfs"])
    body = cloud.candidates("resources=VCPU:1,DISK_GB:100")
    assert cloud.picks(body) == [{"cn1": {"VCPU": 1}, "nfs2": {"DISK_GB": 100}}]
    assert cloud.uuids["nfs"] not in body["provider_summaries"]
    body = cloud.candidates("resources=VCPU:1&resources1=DISK_GB:100&group_policy=none")
    assert cloud.picks(body) == [{"cn1": {"VCPU": 1}, "nfs2": {"DISK_GB": 100}}]
    # A stale sharing provider is not a candidate on its own either.
    assert cloud.candidates("resources=DISK_GB:100")["allocation_requests"] == [
        {"allocations": {cloud.uuids["nfs2"]: {"resources": {"DISK_GB": 100}}},
         "mappings": {"": [cloud.uuids["nfs2"]]}}]


def test_providers_without_heartbeats_never_go_stale(sqlite_database: Database) -> None:
    # A zero window: anything subject to heartbeats is stale at once.
    app = create_app(Settings(db_url=sqlite_database.url, stale_after=0.0),
                     db=sqlite_database, migrate=False)
    with TestClient(app, headers=ADMIN) as c:
        cloud = Cloud(c)
        cloud.host("api-made", VCPU=8)
        assert len(cloud.candidates("resources=VCPU:1")["allocation_requests"]) == 1


# -- ranking settings -----------------------------------------------------------

def _order(settings: Settings, db: Database) -> list[str]:
    """busy has most of its VCPU used, fat most of its memory."""
    with TestClient(create_app(settings, db=db, migrate=False), headers=ADMIN) as c:
        cloud = Cloud(c)
        cloud.host("busy", VCPU=8, MEMORY_MB=1000)
        cloud.host("fat", VCPU=8, MEMORY_MB=1000)
        cloud.allocate(str(uuid.uuid4()), {"busy": {"VCPU": 6}})
        cloud.allocate(str(uuid.uuid4()), {"fat": {"MEMORY_MB": 900}})
        return [next(iter(p)) for p in
                cloud.picks(cloud.candidates("resources=VCPU:1,MEMORY_MB:1"))]


@pytest.mark.parametrize(("ranking", "order"), [
    ({"weigher": "pack", "class_weights": {"MEMORY_MB": 0.0}}, ["busy", "fat"]),
    ({"weigher": "pack", "class_weights": {"VCPU": 0.0}}, ["fat", "busy"]),
    ({"weigher": "spread", "class_weights": {"VCPU": 0.0}}, ["busy", "fat"]),
    ({"weigher": "pack", "class_weights": {"MEMORY_MB": 0.0}, "max_candidates": 1},
     ["busy"]),
])
def test_ranking_from_settings(sqlite_database: Database, ranking: dict[str, Any],
                               order: list[str]) -> None:
    settings = Settings(db_url=sqlite_database.url, **ranking)
    assert _order(settings, sqlite_database) == order


def test_settings_win_over_the_environment_which_still_counts(
        sqlite_database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATO_WEIGHER", "pack")
    monkeypatch.setenv("STRATO_CLASS_WEIGHTS", "MEMORY_MB:0")
    url = sqlite_database.url
    assert _order(Settings(db_url=url), sqlite_database) == ["busy", "fat"]
    other = Database(f"sqlite:///{tmp_path}/other.db")
    try:
        upgrade(other)
        assert _order(Settings(db_url=other.url, weigher="spread"), other) == ["fat", "busy"]
    finally:
        other.dispose()


class _Hosts:
    """A stand-in host view that counts its store reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.answer: dict[str, float | None] = {}

    def refresh(self, conn: object) -> None:
        self.reads += 1

    def stale(self, conn: object) -> dict[str, float | None]:
        return self.answer


def test_stale_set_is_reread_on_any_write_or_after_its_ttl(
        sqlite_database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    # The route module's clock only, not the process's.
    monkeypatch.setattr(ac, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    hosts = _Hosts()
    stale = ac.StaleProviders(sqlite_database, hosts)  # type: ignore[arg-type]
    hosts.answer = {"a": None}
    assert stale(7) == {"a": None} and hosts.reads == 1
    hosts.answer = {"b": 1.0}
    assert stale(7) == {"a": None} and hosts.reads == 1    # nothing changed: no read
    assert stale(8) == {"b": 1.0} and hosts.reads == 2     # a write: read at once
    hosts.answer = {}
    clock[0] += ac.STALE_TTL_S
    assert stale(8) == {} and hosts.reads == 3             # the clock: read again


@pytest.mark.parametrize(("query", "needle"), [
    # Placement parses root_required with the old trait parser: no any-of.
    ("resources=VCPU:1&root_required=in:CUSTOM_A,CUSTOM_B",
     "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39"),
    ("resources=VCPU:1&root_required=CUSTOM_A,", "Got an empty trait in"),
    # Placement's checks run in its order: the request-wide ones before the groups.
    ("resources=VCPU:0&root_required=CUSTOM_A&root_required=CUSTOM_B", "only once"),
    ("resources=VCPU:1&limit=10&limit=0", "Failed validating 'pattern'"),
])
def test_placement_wording_and_order(cloud: Cloud, query: str, needle: str) -> None:
    detail, _ = cloud.error(query, "latest")
    assert needle in detail


def test_the_lean_path_answers_like_the_route(cloud: Cloud, client: TestClient,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /allocation_candidates is answered past the framework's routing
    (strato/api/fast.py) by the route's own function; every error is left to
    the route, which answers it as before: 400, 403, 406, and a 500 in
    Placement's body for an error nobody expected. Headers once each."""
    from strato.api import fast
    from strato.engine.service import Engine

    calls = {"fast": 0, "route": 0}

    def counted(name: str, fn: Any) -> Any:
        async def call(request: Any) -> Any:
            calls[name] += 1
            return await fn(request)
        return call
    monkeypatch.setattr(fast, "candidates_response", counted("fast", fast.candidates_response))
    monkeypatch.setattr(ac, "candidates_response", counted("route", ac.candidates_response))
    cloud.host("cn1", VCPU=8, MEMORY_MB=4096)

    def once(r: Any, status: int) -> None:
        assert r.status_code == status, r.text
        assert len(r.headers.get_list("x-openstack-request-id")) == 1
        assert len(r.headers.get_list("openstack-api-version")) == 1
        assert r.headers["content-type"].startswith("application/json")
        if status >= 400:
            assert r.json()["errors"][0]["request_id"] == r.headers["x-openstack-request-id"]

    r = client.get(f"/allocation_candidates?{COMPUTE}&limit=1")
    once(r, 200)
    assert r.headers["cache-control"] == "no-cache" and r.headers["last-modified"]
    assert len(r.json()["allocation_requests"]) == 1
    assert calls == {"fast": 1, "route": 0}
    once(client.get("/allocation_candidates?resources=VCPU:x"), 400)
    once(client.get("/allocation_candidates?resources=CUSTOM_NOPE:1"), 400)
    once(client.get(f"/allocation_candidates?{COMPUTE}",
                    headers={"x-auth-token": "user", "x-roles": "member"}), 403)
    r = client.get(f"/allocation_candidates?{COMPUTE}", headers={"accept": "text/plain"})
    assert r.status_code == 406
    assert calls == {"fast": 4, "route": 3}  # the 406 reaches neither

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine down")
    monkeypatch.setattr(Engine, "query", broken)
    with TestClient(client.app, headers=dict(client.headers),
                    raise_server_exceptions=False) as c:
        r = c.get(f"/allocation_candidates?{COMPUTE}")
    assert r.status_code == 500  # as from any route: the app's handler answers it
    assert r.json()["errors"][0]["detail"] == "unexpected error: RuntimeError"
