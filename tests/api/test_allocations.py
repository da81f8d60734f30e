"""GET/PUT/DELETE /allocations/{consumer}, POST /allocations and a provider's allocations."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from strato.api.routes.allocations import MAX_CONSUMERS
from strato.store.resource_classes import ids_by_name
from strato.store.schema import inventories, resource_providers

PROJECT = "6f1c7a2e-0000-4000-8000-00000000aaaa"
USER = "6f1c7a2e-0000-4000-8000-00000000bbbb"
INCOMPLETE = "00000000-0000-0000-0000-000000000000"
# Stands for the test's provider in a parameter (made in the test).
RP_FOR_MAPPINGS = "rp"


def v(version: str) -> dict[str, str]:
    return {"openstack-api-version": f"placement {version}"}


def make_provider(client: TestClient, name: str, **inv: int | dict[str, Any]) -> str:
    """A provider with inventories written straight into the store.

    `VCPU=8` means total 8; a dict gives any other inventory field too.
    """
    r = client.post("/resource_providers", json={"name": name})
    assert r.status_code == 200, r.text
    rp_uuid = str(r.json()["uuid"])
    db = client.app.state.db  # type: ignore[attr-defined]
    with db.write() as conn:
        rp_id = conn.execute(sa.select(resource_providers.c.id)
                             .where(resource_providers.c.uuid == rp_uuid)).scalar_one()
        ids = ids_by_name(conn, inv)
        rows = []
        for rc, spec in inv.items():
            fields = spec if isinstance(spec, dict) else {"total": spec}
            rows.append({"resource_provider_id": rp_id, "resource_class_id": ids[rc],
                         "reserved": 0, "min_unit": 1, "max_unit": 2**31 - 1,
                         "step_size": 1, "allocation_ratio": 1.0, **fields})
        conn.execute(sa.insert(inventories), rows)
    return rp_uuid


def body(allocs: dict[str, dict[str, int]], gen: int | None = None,
         ctype: str = "INSTANCE", **extra: Any) -> dict[str, Any]:
    """A latest-microversion PUT body."""
    return {"allocations": {rp: {"resources": res} for rp, res in allocs.items()},
            "project_id": PROJECT, "user_id": USER, "consumer_generation": gen,
            "consumer_type": ctype, **extra}


def consumer() -> str:
    return str(uuid.uuid4())


def rp_generation(client: TestClient, rp: str) -> int:
    return int(client.get(f"/resource_providers/{rp}").json()["generation"])


def error(r: Any) -> dict[str, Any]:
    err: dict[str, Any] = r.json()["errors"][0]
    return err


# --- The round trip --------------------------------------------------------

def test_put_get_delete(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn1", VCPU=8, MEMORY_MB=2048)
    c = consumer()
    r = any_client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 2, "MEMORY_MB": 512}}))
    assert r.status_code == 204, r.text
    assert r.content == b""

    got = any_client.get(f"/allocations/{c}").json()
    assert got == {
        "allocations": {rp: {"generation": 1, "resources": {"VCPU": 2, "MEMORY_MB": 512}}},
        "project_id": PROJECT, "user_id": USER, "consumer_generation": 1,
        "consumer_type": "INSTANCE"}

    listed = any_client.get(f"/resource_providers/{rp}/allocations").json()
    assert listed == {"resource_provider_generation": 1, "allocations": {
        c: {"resources": {"VCPU": 2, "MEMORY_MB": 512}, "consumer_generation": 1}}}

    assert any_client.delete(f"/allocations/{c}").status_code == 204
    assert any_client.get(f"/allocations/{c}").json() == {"allocations": {}}
    assert rp_generation(any_client, rp) == 1  # as Placement: a delete moves no generation
    r = any_client.delete(f"/allocations/{c}")
    assert r.status_code == 404
    assert "No allocations for consumer" in error(r)["detail"]


def test_unknown_consumer_has_no_allocations(client: TestClient) -> None:
    # Placement never answers 404 here, not even for a malformed id.
    assert client.get(f"/allocations/{consumer()}").json() == {"allocations": {}}
    assert client.get("/allocations/not-a-uuid").json() == {"allocations": {}}
    assert client.delete("/allocations/not-a-uuid").status_code == 404


def test_replacing_allocations_moves_them(client: TestClient) -> None:
    a = make_provider(client, "a", VCPU=4)
    b = make_provider(client, "b", VCPU=4)
    c = consumer()
    assert client.put(f"/allocations/{c}", json=body({a: {"VCPU": 4}})).status_code == 204
    # Own usage does not count against the rewrite: 4 more on a fits again.
    r = client.put(f"/allocations/{c}", json=body({a: {"VCPU": 4}}, gen=1))
    assert r.status_code == 204, r.text
    r = client.put(f"/allocations/{c}", json=body({b: {"VCPU": 3}}, gen=2))
    assert r.status_code == 204, r.text
    got = client.get(f"/allocations/{c}").json()
    assert got["allocations"] == {b: {"generation": 1, "resources": {"VCPU": 3}}}
    assert got["consumer_generation"] == 3
    # As Placement: the generation moved on b, which gained; a only lost.
    assert rp_generation(client, a) == 2
    assert client.get(f"/resource_providers/{a}/allocations").json()["allocations"] == {}


# --- Consumer generations (1.28) -------------------------------------------

def test_consumer_generation_rules(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU=8)
    c = consumer()
    r = any_client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}, gen=3))
    assert r.status_code == 409
    assert error(r)["code"] == "placement.concurrent_update"
    # Placement's wording: expected = what is stored, got = what was sent.
    assert "consumer generation conflict - expected null but got 3" in error(r)["detail"]
    assert any_client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}})).status_code == 204
    for stale in (None, 0, 2):
        r = any_client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 2}}, gen=stale))
        assert r.status_code == 409, stale
        assert error(r)["code"] == "placement.concurrent_update"
        assert f"expected 1 but got {stale}" in error(r)["detail"]
    assert any_client.get(f"/allocations/{c}").json()["allocations"][rp]["resources"] == {
        "VCPU": 1}
    r = any_client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 2}}, gen=1))
    assert r.status_code == 204
    assert any_client.get(f"/allocations/{c}").json()["consumer_generation"] == 2


def test_empty_allocations_remove_them_from_1_28(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8)
    c = consumer()
    client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}))
    r = client.put(f"/allocations/{c}", json=body({}, gen=0))
    assert r.status_code == 409
    assert client.put(f"/allocations/{c}", json=body({}, gen=1)).status_code == 204
    assert client.get(f"/allocations/{c}").json() == {"allocations": {}}
    # Before 1.28 an empty dict is not a valid body.
    old = {"allocations": {}, "project_id": PROJECT, "user_id": USER}
    assert client.put(f"/allocations/{c}", json=old, headers=v("1.27")).status_code == 400


def test_generations_are_not_checked_before_1_28(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8)
    c = consumer()
    old = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": PROJECT,
           "user_id": USER}
    assert client.put(f"/allocations/{c}", json=old, headers=v("1.27")).status_code == 204
    assert client.put(f"/allocations/{c}", json=old, headers=v("1.27")).status_code == 204
    got = client.get(f"/allocations/{c}", headers=v("1.27")).json()
    assert "consumer_generation" not in got and got["project_id"] == PROJECT
    r = client.put(f"/allocations/{c}", json={**old, "consumer_generation": 2},
                   headers=v("1.27"))
    assert r.status_code == 400


# --- Older forms -----------------------------------------------------------

def test_list_form_before_1_12(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8, DISK_GB=100)
    c = consumer()
    listed = {"allocations": [
        {"resource_provider": {"uuid": rp}, "resources": {"VCPU": 1}},
        {"resource_provider": {"uuid": rp}, "resources": {"DISK_GB": 10}}]}
    r = client.put(f"/allocations/{c}", json=listed, headers=v("1.7"))
    assert r.status_code == 204, r.text
    # Later entries for the same provider win.
    assert client.get(f"/allocations/{c}", headers=v("1.11")).json() == {
        "allocations": {rp: {"generation": 1, "resources": {"DISK_GB": 10}}}}
    got = client.get(f"/allocations/{c}", headers=v("1.12")).json()
    assert (got["project_id"], got["user_id"]) == (INCOMPLETE, INCOMPLETE)
    assert client.get(f"/allocations/{c}", headers=v("1.38")).json()["consumer_type"] == (
        "unknown")
    # From 1.8 the owner is required; from 1.12 only the dict form is read.
    assert client.put(f"/allocations/{c}", json=listed, headers=v("1.8")).status_code == 400
    owned = {**listed, "project_id": PROJECT, "user_id": USER}
    assert client.put(f"/allocations/{c}", json=owned, headers=v("1.8")).status_code == 204
    assert client.put(f"/allocations/{c}", json=owned, headers=v("1.12")).status_code == 400
    dict_form = {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": PROJECT,
                 "user_id": USER}
    assert client.put(f"/allocations/{c}", json=dict_form,
                      headers=v("1.11")).status_code == 400


def test_consumer_type_by_microversion(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8)
    c = consumer()
    no_type = body({rp: {"VCPU": 1}})
    del no_type["consumer_type"]
    r = client.put(f"/allocations/{c}", json=no_type)
    assert r.status_code == 400 and "consumer_type" in error(r)["detail"]
    assert client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}),
                      headers=v("1.37")).status_code == 400
    assert client.put(f"/allocations/{c}", json=no_type, headers=v("1.37")).status_code == 204
    assert client.get(f"/allocations/{c}").json()["consumer_type"] == "unknown"
    assert client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}, gen=1,
                                                     ctype="PONY")).status_code == 204
    assert client.get(f"/allocations/{c}").json()["consumer_type"] == "PONY"
    # An older version's write leaves the type alone.
    no_type["consumer_generation"] = 2
    assert client.put(f"/allocations/{c}", json=no_type, headers=v("1.37")).status_code == 204
    assert client.get(f"/allocations/{c}").json()["consumer_type"] == "PONY"


def test_mappings_from_1_34(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8)
    c = consumer()
    with_map = body({rp: {"VCPU": 1}}, mappings={"_NUMA0": [rp]})
    assert client.put(f"/allocations/{c}", json=with_map).status_code == 204
    with_map["consumer_generation"] = 1
    del with_map["consumer_type"]
    assert client.put(f"/allocations/{c}", json=with_map, headers=v("1.33")).status_code == 400
    assert client.put(f"/allocations/{c}", json=with_map, headers=v("1.34")).status_code == 204
    bad = body({rp: {"VCPU": 1}}, gen=2, mappings={"_NUMA0": []})
    assert client.put(f"/allocations/{c}", json=bad).status_code == 400


@pytest.mark.parametrize("mappings", [{"": [RP_FOR_MAPPINGS]}, {"!!": 5},
                                      {"_G": [RP_FOR_MAPPINGS], "??": "anything"}])
def test_mappings_as_placements_schema_takes_them(client: TestClient,
                                                  mappings: dict[str, Any]) -> None:
    """Placement's mappings schema constrains only the keys its (unanchored)
    group pattern finds in, so "!!" and "??" may hold anything; a key with a
    group's character must hold uuids, and {} is too few (its gabbits)."""
    rp = make_provider(client, "cn", VCPU=8)
    mappings = {k: [rp] if v == [RP_FOR_MAPPINGS] else v for k, v in mappings.items()}
    r = client.put(f"/allocations/{consumer()}", json=body({rp: {"VCPU": 1}},
                                                           mappings=mappings))
    assert r.status_code == 204, r.text
    r = client.put(f"/allocations/{consumer()}", json=body({rp: {"VCPU": 1}},
                                                           mappings={"x": 5}))
    assert r.status_code == 400 and "mappings" in error(r)["detail"]
    r = client.put(f"/allocations/{consumer()}", json=body({rp: {"VCPU": 1}}, mappings={}))
    assert r.status_code == 400
    assert "{} does not have enough properties" in error(r)["detail"]


