"""GET/POST/PUT/DELETE /resource_providers, read as a spec."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient


def _create(client: TestClient, name: str, **kw: object) -> dict[str, object]:
    r = client.post("/resource_providers", json={"name": name, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_create_show_update_delete(any_client: TestClient) -> None:
    rp = _create(any_client, "cn1")
    assert rp["generation"] == 0
    assert rp["root_provider_uuid"] == rp["uuid"]
    r = any_client.put(f"/resource_providers/{rp['uuid']}", json={"name": "cn1-renamed"})
    # As Placement: a rename is not a change the generation counts.
    assert r.status_code == 200 and r.json()["generation"] == 0
    assert any_client.get(f"/resource_providers/{rp['uuid']}").json()["name"] == "cn1-renamed"
    assert any_client.delete(f"/resource_providers/{rp['uuid']}").status_code == 204
    r = any_client.get(f"/resource_providers/{rp['uuid']}")
    assert r.status_code == 404
    assert r.json()["errors"][0]["code"] == "placement.undefined_code"


def test_old_microversion_create_is_201_without_body(client: TestClient) -> None:
    r = client.post("/resource_providers", json={"name": "x"},
                    headers={"openstack-api-version": "placement 1.19"})
    assert r.status_code == 201
    assert r.headers["location"].startswith("http://testserver/resource_providers/")
    assert r.headers["openstack-api-version"] == "placement 1.19"


def test_duplicate_name_and_uuid(client: TestClient) -> None:
    u = str(uuid.uuid4())
    _create(client, "a", uuid=u)
    r = client.post("/resource_providers", json={"name": "a"})
    assert r.status_code == 409 and r.json()["errors"][0]["code"] == "placement.duplicate_name"
    r = client.post("/resource_providers", json={"name": "b", "uuid": u})
    assert r.status_code == 409


def test_nested_and_delete_parent_refused(client: TestClient) -> None:
    root = _create(client, "root")
    child = _create(client, "child", parent_provider_uuid=root["uuid"])
    grandchild = _create(client, "gc", parent_provider_uuid=child["uuid"])
    assert grandchild["root_provider_uuid"] == root["uuid"]
    r = client.delete(f"/resource_providers/{root['uuid']}")
    assert r.status_code == 409
    assert r.json()["errors"][0]["code"] == "placement.resource_provider.cannot_delete_parent"
    tree = client.get(f"/resource_providers?in_tree={grandchild['uuid']}").json()
    assert {p["name"] for p in tree["resource_providers"]} == {"root", "child", "gc"}


def test_reparent_rules_by_microversion(client: TestClient) -> None:
    a = _create(client, "a")
    b = _create(client, "b")
    c = _create(client, "c", parent_provider_uuid=a["uuid"])
    body = {"name": "c", "parent_provider_uuid": b["uuid"]}
    r = client.put(f"/resource_providers/{c['uuid']}", json=body,
                   headers={"openstack-api-version": "placement 1.36"})
    assert r.status_code == 400
    r = client.put(f"/resource_providers/{c['uuid']}", json=body)
    assert r.status_code == 200 and r.json()["root_provider_uuid"] == b["uuid"]
    # loops are refused
    r = client.put(f"/resource_providers/{b['uuid']}",
                   json={"name": "b", "parent_provider_uuid": c["uuid"]})
    assert r.status_code == 400 and "loop" in r.json()["errors"][0]["detail"]
    # un-parenting at 1.37
    r = client.put(f"/resource_providers/{c['uuid']}",
                   json={"name": "c", "parent_provider_uuid": None})
    assert r.status_code == 200 and r.json()["root_provider_uuid"] == c["uuid"]


def test_bad_input_is_400_and_changes_nothing(client: TestClient) -> None:
    cases = [
        {"name": 5},
        {"name": "x" * 201},
        {"name": "ok", "uuid": "not-a-uuid"},
        {"name": "ok", "uuid": None},  # Placement: None is not of type 'string'
        {"name": "ok", "bogus": 1},
        {"uuid": str(uuid.uuid4())},
    ]
    for body in cases:
        r = client.post("/resource_providers", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["errors"][0]["detail"]
    r = client.post("/resource_providers", content=b"{not json",
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Malformed JSON" in r.json()["errors"][0]["detail"]
    r = client.post("/resource_providers", content=b'{"name": "x"}',
                    headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert client.get("/resource_providers").json()["resource_providers"] == []


def test_list_filters_and_unknown_params(client: TestClient) -> None:
    _create(client, "n1")
    _create(client, "n2")
    assert [p["name"] for p in
            client.get("/resource_providers?name=n2").json()["resource_providers"]] == ["n2"]
    r = client.get("/resource_providers?bogus=1")
    assert r.status_code == 400
    r = client.get("/resource_providers?member_of=not-a-uuid")
    assert r.status_code == 400
    r = client.get("/resource_providers?resources=VCPU:0")
    assert r.status_code == 400
    r = client.get("/resource_providers?resources=NOPE:1")
    assert r.status_code == 400
    r = client.get("/resource_providers?required=CUSTOM_NOPE")
    assert r.status_code == 400



def test_a_resources_amount_past_a_database_integer_is_no_provider(
        any_client: TestClient) -> None:
    """?resources= takes any amount up to 2**63-1 (as allocation candidates do):
    one no inventory can hold finds no provider. PostgreSQL took the amount as
    an INTEGER (a 400, 'NumericValueOutOfRange'), and used + amount past a
    BIGINT overflowed there, where SQLite answered 200 and no provider."""
    rp = _create(any_client, "big")["uuid"]
    r = any_client.put(f"/resource_providers/{rp}/inventories", json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
    assert r.status_code == 200, r.text
    r = any_client.put(f"/allocations/{uuid.uuid4()}", json={
        "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u",
        "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert r.status_code == 204, r.text
    for amount in (7, 2**31, 2**63 - 1):
        r = any_client.get(f"/resource_providers?resources=VCPU:{amount}")
        assert r.status_code == 200, (amount, r.text)
        assert [p["uuid"] for p in r.json()["resource_providers"]] == \
            ([rp] if amount == 7 else []), amount
        r = any_client.get(f"/allocation_candidates?resources=VCPU:{amount}")
        assert r.status_code == 200, (amount, r.text)
        assert len(r.json()["allocation_requests"]) == (1 if amount == 7 else 0), amount

def test_microversion_header(client: TestClient) -> None:
    r = client.get("/", headers={"openstack-api-version": "placement 1.99"})
    assert r.status_code == 406
    r = client.get("/resource_providers", headers={"openstack-api-version": "placement 1.x"})
    assert r.status_code == 400
    r = client.get("/")
    assert r.json()["versions"][0]["max_version"] == "1.39"


def test_auth_required(client: TestClient) -> None:
    r = client.get("/resource_providers", headers={"x-auth-token": ""})
    assert r.status_code == 401
    r = client.get("/resource_providers", headers={"x-auth-token": "bob:proj"})
    assert r.status_code == 403
    r = client.get("/resource_providers", headers={"x-auth-token": "bob:proj",
                                                   "x-roles": "admin"})
    assert r.status_code == 200


def test_an_empty_name_is_a_name(any_client: TestClient) -> None:
    """Placement's schema bounds a name's length above only (200), but its
    create refuses "" (a 400, checked against Placement 16.0.0 by
    tests/conformance); a rename to "" it takes. One provider may have it."""
    r = any_client.post("/resource_providers", json={"name": ""})
    assert r.status_code == 400, r.text
    first = any_client.post("/resource_providers", json={"name": "a"}).json()["uuid"]
    r = any_client.put(f"/resource_providers/{first}", json={"name": ""})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == ""
    other = any_client.post("/resource_providers", json={"name": "b"}).json()["uuid"]
    r = any_client.put(f"/resource_providers/{other}", json={"name": ""})
    assert r.status_code == 409 and r.json()["errors"][0]["code"] == "placement.duplicate_name"
    r = any_client.get("/resource_providers", params={"name": ""})
    assert [p["name"] for p in r.json()["resource_providers"]] == [""]


def test_a_write_to_a_provider_that_does_not_exist_is_404_before_its_body_is_read(
        client: TestClient) -> None:
    """Placement looks the provider up before it reads the body of these
    writes: a provider that does not exist is the 404 whatever the body
    (malformed, empty, or not as the schema wants); one that exists gets the
    400. A media type other than JSON is the 415 first, as in Placement."""
    real = str(_create(client, "cn1")["uuid"])
    nope = str(uuid.uuid4())
    json_type = {"content-type": "application/json"}
    paths = ["", "/inventories", "/inventories/VCPU", "/aggregates"]
    for path in paths:
        for method in (["PUT", "POST"] if path == "/inventories" else ["PUT"]):
            for content in (b"{not json", b"", b'{"bad": 1}'):
                r = client.request(method, f"/resource_providers/{nope}{path}",
                                   content=content, headers=json_type)
                assert r.status_code == 404, (method, path, content, r.text)
                r = client.request(method, f"/resource_providers/{real}{path}",
                                   content=content, headers=json_type)
                assert r.status_code == 400, (method, path, content, r.text)
            r = client.request(method, f"/resource_providers/{nope}{path}",
                               content=b"{}", headers={"content-type": "text/plain"})
            assert r.status_code == 415, (method, path, r.text)
