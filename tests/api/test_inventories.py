"""GET/PUT/POST/DELETE /resource_providers/{uuid}/inventories[/{class}], read as a spec."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store import changes, schema
from strato.store.db import Database
from strato.store.resource_classes import ids_by_name
from strato.zone import protocol
from tests.conftest import ADMIN

MAX_INT = 2147483647
DEFAULTS = {"reserved": 0, "min_unit": 1, "max_unit": MAX_INT, "step_size": 1,
            "allocation_ratio": 1.0}


def _v(minor: int) -> dict[str, str]:
    return {"openstack-api-version": f"placement 1.{minor}"}


def _provider(client: TestClient, name: str = "cn1") -> str:
    r = client.post("/resource_providers", json={"name": name})
    assert r.status_code == 200, r.text
    return str(r.json()["uuid"])


def _url(rp: str, rc: str | None = None) -> str:
    return f"/resource_providers/{rp}/inventories" + (f"/{rc}" if rc else "")


def _put_all(client: TestClient, rp: str, gen: int, invs: dict[str, Any],
             **kw: Any) -> Any:
    return client.put(_url(rp), json={"resource_provider_generation": gen,
                                      "inventories": invs}, **kw)


def _state(client: TestClient, rp: str) -> Any:
    r = client.get(_url(rp))
    assert r.status_code == 200, r.text
    return r.json()


def _code(r: Any) -> str:
    return str(r.json()["errors"][0]["code"])


def _detail(r: Any) -> str:
    return str(r.json()["errors"][0]["detail"])


def _db(client: TestClient) -> Database:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    return db


def _allocate(client: TestClient, rp: str, amounts: dict[str, int]) -> None:
    """Allocation rows written directly: these tests are about inventories, not claim()."""
    with _db(client).write() as conn:
        rp_id = conn.execute(sa.select(schema.resource_providers.c.id)
                             .where(schema.resource_providers.c.uuid == rp)).scalar_one()
        rc_ids = ids_by_name(conn, amounts)
        consumer = str(uuid.uuid4())
        conn.execute(sa.insert(schema.allocations), [
            {"resource_provider_id": rp_id, "consumer_id": consumer,
             "resource_class_id": rc_ids[rc], "used": n} for rc, n in amounts.items()])


def test_whole_set_round_trip_fills_defaults(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert _state(any_client, rp) == {"resource_provider_generation": 0, "inventories": {}}
    r = _put_all(any_client, rp, 0, {
        "VCPU": {"total": 32, "allocation_ratio": 16.0},
        "MEMORY_MB": {"total": 65536, "reserved": 512, "min_unit": 256, "max_unit": 8192,
                      "step_size": 256, "allocation_ratio": 1.5}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["resource_provider_generation"] == 1
    assert body["inventories"]["VCPU"] == {**DEFAULTS, "total": 32, "allocation_ratio": 16.0}
    assert _state(any_client, rp) == body
    # The provider itself shows the new generation.
    assert any_client.get(f"/resource_providers/{rp}").json()["generation"] == 1
    # Replacing the set drops classes not named.
    r = _put_all(any_client, rp, 1, {"DISK_GB": {"total": 100}})
    assert r.status_code == 200
    assert set(_state(any_client, rp)["inventories"]) == {"DISK_GB"}
    assert _state(any_client, rp)["resource_provider_generation"] == 2


def test_stale_generation_is_409_and_changes_nothing(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert _put_all(any_client, rp, 0, {"VCPU": {"total": 8}}).status_code == 200
    before = _state(any_client, rp)
    r = _put_all(any_client, rp, 0, {"VCPU": {"total": 4}})
    assert r.status_code == 409 and _code(r) == "placement.concurrent_update"
    r = any_client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 7, "total": 2})
    assert r.status_code == 409 and _code(r) == "placement.concurrent_update"
    assert _state(any_client, rp) == before


def test_post_one_class(any_client: TestClient) -> None:
    rp = _provider(any_client)
    r = any_client.post(_url(rp), json={"resource_class": "DISK_GB", "total": 2048,
                                        "reserved": 512, "step_size": 10})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == f"http://testserver/resource_providers/{rp}/inventories/DISK_GB"
    assert r.json() == {**DEFAULTS, "total": 2048, "reserved": 512, "step_size": 10,
                        "resource_provider_generation": 1}
    # A class already there is a conflict; the set is unchanged.
    r = any_client.post(_url(rp), json={"resource_class": "DISK_GB", "total": 1})
    assert r.status_code == 409 and _code(r) == "placement.concurrent_update"
    assert _state(any_client, rp)["inventories"]["DISK_GB"]["total"] == 2048
    # An unknown class, or a name that cannot be a class, is a 400.
    for rc in ("CUSTOM_NOPE", "lower_case"):
        r = any_client.post(_url(rp), json={"resource_class": rc, "total": 1})
        assert r.status_code == 400, r.text
    r = any_client.post(_url(rp), json={"total": 1})
    assert r.status_code == 400 and "resource_class" in _detail(r)
    assert _state(any_client, rp)["resource_provider_generation"] == 1


def test_get_update_delete_one_class(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put_all(any_client, rp, 0, {"VCPU": {"total": 8}, "DISK_GB": {"total": 10}})
    r = any_client.get(_url(rp, "VCPU"))
    assert r.status_code == 200
    assert r.json() == {**DEFAULTS, "total": 8, "resource_provider_generation": 1}
    r = any_client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 1,
                                               "total": 16, "reserved": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {**DEFAULTS, "total": 16, "reserved": 2,
                        "resource_provider_generation": 2}
    assert _state(any_client, rp)["inventories"]["DISK_GB"]["total"] == 10
    assert any_client.delete(_url(rp, "VCPU")).status_code == 204
    assert set(_state(any_client, rp)["inventories"]) == {"DISK_GB"}
    assert _state(any_client, rp)["resource_provider_generation"] == 3
    r = any_client.get(_url(rp, "VCPU"))
    assert r.status_code == 404
    assert any_client.delete(_url(rp, "VCPU")).status_code == 404


def test_single_class_not_there(client: TestClient) -> None:
    rp = _provider(client)
    # A known class the provider has no inventory of: PUT is a 400 (POST creates).
    r = client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 0, "total": 1})
    assert r.status_code == 400 and "VCPU" in _detail(r)
    # An unknown class in the URL is a 404, as in Placement.
    r = client.put(_url(rp, "CUSTOM_NOPE"), json={"resource_provider_generation": 0,
                                                  "total": 1})
    assert r.status_code == 404
    assert client.get(_url(rp, "CUSTOM_NOPE")).status_code == 404
    assert client.delete(_url(rp, "CUSTOM_NOPE")).status_code == 404
    assert _state(client, rp) == {"resource_provider_generation": 0, "inventories": {}}


def test_delete_all_needs_1_5(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put_all(any_client, rp, 0, {"VCPU": {"total": 8}, "DISK_GB": {"total": 10}})
    r = any_client.delete(_url(rp), headers=_v(4))
    assert r.status_code == 405
    assert r.json()["errors"][0]["status"] == 405
    assert len(_state(any_client, rp)["inventories"]) == 2
    assert any_client.delete(_url(rp), headers=_v(5)).status_code == 204
    assert _state(any_client, rp) == {"resource_provider_generation": 2, "inventories": {}}
    # Deleting an empty set still succeeds (and still bumps the generation).
    assert any_client.delete(_url(rp)).status_code == 204
    assert _state(any_client, rp)["resource_provider_generation"] == 3


BAD_RECORDS = [
    ({"total": 0}, "total"),
    ({"total": -1}, "total"),
    ({"total": MAX_INT + 1}, "total"),
    ({"total": "8"}, "total"),
    ({"total": 8.5}, "total"),
    ({"total": True}, "total"),
    ({}, "total"),
    ({"total": 8, "reserved": -1}, "reserved"),
    ({"total": 8, "reserved": 9}, "reserved"),
    ({"total": 8, "min_unit": 0}, "min_unit"),
    ({"total": 8, "max_unit": 0}, "max_unit"),
    ({"total": 8, "min_unit": 4, "max_unit": 2}, "min_unit"),
    ({"total": 8, "step_size": 0}, "step_size"),
    ({"total": 8, "allocation_ratio": -1.0}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": "1.0"}, "allocation_ratio"),
    ({"total": 8, "allocation_ratio": 1e39}, "allocation_ratio"),
    ({"total": 8, "bogus": 1}, "bogus"),
]


@pytest.mark.parametrize(("record", "field"), BAD_RECORDS)
def test_bad_record_is_400_naming_the_field(client: TestClient, record: dict[str, Any],
                                            field: str) -> None:
    rp = _provider(client)
    _put_all(client, rp, 0, {"VCPU": {"total": 4}})
    before = _state(client, rp)
    answers = [
        _put_all(client, rp, 1, {"DISK_GB": record}),
        client.post(_url(rp), json={"resource_class": "DISK_GB", **record}),
        client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 1, **record}),
    ]
    for r in answers:
        assert r.status_code == 400, r.text
        assert field in _detail(r), _detail(r)
        assert r.json()["errors"][0]["title"] == "Bad Request"
    assert _state(client, rp) == before


def test_bad_whole_set_bodies(client: TestClient) -> None:
    rp = _provider(client)
    before = _state(client, rp)
    for body in [
        {"inventories": {}},
        {"resource_provider_generation": 0},
        {"resource_provider_generation": "0", "inventories": {}},
        {"resource_provider_generation": 0, "inventories": [], },
        {"resource_provider_generation": 0, "inventories": {}, "extra": 1},
        {"resource_provider_generation": 0, "inventories": {"CUSTOM_NOPE": {"total": 1}}},
        {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 1},
                                                            "NOT_A_CLASS": {"total": 1}}},
        [],
    ]:
        r = client.put(_url(rp), json=body)
        assert r.status_code == 400, (body, r.text)
    r = client.put(_url(rp), content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Malformed JSON" in _detail(r)
    r = client.put(_url(rp), content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert _state(client, rp) == before


def test_reserved_equal_to_total_from_1_26(client: TestClient) -> None:
    rp = _provider(client)
    full = {"VCPU": {"total": 8, "reserved": 8}}
    r = _put_all(client, rp, 0, full, headers=_v(25))
    assert r.status_code == 400 and "reserved" in _detail(r)
    r = client.post(_url(rp), json={"resource_class": "VCPU", "total": 8, "reserved": 8},
                    headers=_v(25))
    assert r.status_code == 400
    # Capacity rounding down to zero counts as reserved == total too.
    r = _put_all(client, rp, 0, {"VCPU": {"total": 1, "allocation_ratio": 0.5}},
                 headers=_v(25))
    assert r.status_code == 400
    assert _state(client, rp)["resource_provider_generation"] == 0
    r = _put_all(client, rp, 0, full, headers=_v(26))
    assert r.status_code == 200, r.text
    r = client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 1, "total": 4,
                                           "reserved": 4}, headers=_v(25))
    assert r.status_code == 400
    r = client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 1, "total": 4,
                                           "reserved": 5})
    assert r.status_code == 400
    assert _state(client, rp)["inventories"]["VCPU"]["total"] == 8


def test_in_use_classes_cannot_be_removed(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put_all(any_client, rp, 0, {"VCPU": {"total": 8}, "DISK_GB": {"total": 100}})
    _allocate(any_client, rp, {"VCPU": 6})
    before = _state(any_client, rp)
    gen = before["resource_provider_generation"]
    r = _put_all(any_client, rp, gen, {"DISK_GB": {"total": 100}})
    assert r.status_code == 409 and _code(r) == "placement.inventory.inuse"
    assert "VCPU" in _detail(r)
    r = any_client.delete(_url(rp, "VCPU"))
    assert r.status_code == 409 and _code(r) == "placement.inventory.inuse"
    r = any_client.delete(_url(rp))
    assert r.status_code == 409 and _code(r) == "placement.inventory.inuse"
    assert _state(any_client, rp) == before
    # A class without allocations can still go.
    assert any_client.delete(_url(rp, "DISK_GB")).status_code == 204


def test_total_may_drop_below_usage(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put_all(any_client, rp, 0, {"VCPU": {"total": 8}})
    _allocate(any_client, rp, {"VCPU": 6})
    gen = _state(any_client, rp)["resource_provider_generation"]
    r = any_client.put(_url(rp, "VCPU"), json={"resource_provider_generation": gen,
                                               "total": 2})
    assert r.status_code == 200, r.text
    r = _put_all(any_client, rp, gen + 1, {"VCPU": {"total": 1}})
    assert r.status_code == 200, r.text
    usages = any_client.get(f"/resource_providers/{rp}/usages")
    if usages.status_code == 200:  # the usages route belongs to another module
        assert usages.json()["usages"]["VCPU"] == 6


def test_unknown_provider_is_404(client: TestClient) -> None:
    rp = str(uuid.uuid4())
    answers = [
        client.get(_url(rp)),
        _put_all(client, rp, 0, {"VCPU": {"total": 1}}),
        _put_all(client, rp, 0, {"VCPU": {"total": 0}}),  # 404 comes before the body
        client.post(_url(rp), json={"resource_class": "VCPU", "total": 1}),
        client.delete(_url(rp)),
        client.get(_url(rp, "VCPU")),
        client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 0, "total": 1}),
        client.delete(_url(rp, "VCPU")),
        client.get(_url("not-a-uuid")),
    ]
    for r in answers:
        assert r.status_code == 404, r.text
        assert _code(r) == "placement.undefined_code"


def test_cache_headers_from_1_15(client: TestClient) -> None:
    rp = _provider(client)
    _put_all(client, rp, 0, {"VCPU": {"total": 8}})
    for url in (_url(rp), _url(rp, "VCPU")):
        r = client.get(url)
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers["last-modified"].endswith("GMT")
        r = client.get(url, headers=_v(14))
        assert "last-modified" not in r.headers and "cache-control" not in r.headers
    r = _put_all(client, rp, 1, {"VCPU": {"total": 8}})
    assert r.headers["cache-control"] == "no-cache"


def test_every_write_bumps_once_and_records_one_change(client: TestClient) -> None:
    rp = _provider(client)
    writes = [
        lambda: _put_all(client, rp, 0, {"VCPU": {"total": 8}}),
        lambda: client.post(_url(rp), json={"resource_class": "DISK_GB", "total": 1}),
        lambda: client.put(_url(rp, "VCPU"), json={"resource_provider_generation": 2,
                                                   "total": 9}),
        lambda: client.delete(_url(rp, "DISK_GB")),
        lambda: client.delete(_url(rp)),
    ]
    for expected_gen, write in enumerate(writes, start=1):
        with _db(client).read() as conn:
            seq = changes.current_seq(conn)
        assert write().status_code in (200, 201, 204)
        assert _state(client, rp)["resource_provider_generation"] == expected_gen
        with _db(client).read() as conn:
            assert changes.since(conn, seq) == [(seq + 1, rp, "inventory")]
    # A refused write records nothing.
    with _db(client).read() as conn:
        seq = changes.current_seq(conn)
    assert _put_all(client, rp, 0, {"VCPU": {"total": 8}}).status_code == 409
    with _db(client).read() as conn:
        assert changes.since(conn, seq) == []


def test_admin_only(client: TestClient) -> None:
    rp = _provider(client)
    user = {"x-auth-token": "bob:proj"}
    assert client.get(_url(rp), headers=user).status_code == 403
    assert _put_all(client, rp, 0, {"VCPU": {"total": 1}}, headers=user).status_code == 403
    assert client.delete(_url(rp, "VCPU"), headers=user).status_code == 403
    assert _state(client, rp)["resource_provider_generation"] == 0


def test_odd_names_are_4xx_never_500(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert any_client.get("/resource_providers/%00/inventories").status_code == 404
    for method in ("get", "delete"):
        r = getattr(any_client, method)(_url(rp, "%00"))
        assert r.status_code == 404, r.text
    r = any_client.put(_url(rp, "%00"), json={"resource_provider_generation": 0, "total": 1})
    assert r.status_code == 404
    r = _put_all(any_client, rp, 0, {"VCPU\u0000": {"total": 1}})
    assert r.status_code == 400
    r = any_client.post(_url(rp), json={"resource_class": "VCPU\u0000", "total": 1})
    assert r.status_code == 400
    assert _state(any_client, rp) == {"resource_provider_generation": 0, "inventories": {}}


def _gen(client: TestClient, rp: str) -> int:
    return int(_state(client, rp)["resource_provider_generation"])


def _answers(client: TestClient, rp: str) -> None:
    """The engine's routes answer with `rp` among the candidates."""
    r = client.get("/allocation_candidates?resources=VCPU:1")
    assert r.status_code == 200, r.text
    assert rp in r.json()["provider_summaries"]
    r = client.post("/strato/v1/schedule", json={
        "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
        "groups": [{"resources": {"VCPU": 1}}]})
    assert r.status_code == 200, r.text
    r = client.get("/strato/v1/summary")
    assert r.status_code == 200, r.text
    protocol.Summary.model_validate(r.json())