@pytest.mark.parametrize("route", ["put", "post"])
def test_an_integral_amount_is_an_integer(client: TestClient, route: str) -> None:
    """jsonschema (Placement's validator) counts 1.0 as an integer: an amount
    or a generation of 1.0 was a 400 'not of type integer'; 1.5 still is."""
    rp = make_provider(client, "cn", VCPU=8)
    c = consumer()
    for amount, gen, status in ((2.0, None, 204), (1e0, 1.0, 204), (1.5, 2, 400)):
        one = body({rp: {"VCPU": amount}}, gen=gen)  # type: ignore[dict-item]
        r = (client.put(f"/allocations/{c}", json=one) if route == "put"
             else client.post("/allocations", json={c: one}))
        assert r.status_code == status, r.text
    assert client.get(f"/allocations/{c}").json()["allocations"][rp]["resources"] == {
        "VCPU": 1}


# --- What does not fit -----------------------------------------------------

def test_capacity_is_never_exceeded(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU={"total": 4, "reserved": 1,
                                               "allocation_ratio": 2.0})
    a, b = consumer(), consumer()
    assert any_client.put(f"/allocations/{a}", json=body({rp: {"VCPU": 5}})).status_code == 204
    r = any_client.put(f"/allocations/{b}", json=body({rp: {"VCPU": 2}}))
    assert r.status_code == 409
    assert "capacity" in error(r)["detail"]
    assert any_client.put(f"/allocations/{b}", json=body({rp: {"VCPU": 1}})).status_code == 204
    assert any_client.get(f"/allocations/{a}").json()["allocations"][rp]["resources"] == {
        "VCPU": 5}
    assert any_client.get(f"/allocations/{b}").json()["allocations"][rp]["generation"] == 2


