"""What the differential check against real Placement 16.0.0 found
(tests/conformance/diff.py), each pinned here as Placement answers it."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient


def _code(r: object) -> str:
    return r.json()["errors"][0]["code"]  # type: ignore[attr-defined, no-any-return]


def test_an_empty_provider_name_is_refused(client: TestClient) -> None:
    r = client.post("/resource_providers", json={"name": ""})
    assert r.status_code == 400, r.text
    assert "name is required" in r.json()["errors"][0]["detail"]
    assert client.get("/resource_providers").json()["resource_providers"] == []


@pytest.mark.parametrize("spelling", ["{%s}", "urn:uuid:%s", "%s"])
def test_provider_uuid_in_any_spelling_oslo_accepts(client: TestClient, spelling: str) -> None:
    u = str(uuid.uuid4())
    r = client.post("/resource_providers", json={"name": "odd", "uuid": spelling % u})
    assert r.status_code == 200, r.text
    assert r.json()["uuid"] == u
    assert client.get(f"/resource_providers/{u}").status_code == 200


@pytest.mark.parametrize("bad", ["{abc}", "urn:uuid:nope", "x" + str(uuid.UUID(int=1))])
def test_provider_uuid_not_a_uuid(client: TestClient, bad: str) -> None:
    r = client.post("/resource_providers", json={"name": "odd", "uuid": bad})
    assert r.status_code == 400, r.text


def test_setting_the_same_traits_keeps_the_generation(any_client: TestClient) -> None:
    u = any_client.post("/resource_providers", json={"name": "cn"}).json()["uuid"]
    assert any_client.delete(f"/resource_providers/{u}/traits").status_code == 204
    assert any_client.get(f"/resource_providers/{u}").json()["generation"] == 0
    body = {"resource_provider_generation": 0, "traits": ["HW_CPU_X86_AVX2"]}
    r = any_client.put(f"/resource_providers/{u}/traits", json=body)
    assert r.json()["resource_provider_generation"] == 1
    body["resource_provider_generation"] = 1
    r = any_client.put(f"/resource_providers/{u}/traits", json=body)
    assert r.status_code == 200 and r.json()["resource_provider_generation"] == 1
    assert any_client.get(f"/resource_providers/{u}").json()["generation"] == 1


def test_an_empty_inventory_set_has_no_last_modified(client: TestClient) -> None:
    u = client.post("/resource_providers", json={"name": "cn"}).json()["uuid"]
    r = client.get(f"/resource_providers/{u}/inventories")
    assert r.headers["cache-control"] == "no-cache" and "last-modified" not in r.headers
    r = client.put(f"/resource_providers/{u}/inventories",
                   json={"resource_provider_generation": 0, "inventories": {}})
    assert r.status_code == 200 and "last-modified" not in r.headers
    r = client.put(f"/resource_providers/{u}/inventories",
                   json={"resource_provider_generation": 1,
                         "inventories": {"VCPU": {"total": 1}}})
    assert "last-modified" in r.headers
    assert "last-modified" in client.get(f"/resource_providers/{u}/inventories").headers


def test_a_query_that_is_not_utf8_is_refused(client: TestClient) -> None:
    r = client.get("/resource_providers?name=%ff")
    assert r.status_code == 400
    assert "utf-8" in r.json()["errors"][0]["detail"]
    assert client.get("/resource_providers?name=%C3%A9").status_code == 200


@pytest.mark.parametrize("path", [
    "/resource_providers/{missing}",
    "/resource_providers/not-a-uuid",
    "/resource_providers/{missing}/inventories",
    "/resource_providers/{missing}/traits",
    "/resource_providers/{missing}/aggregates",
    "/allocation_candidates?resources=VCPU:1&resources1=VCPU:1&resources2=VCPU:1"
    "&group_policy=bogus",
    "/allocation_candidates?resources1=VCPU:1&resources2=VCPU:1",
    "/allocation_candidates?resources=VCPU:1&in_tree=abc",
    "/allocation_candidates?resources=VCPU:1&root_required=CUSTOM_NOPE",
    "/allocation_candidates?resources=VCPU:1&limit=0",
    "/resource_providers?member_of=in:abc",
])
def test_errors_placement_sends_without_a_code(client: TestClient, path: str) -> None:
    """Placement's specific codes name a few conditions only; everywhere else,
    as here, its code is undefined_code."""
    r = client.get(path.format(missing=uuid.uuid4()))
    assert r.status_code in (400, 404), r.text
    assert _code(r) == "placement.undefined_code", r.text


def test_an_orphaned_required_has_no_code_before_1_36(client: TestClient) -> None:
    r = client.get("/allocation_candidates?resources=VCPU:1&required1=CUSTOM_FOO",
                   headers={"openstack-api-version": "placement 1.25"})
    assert r.status_code == 400 and _code(r) == "placement.undefined_code", r.text


def test_a_duplicate_resource_class_has_no_code(client: TestClient) -> None:
    assert client.post("/resource_classes", json={"name": "CUSTOM_X"}).status_code == 201
    r = client.post("/resource_classes", json={"name": "CUSTOM_X"})
    assert r.status_code == 409 and _code(r) == "placement.undefined_code"


def test_a_duplicate_provider_name_keeps_its_code(client: TestClient) -> None:
    client.post("/resource_providers", json={"name": "cn"})
    r = client.post("/resource_providers", json={"name": "cn"})
    assert r.status_code == 409 and _code(r) == "placement.duplicate_name"


def _put_allocs(c: TestClient, consumer: str, rp: str, vcpu: int, gen: int | None) -> int:
    r = c.put(f"/allocations/{consumer}", json={
        "allocations": {rp: {"resources": {"VCPU": vcpu}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": gen, "consumer_type": "INSTANCE"})
    return r.status_code


def test_over_capacity_a_write_that_makes_it_no_worse_goes_through(
        any_client: TestClient) -> None:
    """Placement: once an inventory shrank below its usage, a write on it may
    keep or lower the usage (a resize down, a move off), never raise it."""
    c = any_client
    rp = c.post("/resource_providers", json={"name": "cn"}).json()["uuid"]
    c.put(f"/resource_providers/{rp}/inventories",
          json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
    a, b, new = (str(uuid.uuid4()) for _ in range(3))
    assert _put_allocs(c, a, rp, 2, None) == 204
    assert _put_allocs(c, b, rp, 2, None) == 204
    gen = c.get(f"/resource_providers/{rp}").json()["generation"]
    r = c.put(f"/resource_providers/{rp}/inventories",
              json={"resource_provider_generation": gen, "inventories": {"VCPU": {"total": 2}}})
    assert r.status_code == 200, r.text
    assert _put_allocs(c, a, rp, 2, 1) == 204       # the same: no worse
    assert _put_allocs(c, a, rp, 1, 2) == 204       # lower
    assert _put_allocs(c, a, rp, 2, 3) == 409       # higher than it was (3)
    assert _put_allocs(c, new, rp, 1, None) == 409  # a newcomer on a full provider
    assert c.get(f"/resource_providers/{rp}/usages").json()["usages"] == {"VCPU": 3}


def test_the_legacy_microversion_header_is_not_read(client: TestClient) -> None:
    """Placement reads OpenStack-API-Version only (microversion-parse without
    legacy headers): X-OpenStack-Placement-API-Version alone means 1.0."""
    del client.headers["openstack-api-version"]
    r = client.get("/", headers={"x-openstack-placement-api-version": "1.14"})
    assert r.headers["openstack-api-version"] == "placement 1.0"


@pytest.mark.parametrize("path", ["/allocation_candidates?resources=%20VCPU:1",
                                  "/resource_providers?resources=VCPU%20:1"])
def test_a_resource_class_with_spaces_is_unknown(client: TestClient, path: str) -> None:
    """Placement takes the class as written (int() forgives spaces round the
    amount, nothing forgives them round the class)."""
    u = client.post("/resource_providers", json={"name": "cn"}).json()["uuid"]
    client.put(f"/resource_providers/{u}/inventories",
               json={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
    r = client.get(path)
    assert r.status_code == 400, r.text
    assert client.get("/allocation_candidates?resources=VCPU:%201%20").status_code == 200


@pytest.mark.parametrize("value", ["placement 1.99", "placement 2.0", "placement 0.9"])
def test_an_unacceptable_version_names_the_range(client: TestClient, value: str) -> None:
    r = client.get("/resource_providers", headers={"openstack-api-version": value})
    assert r.status_code == 406
    error = r.json()["errors"][0]
    assert error["min_version"] == "1.0" and error["max_version"] == "1.39"


@pytest.mark.parametrize(("headers", "has_code"), [
    ({"openstack-api-version": "placement 1.22"}, False),
    ({"openstack-api-version": "placement 1.23"}, True),
    ({"openstack-api-version": "placement 1.a"}, False),     # the header itself refused
    ({"openstack-api-version": "placement 1.99"}, False),
    ({"openstack-api-version": "placement 1.0", "x-strato-zone-protocol": "2"}, True),
])
def test_errors_carry_a_code_from_1_23(client: TestClient, headers: dict[str, str],
                                       has_code: bool) -> None:
    """Placement's error bodies have `code` from microversion 1.23 on only; a
    zone-to-zone call always gets it (a zone reads it, whatever it forwards)."""
    r = client.get(f"/resource_providers/{uuid.uuid4()}", headers=headers)
    assert r.status_code >= 400
    assert ("code" in r.json()["errors"][0]) is has_code, r.text