def test_a_capacity_beyond_int64_is_accepted_and_scheduled(client: TestClient) -> None:
    rps = [_provider(client, f"cn{i}") for i in range(6)]
    for rp in rps[1:]:
        assert _put_all(client, rp, 0, {"VCPU": {"total": 10}}).status_code == 200
    huge = {"VCPU": {"total": 10, "allocation_ratio": 1e19}}
    r = _put_all(client, rps[0], 0, huge)
    assert r.status_code == 200, r.text
    assert _state(client, rps[0])["inventories"]["VCPU"]["allocation_ratio"] == 1e19
    _answers(client, rps[0])
    # Two groups whose sum is beyond int64: nothing fits, nothing fails.
    r = client.get(f"/allocation_candidates?resources1=VCPU:{2**62}&resources2=VCPU:{2**62}"
                   "&group_policy=none")
    assert r.status_code == 200 and r.json()["allocation_requests"] == [], r.text
    r = _put_all(client, rps[0], _gen(client, rps[0]), {"VCPU": {"total": 10}})
    assert r.status_code == 200, r.text
    _answers(client, rps[0])
    r = _put_all(client, rps[0], _gen(client, rps[0]), huge)
    assert r.status_code == 200, r.text
    # A zone restarted on that database loads it.
    db = _db(client)
    app = create_app(Settings(db_url=db.url), db=db, migrate=False)
    with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as again:
        _answers(again, rps[0])