def test_inventory_constraints_are_409(client: TestClient) -> None:
    # Placement: InvalidAllocationConstraintsViolated is an InvalidInventory -> 409.
    rp = make_provider(client, "cn", DISK_GB={"total": 1000, "min_unit": 10,
                                              "max_unit": 500, "step_size": 10})
    for amount in (5, 510, 15):
        r = client.put(f"/allocations/{consumer()}", json=body({rp: {"DISK_GB": amount}}))
        assert r.status_code == 409, amount
        assert "min_unit, max_unit, or step_size" in error(r)["detail"]
    assert client.put(f"/allocations/{consumer()}",
                      json=body({rp: {"DISK_GB": 20}})).status_code == 204


def test_provider_and_class_must_exist(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=8)
    gone = str(uuid.uuid4())
    r = client.put(f"/allocations/{consumer()}", json=body({gone: {"VCPU": 1}}))
    assert r.status_code == 400
    assert gone in error(r)["detail"]
    r = client.put(f"/allocations/{consumer()}", json=body({rp: {"CUSTOM_NOPE": 1}}))
    assert r.status_code == 400 and "CUSTOM_NOPE" in error(r)["detail"]
    # A real class the provider has no inventory of does not fit: 409.
    r = client.put(f"/allocations/{consumer()}", json=body({rp: {"DISK_GB": 1}}))
    assert r.status_code == 409 and "DISK_GB" in error(r)["detail"]
    assert client.get(f"/resource_providers/{rp}/allocations").json()["allocations"] == {}


