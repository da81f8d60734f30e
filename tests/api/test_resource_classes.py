"""GET/POST/PUT/DELETE /resource_classes, read as a spec."""

from __future__ import annotations

import re

import sqlalchemy as sa
from fastapi.testclient import TestClient
from httpx import Response

from strato.model.names import STANDARD_RESOURCE_CLASSES
from strato.store.db import Database
from strato.store.schema import CUSTOM_RC_MIN_ID, inventories, resource_classes

V1_1 = {"openstack-api-version": "placement 1.1"}
V1_2 = {"openstack-api-version": "placement 1.2"}
V1_6 = {"openstack-api-version": "placement 1.6"}
V1_7 = {"openstack-api-version": "placement 1.7"}
V1_14 = {"openstack-api-version": "placement 1.14"}
V1_15 = {"openstack-api-version": "placement 1.15"}
HTTP_DATE = re.compile(r"^\w+, \d+ \w+ \d{4} [\d:]+ GMT$")


def _names(client: TestClient) -> list[str]:
    r = client.get("/resource_classes")
    assert r.status_code == 200, r.text
    return [rc["name"] for rc in r.json()["resource_classes"]]


def _create(client: TestClient, name: str) -> None:
    r = client.post("/resource_classes", json={"name": name})
    assert r.status_code == 201, r.text


def _code(r: Response) -> str:
    return str(r.json()["errors"][0]["code"])


def _detail(r: Response) -> str:
    return str(r.json()["errors"][0]["detail"])


def _add_inventory(client: TestClient, rc_name: str) -> None:
    """An inventory row of `rc_name` on a new provider, written straight to the store."""
    rp = client.post("/resource_providers", json={"name": f"rp-{rc_name}"}).json()
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    with db.write() as conn:
        rc_id = conn.execute(sa.select(resource_classes.c.id)
                             .where(resource_classes.c.name == rc_name)).scalar_one()
        rp_id = conn.execute(sa.text("SELECT id FROM resource_providers WHERE uuid = :u"),
                             {"u": rp["uuid"]}).scalar_one()
        conn.execute(sa.insert(inventories).values(
            resource_provider_id=rp_id, resource_class_id=rc_id, total=4, reserved=0,
            min_unit=1, max_unit=4, step_size=1, allocation_ratio=1.0))


def test_list_has_every_standard_class_in_order_with_links(any_client: TestClient) -> None:
    r = any_client.get("/resource_classes")
    assert r.status_code == 200
    classes = r.json()["resource_classes"]
    assert [c["name"] for c in classes] == list(STANDARD_RESOURCE_CLASSES)
    assert classes[0] == {"name": "VCPU",
                          "links": [{"rel": "self", "href": "/resource_classes/VCPU"}]}


def test_routes_need_microversion_1_2(client: TestClient) -> None:
    assert client.get("/resource_classes", headers=V1_1).status_code == 404
    assert client.get("/resource_classes/VCPU", headers=V1_1).status_code == 404
    r = client.post("/resource_classes", json={"name": "CUSTOM_A"}, headers=V1_1)
    assert r.status_code == 404 and r.json()["errors"][0]["title"] == "Not Found"
    # 404 comes before the content type is looked at
    r = client.post("/resource_classes", content=b"data",
                    headers={**V1_1, "content-type": "text/plain"})
    assert r.status_code == 404
    assert client.put("/resource_classes/CUSTOM_A", json={"name": "CUSTOM_B"},
                      headers=V1_1).status_code == 404
    assert client.delete("/resource_classes/VCPU", headers=V1_1).status_code == 404
    assert client.get("/resource_classes", headers=V1_2).status_code == 200
    assert "CUSTOM_A" not in _names(client)


def test_create_show_list_delete(any_client: TestClient) -> None:
    r = any_client.post("/resource_classes", json={"name": "CUSTOM_NFV_FOO"})
    assert r.status_code == 201
    assert r.headers["location"] == "http://testserver/resource_classes/CUSTOM_NFV_FOO"
    assert r.content == b"" and "content-type" not in r.headers
    r = any_client.get("/resource_classes/CUSTOM_NFV_FOO")
    assert r.status_code == 200
    assert r.json() == {"name": "CUSTOM_NFV_FOO", "links": [
        {"rel": "self", "href": "/resource_classes/CUSTOM_NFV_FOO"}]}
    names = _names(any_client)
    assert len(names) == len(STANDARD_RESOURCE_CLASSES) + 1
    assert names[-1] == "CUSTOM_NFV_FOO"
    assert any_client.delete("/resource_classes/CUSTOM_NFV_FOO").status_code == 204
    r = any_client.delete("/resource_classes/CUSTOM_NFV_FOO")
    assert r.status_code == 404 and "CUSTOM_NFV_FOO" in _detail(r)
    assert any_client.get("/resource_classes/CUSTOM_NFV_FOO").status_code == 404