def test_an_allocation_ratio_of_zero_or_less_is_judged_by_its_capacity(
        any_client: TestClient) -> None:
    """Placement's schema bounds allocation_ratio above only; what it refuses
    is the capacity a ratio makes: below zero always, zero before 1.26. A
    ratio of 0 was a 400 ('less than or equal to the minimum of 0.0')."""
    rp = _provider(any_client)
    r = _put_all(any_client, rp, 0, {"VCPU": {"total": 8, "allocation_ratio": 0}},
                 headers=_v(25))
    assert r.status_code == 400 and "allocation_ratio (0.0)" in _detail(r), r.text
    r = _put_all(any_client, rp, 0, {"VCPU": {"total": 8, "allocation_ratio": 0}})
    assert r.status_code == 200, r.text
    assert r.json()["inventories"]["VCPU"]["allocation_ratio"] == 0.0
    # Nothing fits in it, and candidates and schedules say so rather than fail.
    assert any_client.get("/allocation_candidates?resources=VCPU:1").json()[
        "allocation_requests"] == []
    r = any_client.put(f"/allocations/{uuid.uuid4()}", json={
        "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert r.status_code == 409, r.text
    for ratio in (-1, -0.5):
        r = any_client.post(_url(rp), json={"resource_class": "DISK_GB", "total": 8,
                                            "allocation_ratio": ratio})
        assert r.status_code == 400 and "allocation_ratio" in _detail(r), r.text
    # total == reserved: capacity 0 whatever the ratio's sign, as in Placement.
    r = any_client.post(_url(rp), json={"resource_class": "DISK_GB", "total": 8,
                                        "reserved": 8, "allocation_ratio": -1})
    assert r.status_code == 201, r.text
    assert set(_state(any_client, rp)["inventories"]) == {"VCPU", "DISK_GB"}


@pytest.mark.parametrize("number", ["8.0", "8e0", "0.8e1"])
def test_an_integral_number_is_an_integer(any_client: TestClient, number: str) -> None:
    """jsonschema (Placement's validator, its latest draft) counts 8.0 as an
    integer: it was a 400 'not of type integer'. 8.5 still is one."""
    rp = _provider(any_client)
    raw = ('{"resource_provider_generation": 0.0, "inventories": {"VCPU": {"total": '
           + number + ', "max_unit": 4.0, "allocation_ratio": 2.0}}}')
    r = any_client.put(_url(rp), content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert _state(any_client, rp)["inventories"]["VCPU"] == {
        "total": 8, "reserved": 0, "min_unit": 1, "max_unit": 4, "step_size": 1,
        "allocation_ratio": 2.0}
    r = any_client.put(_url(rp, "VCPU"), content=b'{"resource_provider_generation": 1, '
                       b'"total": 8.5}', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "8.5 is not of type 'integer'" in _detail(r), r.text