def test_a_stale_consumer_generation_is_409_before_a_missing_provider_or_class(
        any_client: TestClient) -> None:
    """Placement checks the consumer generation (1.28+) before it looks the
    providers and classes up: a stale one is its 409 concurrent_update even
    when the write also names a provider or class that does not exist (those
    are the 400 once the generation is right), by PUT and by POST."""
    client = any_client
    rp = make_provider(client, "cn", VCPU=8)
    c, new = consumer(), consumer()
    assert client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}})).status_code == 204
    gone = str(uuid.uuid4())
    for allocs in ({gone: {"VCPU": 1}}, {rp: {"CUSTOM_NOPE": 1}}):
        for who, stale, shown in ((c, 5, "expected 1 but got 5"),
                                  (c, None, "expected 1 but got None"),
                                  (new, 3, "expected null but got 3")):
            r = client.put(f"/allocations/{who}", json=body(allocs, stale))
            assert r.status_code == 409, (allocs, who, r.text)
            assert error(r)["code"] == "placement.concurrent_update"
            assert shown in error(r)["detail"]
            r = client.post("/allocations", json={who: body(allocs, stale)})
            assert r.status_code == 409, (allocs, who, r.text)
        r = client.put(f"/allocations/{c}", json=body(allocs, 1))
        assert r.status_code == 400, r.text
        r = client.post("/allocations", json={new: body(allocs, None)})
        assert r.status_code == 400, r.text
    assert client.get(f"/allocations/{c}").json()["consumer_generation"] == 1