def test_create_duplicate_is_409(any_client: TestClient) -> None:
    _create(any_client, "CUSTOM_DUP")
    r = any_client.post("/resource_classes", json={"name": "CUSTOM_DUP"})
    assert r.status_code == 409
    assert _code(r) == "placement.undefined_code"
    assert "Conflicting resource class already exists: CUSTOM_DUP" in _detail(r)
    assert _names(any_client).count("CUSTOM_DUP") == 1


def test_bad_create_bodies_are_400_and_change_nothing(client: TestClient) -> None:
    before = _names(client)
    cases: list[object] = [
        {"name": "FOO"},
        {"name": "IRON_NFV"},
        {"name": "VCPU"},
        {"name": "CUSTOM_Illegal&@!Name?"},
        {"name": "CUSTOM_lower"},
        {"name": "CUSTOM_"},
        {"name": "CUSTOM_A\n"},
        {"name": "CUSTOM_" + "X" * 249},
        {"name": 5},
        {"name": None},
        {},
        {"name": "CUSTOM_OK", "additional": "additional"},
        ["CUSTOM_OK"],
        "CUSTOM_OK",
    ]
    for body in cases:
        r = client.post("/resource_classes", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["errors"][0]["title"] == "Bad Request"
        assert "JSON does not validate" in _detail(r), (body, r.text)
    r = client.post("/resource_classes", json={"name": "CUSTOM_OK", "additional": 1})
    assert "Additional properties are not allowed" in _detail(r)
    r = client.post("/resource_classes", content=b'{"foo": }',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Malformed JSON" in _detail(r)
    r = client.post("/resource_classes", content=b"",
                    headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.post("/resource_classes", content=b'{"name": "CUSTOM_OK"}',
                    headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert _names(client) == before


def test_longest_allowed_name(client: TestClient) -> None:
    name = "CUSTOM_" + "X" * 248
    assert len(name) == 255
    _create(client, name)
    assert client.get(f"/resource_classes/{name}").status_code == 200


def test_rename_before_1_7(any_client: TestClient) -> None:
    _create(any_client, "CUSTOM_OLD")
    r = any_client.put("/resource_classes/CUSTOM_OLD", json={"name": "CUSTOM_NEW"},
                       headers=V1_6)
    assert r.status_code == 200
    assert r.json() == {"name": "CUSTOM_NEW", "links": [
        {"rel": "self", "href": "/resource_classes/CUSTOM_NEW"}]}
    names = _names(any_client)
    assert "CUSTOM_NEW" in names and "CUSTOM_OLD" not in names
    # renaming to its own name is harmless
    r = any_client.put("/resource_classes/CUSTOM_NEW", json={"name": "CUSTOM_NEW"},
                       headers=V1_2)
    assert r.status_code == 200


def test_rename_keeps_the_class_id_so_inventories_follow(client: TestClient) -> None:
    _create(client, "CUSTOM_GPU")
    _add_inventory(client, "CUSTOM_GPU")
    r = client.put("/resource_classes/CUSTOM_GPU", json={"name": "CUSTOM_GPU2"},
                   headers=V1_6)
    assert r.status_code == 200
    r = client.delete("/resource_classes/CUSTOM_GPU2")
    assert r.status_code == 409


def test_rename_errors_before_1_7_change_nothing(client: TestClient) -> None:
    _create(client, "CUSTOM_A")
    _create(client, "CUSTOM_B")
    before = _names(client)
    cases = [
        # (path name, body, status, detail fragment)
        ("VCPU", {"name": "VCPU_ALTERNATE"}, 400, "JSON does not validate"),
        ("VCPU", {"name": "CUSTOM_C"}, 400, "Cannot update standard resource class VCPU"),
        ("CUSTOM_A", {"name": "VCPU"}, 400, "JSON does not validate"),
        ("CUSTOM_A", {"name": "CUSTOM_B"}, 409, "Resource class already exists: CUSTOM_B"),
        ("CUSTOM_A", {"name": "CUSTOM_C", "additional": "x"}, 400,
         "Additional properties are not allowed"),
        ("CUSTOM_A", {"name": "CUSTOM_" + "X" * 249}, 400, "JSON does not validate"),
        ("CUSTOM_A", {}, 400, "name"),
        ("CUSTOM_NOPE", {"name": "CUSTOM_C"}, 404, "CUSTOM_NOPE"),
    ]
    for path_name, body, status, fragment in cases:
        r = client.put(f"/resource_classes/{path_name}", json=body, headers=V1_6)
        assert r.status_code == status, (path_name, body, r.text)
        assert fragment in _detail(r), (path_name, body, r.text)
    r = client.put("/resource_classes/CUSTOM_A", content=b'{"name": "CUSTOM_C"}',
                   headers={**V1_6, "content-type": "text/plain"})
    assert r.status_code == 415
    assert _names(client) == before


def test_put_from_1_7_creates_or_verifies(any_client: TestClient) -> None:
    r = any_client.put("/resource_classes/CUSTOM_NEW", headers=V1_7)
    assert r.status_code == 201
    assert r.headers["location"] == "http://testserver/resource_classes/CUSTOM_NEW"
    assert r.content == b""
    r = any_client.put("/resource_classes/CUSTOM_NEW", headers=V1_7)
    assert r.status_code == 204
    assert r.headers["location"] == "http://testserver/resource_classes/CUSTOM_NEW"
    # a body is not needed and not looked at
    r = any_client.put("/resource_classes/CUSTOM_NEW", json={"name": "CUSTOM_OTHER"})
    assert r.status_code == 204
    assert _names(any_client)[-1:] == ["CUSTOM_NEW"]


def test_put_from_1_7_refuses_standard_and_bad_names(client: TestClient) -> None:
    before = _names(client)
    for name in ["VCPU", "MEMORY_MB", "FOO", "CUSTOM_lower", "CUSTOM_A%21",
                 "CUSTOM_" + "X" * 249]:
        r = client.put(f"/resource_classes/{name}")
        assert r.status_code == 400, (name, r.text)
        assert "JSON does not validate" in _detail(r)
    assert _names(client) == before


def test_delete_rules(any_client: TestClient) -> None:
    r = any_client.delete("/resource_classes/VCPU")
    assert r.status_code == 400
    assert "Cannot delete standard resource class VCPU" in _detail(r)
    assert any_client.delete("/resource_classes/CUSTOM_NOPE").status_code == 404
    _create(any_client, "CUSTOM_USED")
    _add_inventory(any_client, "CUSTOM_USED")
    r = any_client.delete("/resource_classes/CUSTOM_USED")
    assert r.status_code == 409
    assert "Class is in use in inventory" in _detail(r)
    assert "CUSTOM_USED" in _names(any_client)
    assert "VCPU" in _names(any_client)


def test_custom_ids_start_at_the_custom_minimum(client: TestClient) -> None:
    _create(client, "CUSTOM_FIRST")
    client.put("/resource_classes/CUSTOM_SECOND")
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    with db.read() as conn:
        ids = dict(conn.execute(sa.select(resource_classes.c.name, resource_classes.c.id)
                                .where(resource_classes.c.name.like("CUSTOM%"))).all())
    assert ids == {"CUSTOM_FIRST": CUSTOM_RC_MIN_ID, "CUSTOM_SECOND": CUSTOM_RC_MIN_ID + 1}


def test_cache_headers_from_1_15(client: TestClient) -> None:
    _create(client, "CUSTOM_C")
    for url in ["/resource_classes", "/resource_classes/VCPU", "/resource_classes/CUSTOM_C"]:
        r = client.get(url, headers=V1_14)
        assert r.status_code == 200
        assert "last-modified" not in r.headers and "cache-control" not in r.headers
        r = client.get(url, headers=V1_15)
        assert r.headers["cache-control"] == "no-cache"
        assert HTTP_DATE.match(r.headers["last-modified"]), r.headers["last-modified"]
    r = client.put("/resource_classes/CUSTOM_C", headers=V1_15)
    assert r.status_code == 204 and "last-modified" not in r.headers


def test_admin_only(client: TestClient) -> None:
    user = {"x-auth-token": "bob:proj"}
    assert client.get("/resource_classes", headers=user).status_code == 403
    assert client.get("/resource_classes/VCPU", headers=user).status_code == 403
    r = client.post("/resource_classes", json={"name": "CUSTOM_X"}, headers=user)
    assert r.status_code == 403 and r.json()["errors"][0]["title"] == "Forbidden"
    assert client.put("/resource_classes/CUSTOM_X", headers=user).status_code == 403
    assert client.delete("/resource_classes/CUSTOM_X", headers=user).status_code == 403
    assert "CUSTOM_X" not in _names(client)
