"""/traits and /resource_providers/{uuid}/traits, read as a spec."""

from __future__ import annotations

import re
import uuid

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from httpx import Response

from strato.api.app import create_app
from strato.config import Settings
from strato.model.names import STANDARD_TRAITS
from strato.store import children
from strato.store.db import Database
from strato.store.schema import changes
from tests.conftest import ADMIN

V1_5 = {"openstack-api-version": "placement 1.5"}
V1_6 = {"openstack-api-version": "placement 1.6"}
V1_14 = {"openstack-api-version": "placement 1.14"}
V1_15 = {"openstack-api-version": "placement 1.15"}
HTTP_DATE = re.compile(r"^\w+, \d+ \w+ \d{4} [\d:]+ GMT$")
INVALID_TRAIT = ('The trait is invalid. A valid trait must be no longer than 255 characters, '
                 'start with the prefix "CUSTOM_" and use following characters: "A"-"Z", '
                 '"0"-"9" and "_"')


def _detail(r: Response) -> str:
    return str(r.json()["errors"][0]["detail"])


def _traits(client: TestClient, qs: str = "") -> list[str]:
    r = client.get(f"/traits{qs}")
    assert r.status_code == 200, r.text
    return list(r.json()["traits"])


def _put_trait(client: TestClient, name: str) -> None:
    assert client.put(f"/traits/{name}").status_code == 201


def _provider(client: TestClient, name: str = "cn1") -> str:
    r = client.post("/resource_providers", json={"name": name})
    assert r.status_code == 200, r.text
    return str(r.json()["uuid"])


def _set(client: TestClient, rp: str, names: list[str], gen: int,
         headers: dict[str, str] | None = None) -> Response:
    return client.put(f"/resource_providers/{rp}/traits",
                      json={"traits": names, "resource_provider_generation": gen},
                      headers=headers)


def _rp_traits(client: TestClient, rp: str) -> dict[str, object]:
    r = client.get(f"/resource_providers/{rp}/traits")
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


def _trait_changes(client: TestClient) -> list[tuple[int, str]]:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    with db.read() as conn:
        rows = conn.execute(sa.select(changes.c.seq, changes.c.resource_provider_uuid)
                            .where(changes.c.kind == "traits").order_by(changes.c.seq)).all()
    return [(int(r[0]), r[1]) for r in rows]


# --- /traits --------------------------------------------------------------------------------

def test_list_has_every_standard_trait(any_client: TestClient) -> None:
    assert _traits(any_client) == sorted(STANDARD_TRAITS)


def test_routes_need_microversion_1_6(client: TestClient) -> None:
    rp = _provider(client)
    assert client.get("/traits", headers=V1_5).status_code == 404
    assert client.put("/traits/CUSTOM_T", headers=V1_5).status_code == 404
    assert client.get("/traits/CUSTOM_T", headers=V1_5).status_code == 404
    assert client.delete("/traits/HW_CPU_X86_SSE", headers=V1_5).status_code == 404
    assert client.get(f"/resource_providers/{rp}/traits", headers=V1_5).status_code == 404
    assert _set(client, rp, [], 0, V1_5).status_code == 404
    assert client.delete(f"/resource_providers/{rp}/traits", headers=V1_5).status_code == 404
    assert "CUSTOM_T" not in _traits(client)
    assert _rp_traits(client, rp)["resource_provider_generation"] == 0