def test_bad_input_is_400_and_changes_nothing(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU=8)
    c = consumer()
    good = body({rp: {"VCPU": 1}})
    cases: list[Any] = [
        body({rp: {"VCPU": 0}}),
        body({rp: {"VCPU": -1}}),
        body({rp: {"VCPU": "1"}}),  # type: ignore[dict-item]
        body({rp: {"VCPU": 1.5}}),  # type: ignore[dict-item]
        body({rp: {"VCPU": True}}),
        body({rp: {"vcpu": 1}}),
        body({rp: {}}),
        body({"not-a-uuid": {"VCPU": 1}}),
        {**good, "bogus": 1},
        {**good, "project_id": ""},
        {**good, "user_id": 5},
        {**good, "consumer_generation": "0"},
        {**good, "consumer_type": "instance"},
        {**good, "allocations": [{"resource_provider": {"uuid": rp},
                                  "resources": {"VCPU": 1}}]},
        {**good, "allocations": {rp: {"resources": {"VCPU": 1}, "generation": None}}},
        {**good, "allocations": {rp: {"resources": {"VCPU": 1}, "extra": 1}}},
        {k: val for k, val in good.items() if k != "project_id"},
        {k: val for k, val in good.items() if k != "consumer_generation"},
        [],
        "allocations",
    ]
    for bad in cases:
        r = any_client.put(f"/allocations/{c}", json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert error(r)["detail"]
    r = any_client.put("/allocations/not-a-uuid", json=good)
    assert r.status_code == 400 and "Malformed consumer_uuid" in error(r)["detail"]
    r = any_client.put(f"/allocations/{c}", content=b"null",
                       headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = any_client.put(f"/allocations/{c}", content=b"{nope",
                       headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = any_client.put(f"/allocations/{c}", content=b"{}", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert any_client.get(f"/allocations/{c}").json() == {"allocations": {}}
    assert rp_generation(any_client, rp) == 0


# --- POST /allocations (1.13) ----------------------------------------------

def post_entry(allocs: dict[str, dict[str, int]], gen: int | None = None
               ) -> dict[str, Any]:
    return body(allocs, gen=gen)


def test_post_several_consumers_at_once(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU=4)
    a, b, mig = consumer(), consumer(), consumer()
    r = any_client.post("/allocations", json={a: post_entry({rp: {"VCPU": 1}}),
                                              b: post_entry({rp: {"VCPU": 2}})})
    assert r.status_code == 204, r.text
    assert any_client.get(f"/resource_providers/{rp}/usages").json()["usages"] == {"VCPU": 3}
    # One consumer that does not fit: nothing at all is written.
    r = any_client.post("/allocations", json={mig: post_entry({rp: {"VCPU": 1}}),
                                              a: post_entry({rp: {"VCPU": 2}}, gen=1)})
    assert r.status_code == 409
    assert any_client.get(f"/allocations/{mig}").json() == {"allocations": {}}
    assert any_client.get(f"/allocations/{a}").json()["consumer_generation"] == 1
    # Move a's allocation to a migration consumer: empty allocations remove a's.
    r = any_client.post("/allocations", json={mig: post_entry({rp: {"VCPU": 1}}),
                                              a: post_entry({}, gen=1)})
    assert r.status_code == 204, r.text
    assert any_client.get(f"/allocations/{a}").json() == {"allocations": {}}
    assert any_client.get(f"/allocations/{mig}").json()["allocations"][rp]["resources"] == {
        "VCPU": 1}


def test_post_validation(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=4)
    c = consumer()
    r = client.post("/allocations", json={c: post_entry({rp: {"VCPU": 1}})},
                    headers=v("1.12"))
    assert r.status_code == 404
    cases: list[Any] = [
        {},
        {"not-a-uuid": post_entry({rp: {"VCPU": 1}})},
        {c: {**post_entry({rp: {"VCPU": 1}}), "bogus": 1}},
        {c: post_entry({rp: {"VCPU": 0}})},
        {c: {k: val for k, val in post_entry({rp: {"VCPU": 1}}).items()
             if k != "consumer_generation"}},
        {c: 5},
        [],
    ]
    for bad in cases:
        r = client.post("/allocations", json=bad)
        assert r.status_code == 400, (bad, r.text)
    r = client.post("/allocations", json={c: {**post_entry({rp: {"VCPU": 1}}), "x": 1}})
    assert c in error(r)["detail"]
    # At 1.13 the generation is neither needed nor allowed.
    old = {c: {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": PROJECT,
               "user_id": USER}}
    assert client.post("/allocations", json=old, headers=v("1.13")).status_code == 204
    assert client.get(f"/allocations/{c}").json()["consumer_generation"] == 1


# --- A provider's allocations ----------------------------------------------

def test_provider_allocations(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=4)
    r = client.get(f"/resource_providers/{uuid.uuid4()}/allocations")
    assert r.status_code == 404
    assert client.get(f"/resource_providers/{rp}/allocations").json() == {
        "allocations": {}, "resource_provider_generation": 0}
    c = consumer()
    client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}))
    got = client.get(f"/resource_providers/{rp}/allocations", headers=v("1.27")).json()
    assert got == {"allocations": {c: {"resources": {"VCPU": 1}}},
                   "resource_provider_generation": 1}


def test_cache_headers_from_1_15(client: TestClient) -> None:
    rp = make_provider(client, "cn", VCPU=4)
    c = consumer()
    client.put(f"/allocations/{c}", json=body({rp: {"VCPU": 1}}))
    for path in (f"/allocations/{c}", f"/resource_providers/{rp}/allocations"):
        assert "last-modified" not in client.get(path, headers=v("1.14")).headers
        r = client.get(path)
        assert r.headers["cache-control"] == "no-cache" and r.headers["last-modified"]


def test_admin_only(client: TestClient) -> None:
    user = {"x-auth-token": "bob:proj"}
    c = consumer()
    assert client.get(f"/allocations/{c}", headers=user).status_code == 403
    assert client.put(f"/allocations/{c}", json={}, headers=user).status_code == 403
    assert client.post("/allocations", json={}, headers=user).status_code == 403
    assert client.delete(f"/allocations/{c}", headers=user).status_code == 403


def test_deleting_a_consumer_that_is_no_uuid_is_404(any_client: TestClient) -> None:
    # No such consumer can hold allocations (a PUT takes uuids only): 404, as
    # Placement answers, and no query (a NUL byte made PostgreSQL refuse it: 500).
    for consumer in ("%00", "not-a-uuid", "a%00b"):
        r = any_client.delete(f"/allocations/{consumer}")
        assert r.status_code == 404, (consumer, r.text)
        assert r.json()["errors"][0]["detail"].startswith("No allocations for consumer")


def _naming(providers: list[str]) -> dict[str, Any]:
    return {"allocations": {u: {"resources": {"VCPU": 1}} for u in providers},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE"}


def test_a_write_naming_too_many_consumers_or_providers_is_413(any_client: TestClient) -> None:
    # A claim's statements name every consumer and provider in IN lists, and
    # a statement binds at most 65,535 values (PostgreSQL): 70,000 was a 500.
    rp = make_provider(any_client, "many", VCPU=100_000)
    too_many = MAX_CONSUMERS + 1
    cases = [
        ("POST", "/allocations", {str(uuid.uuid4()): _naming([rp]) for _ in range(too_many)}),
        ("PUT", f"/allocations/{uuid.uuid4()}",
         _naming([str(uuid.uuid4()) for _ in range(too_many)])),
        ("POST", "/reshaper", {"inventories": {rp: {
                                   "resource_provider_generation": rp_generation(any_client, rp),
                                   "inventories": {"VCPU": {"total": 8}}}},
                               "allocations": {str(uuid.uuid4()): _naming([rp])
                                               for _ in range(too_many)}}),
        ("POST", "/reshaper", {"inventories": {str(uuid.uuid4()): {
            "resource_provider_generation": 0, "inventories": {}} for _ in range(too_many)},
            "allocations": {}}),
    ]
    for method, path, payload in cases:
        r = any_client.request(method, path, json=payload)
        assert r.status_code == 413, (path, r.text[:300])
        assert "at most" in r.json()["errors"][0]["detail"]
    assert any_client.get(f"/resource_providers/{rp}/usages").json()["usages"]["VCPU"] == 0