def test_create_show_delete_custom_trait(any_client: TestClient) -> None:
    r = any_client.put("/traits/CUSTOM_TRAIT_1", headers=V1_6)
    assert r.status_code == 201
    assert r.headers["location"] == "http://testserver/traits/CUSTOM_TRAIT_1"
    assert "content-type" not in r.headers and "last-modified" not in r.headers
    r = any_client.put("/traits/CUSTOM_TRAIT_1", headers=V1_6)
    assert r.status_code == 204 and r.headers["location"] == "http://testserver/traits/CUSTOM_TRAIT_1"
    r = any_client.get("/traits/CUSTOM_TRAIT_1", headers=V1_6)
    assert r.status_code == 204 and r.content == b"" and "content-type" not in r.headers
    assert any_client.get("/traits/HW_CPU_X86_SSE").status_code == 204
    assert any_client.get("/traits/NON_EXISTED").status_code == 404
    r = any_client.delete("/traits/CUSTOM_TRAIT_1")
    assert r.status_code == 204 and "content-type" not in r.headers
    assert any_client.get("/traits/CUSTOM_TRAIT_1").status_code == 404
    assert any_client.delete("/traits/CUSTOM_TRAIT_1").status_code == 404


def test_bad_trait_names_are_400_and_change_nothing(client: TestClient) -> None:
    before = _traits(client)
    for name in ["TRAIT_X", "CUSTOM_ABC:1", "CUSTOM_lower", "CUSTOM_", "HW_CPU_X86_AVX2",
                 "CUSTOM_A%0A", "CUSTOM_" + "X" * 249]:
        r = client.put(f"/traits/{name}")
        assert r.status_code == 400, (name, r.text)
        assert _detail(r) == INVALID_TRAIT
    _put_trait(client, "CUSTOM_" + "X" * 248)  # exactly 255 characters
    assert _traits(client) == sorted([*before, "CUSTOM_" + "X" * 248])


def test_delete_standard_or_associated_trait_is_refused(any_client: TestClient) -> None:
    r = any_client.delete("/traits/HW_CPU_X86_SSE")
    assert r.status_code == 400 and "Cannot delete standard trait" in _detail(r)
    _put_trait(any_client, "CUSTOM_USED")
    rp = _provider(any_client)
    assert _set(any_client, rp, ["CUSTOM_USED"], 0).status_code == 200
    r = any_client.delete("/traits/CUSTOM_USED")
    assert r.status_code == 409
    assert "The trait CUSTOM_USED is in use by a resource provider." in _detail(r)
    assert "CUSTOM_USED" in _traits(any_client)
    assert "HW_CPU_X86_SSE" in _traits(any_client)


def test_list_filters(any_client: TestClient) -> None:
    for name in ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2", "CUSTOM_ANOTHER_TRAIT", "CUSTOM_TRAITX"]:
        _put_trait(any_client, name)
    assert _traits(any_client, "?name=in:CUSTOM_TRAIT_1,CUSTOM_TRAIT_2,CUSTOM_NOPE") == [
        "CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]
    assert _traits(any_client, "?name=startswith:CUSTOM_TRAIT") == [
        "CUSTOM_TRAITX", "CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]
    # "_" is literal, not a LIKE wildcard
    assert _traits(any_client, "?name=startswith:CUSTOM_TRAIT_") == [
        "CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]
    assert _traits(any_client, "?name=startswith:CUSTOM_%") == []
    # The prefix matches whatever its case, on every database, as Placement's
    # LIKE does on SQLite and MySQL (PostgreSQL's LIKE alone minded the case).
    assert _traits(any_client, "?name=startswith:custom_Trait_") == [
        "CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]
    rp = _provider(any_client)
    assert _set(any_client, rp, ["CUSTOM_TRAIT_1", "HW_CPU_X86_SSE"], 0).status_code == 200
    assert _traits(any_client, "?associated=true") == ["CUSTOM_TRAIT_1", "HW_CPU_X86_SSE"]
    assert _traits(any_client, "?associated=TRUE&name=startswith:CUSTOM_") == [
        "CUSTOM_TRAIT_1"]
    unassociated = _traits(any_client, "?associated=false")
    assert "CUSTOM_TRAIT_1" not in unassociated and "HW_CPU_X86_SSE" not in unassociated
    assert "CUSTOM_TRAIT_2" in unassociated
    assert len(unassociated) == len(_traits(any_client)) - 2


def test_bad_list_queries_are_400(client: TestClient) -> None:
    r = client.get("/traits?name=in_abc")
    assert r.status_code == 400
    assert _detail(r) == ("Badly formatted name parameter. Expected name query string "
                          "parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. "
                          'Got: "in_abc"')
    assert client.get("/traits?name=endswith:X").status_code == 400
    r = client.get("/traits?associated=xyz")
    assert r.status_code == 400
    assert _detail(r) == 'The query parameter "associated" only accepts "true" or "false"'
    r = client.get("/traits?invalid=abc")
    assert r.status_code == 400
    assert "Invalid query string parameters: Additional properties are not allowed" in _detail(r)


def test_cache_headers_from_1_15(client: TestClient) -> None:
    _put_trait(client, "CUSTOM_T")
    rp = _provider(client)
    for url in ["/traits", "/traits/CUSTOM_T", "/traits/HW_CPU_X86_SSE",
                f"/resource_providers/{rp}/traits"]:
        r = client.get(url, headers=V1_14)
        assert "cache-control" not in r.headers and "last-modified" not in r.headers, url
        r = client.get(url, headers=V1_15)
        assert r.headers["cache-control"] == "no-cache", url
        assert HTTP_DATE.match(r.headers["last-modified"]), url
    r = client.put("/traits/CUSTOM_T", headers=V1_14)
    assert r.status_code == 204 and "last-modified" not in r.headers
    r = client.put("/traits/CUSTOM_T", headers=V1_15)
    assert r.status_code == 204 and HTTP_DATE.match(r.headers["last-modified"])
    assert r.headers["cache-control"] == "no-cache"
    r = _set(client, rp, ["CUSTOM_T"], 0, V1_14)
    assert r.status_code == 200 and "last-modified" not in r.headers
    r = _set(client, rp, ["CUSTOM_T"], 1, V1_15)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache"
    assert client.delete("/traits/CUSTOM_NOPE").headers.get("last-modified") is None


def test_admin_only(client: TestClient) -> None:
    rp = _provider(client)
    user = {"x-auth-token": "bob:proj"}
    assert client.get("/traits", headers=user).status_code == 403
    assert client.get("/traits/HW_CPU_X86_SSE", headers=user).status_code == 403
    assert client.put("/traits/CUSTOM_X", headers=user).status_code == 403
    assert client.delete("/traits/CUSTOM_X", headers=user).status_code == 403
    assert client.get(f"/resource_providers/{rp}/traits", headers=user).status_code == 403
    assert _set(client, rp, ["HW_CPU_X86_SSE"], 0, user).status_code == 403
    r = client.delete(f"/resource_providers/{rp}/traits", headers=user)
    assert r.status_code == 403
    assert "CUSTOM_X" not in _traits(client)
    assert _rp_traits(client, rp) == {"traits": [], "resource_provider_generation": 0}


# --- /resource_providers/{uuid}/traits ------------------------------------------------------

def test_provider_traits_set_get_delete(any_client: TestClient) -> None:
    rp = _provider(any_client)
    for name in ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]:
        _put_trait(any_client, name)
    assert _rp_traits(any_client, rp) == {"traits": [], "resource_provider_generation": 0}
    r = _set(any_client, rp, ["CUSTOM_TRAIT_2", "CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"], 0)
    assert r.status_code == 200
    assert r.json() == {"traits": ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"],
                        "resource_provider_generation": 1}
    assert _rp_traits(any_client, rp) == r.json()
    # replacing, not adding
    r = _set(any_client, rp, ["HW_CPU_X86_SSE"], 1)
    assert r.json() == {"traits": ["HW_CPU_X86_SSE"], "resource_provider_generation": 2}
    assert any_client.get(f"/resource_providers/{rp}").json()["generation"] == 2
    r = any_client.delete(f"/resource_providers/{rp}/traits")
    assert r.status_code == 204 and r.content == b""
    assert _rp_traits(any_client, rp) == {"traits": [], "resource_provider_generation": 3}
    # the provider filter sees the same thing
    assert _set(any_client, rp, ["CUSTOM_TRAIT_1"], 3).status_code == 200
    found = any_client.get("/resource_providers?required=CUSTOM_TRAIT_1").json()
    assert [p["uuid"] for p in found["resource_providers"]] == [rp]


def test_each_provider_trait_write_records_one_change(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert _trait_changes(any_client) == []
    _set(any_client, rp, ["HW_CPU_X86_SSE"], 0)
    _set(any_client, rp, [], 1)
    _set(any_client, rp, ["HW_CPU_X86_SSE"], 2)
    any_client.delete(f"/resource_providers/{rp}/traits")
    recorded = _trait_changes(any_client)
    assert [u for _, u in recorded] == [rp, rp, rp, rp]
    assert len({s for s, _ in recorded}) == 4
    # failed writes record nothing, and neither do writes of the set the
    # provider has (no change, no new generation: as in Placement)
    _set(any_client, rp, ["HW_CPU_X86_SSE"], 0)
    _set(any_client, rp, ["CUSTOM_NOPE"], 4)
    any_client.delete(f"/resource_providers/{rp}/traits")
    assert _set(any_client, rp, [], 4).status_code == 200
    assert len(_trait_changes(any_client)) == 4


def test_generation_conflict_is_409_and_changes_nothing(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert _set(any_client, rp, ["HW_CPU_X86_SSE"], 0).status_code == 200
    r = _set(any_client, rp, ["HW_CPU_X86_AVX"], 5)
    assert r.status_code == 409
    assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
    assert "Resource provider's generation already changed" in _detail(r)
    r = _set(any_client, rp, ["HW_CPU_X86_AVX"], 0)
    assert r.status_code == 409
    assert _rp_traits(any_client, rp) == {"traits": ["HW_CPU_X86_SSE"],
                                          "resource_provider_generation": 1}


def test_unknown_traits_are_400_naming_them_and_change_nothing(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put_trait(any_client, "CUSTOM_TRAIT_1")
    r = _set(any_client, rp, ["NON_EXISTED_TRAIT1", "NON_EXISTED_TRAIT2", "CUSTOM_TRAIT_1"], 0)
    assert r.status_code == 400
    assert "No such trait" in _detail(r)
    assert "NON_EXISTED_TRAIT1" in _detail(r) and "NON_EXISTED_TRAIT2" in _detail(r)
    assert "CUSTOM_TRAIT_1" not in _detail(r)
    assert _rp_traits(any_client, rp) == {"traits": [], "resource_provider_generation": 0}


def test_bad_provider_trait_bodies_are_400_and_change_nothing(client: TestClient) -> None:
    rp = _provider(client)
    url = f"/resource_providers/{rp}/traits"
    cases: list[tuple[object, str]] = [
        ({"traits": ["HW_CPU_X86_SSE"]}, "'resource_provider_generation' is a required"),
        ({"resource_provider_generation": 0}, "'traits' is a required"),
        ({"traits": ["HW_CPU_X86_SSE"], "resource_provider_generation": "invalid"},
         "resource_provider_generation"),
        ({"traits": ["HW_CPU_X86_SSE"], "resource_provider_generation": True},
         "resource_provider_generation"),
        ({"traits": ["HW_CPU_X86_SSE"], "resource_provider_generation": 0.5},
         "resource_provider_generation"),
        ({"traits": "invalid_type", "resource_provider_generation": 0}, "traits"),
        ({"traits": [1], "resource_provider_generation": 0}, "traits.0"),
        ({"traits": [""], "resource_provider_generation": 0}, "traits.0"),
        ({"traits": ["CUSTOM_" + "X" * 249], "resource_provider_generation": 0}, "traits.0"),
        ({"traits": [], "resource_provider_generation": 0, "additional": "x"},
         "Additional properties are not allowed"),
        ([], "JSON does not validate"),
    ]
    for body, fragment in cases:
        r = client.put(url, json=body)
        assert r.status_code == 400, (body, r.text)
        assert fragment in _detail(r), (body, r.text)
    r = client.put(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "Malformed JSON" in _detail(r)
    r = client.put(url, content=b'{"traits": [], "resource_provider_generation": 0}',
                   headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert _rp_traits(client, rp) == {"traits": [], "resource_provider_generation": 0}


def test_unknown_provider_is_404(any_client: TestClient) -> None:
    missing = str(uuid.uuid4())
    for rp in [missing, "non_existed"]:
        r = any_client.get(f"/resource_providers/{rp}/traits")
        assert r.status_code == 404
        assert f"No resource provider with uuid {rp} found" in _detail(r)
        assert r.json()["errors"][0]["code"] == "placement.undefined_code"
        r = _set(any_client, rp, ["HW_CPU_X86_SSE"], 0)
        assert r.status_code == 404
        assert any_client.delete(f"/resource_providers/{rp}/traits").status_code == 404
    assert _traits(any_client, "?associated=true") == []


def test_naming_more_traits_than_one_query_binds_is_still_a_400(any_client: TestClient) -> None:
    # 70,000 names: past the 65,535 values a PostgreSQL statement binds (a 500).
    rp = any_client.post("/resource_providers", json={"name": "t"}).json()
    names = [f"CUSTOM_NO_{i}" for i in range(70_000)]
    r = any_client.put(f"/resource_providers/{rp['uuid']}/traits",
                       json={"resource_provider_generation": rp["generation"], "traits": names})
    assert r.status_code == 400, r.text[:300]
    assert r.json()["errors"][0]["detail"].startswith("No such trait(s): CUSTOM_NO_0, ")


@pytest.mark.postgres
def test_traits_list_in_the_same_order_on_a_postgresql_with_a_language_collation(
        pg_locale_db_url: str) -> None:
    """Names are listed by code point, as on SQLite (and Placement on MySQL's
    binary order of these names): a PostgreSQL initialised with en_US (or
    ICU en-US) sorts "_" before letters and digits, so it listed CUSTOM_A_B
    before CUSTOM_A1 and CUSTOM_AB."""
    names = ["CUSTOM_AC", "CUSTOM_A_B", "CUSTOM_AB", "CUSTOM_A1", "CUSTOM_A"]
    db = Database(pg_locale_db_url)
    try:
        app = create_app(Settings(db_url=db.url), db=db, migrate=False)
        with TestClient(app, headers=ADMIN, raise_server_exceptions=False) as c:
            for n in names:
                _put_trait(c, n)
            assert _traits(c, "?name=startswith:CUSTOM_") == sorted(names)
            assert _traits(c, "?name=in:" + ",".join(names)) == sorted(names)
            listed = [t for t in _traits(c) if t.startswith("CUSTOM_")]
            assert listed == sorted(names)
            r = c.post("/resource_providers", json={"name": "h1"})
            rp = r.json()["uuid"]
            r = c.put(f"/resource_providers/{rp}/traits",
                      json={"resource_provider_generation": 0, "traits": names})
            assert r.status_code == 200, r.text
            assert r.json()["traits"] == sorted(names)
            assert c.get(f"/resource_providers/{rp}/traits").json()["traits"] == sorted(names)
        kids = ["dfw-b", "dfw_a", "dfw1", "dfwa", "Dfw-c"]
        with db.write() as conn:
            for k in kids:
                children.upsert_child(conn, k, f"http://127.0.0.1:1/{k}", None, (), None)
        with db.read() as conn:
            assert [k.name for k in children.list_children(conn)] == sorted(kids)
    finally:
        db.dispose()
