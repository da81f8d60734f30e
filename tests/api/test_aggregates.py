"""GET/PUT /resource_providers/{uuid}/aggregates, read as a spec."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from strato.store import changes, schema
from strato.store.db import Database

AGG1 = "83a3d69d-8920-48e2-8914-cadfd8fa2f91"
AGG2 = "99652f11-9f77-46b9-80b7-4b1989be9f8c"
AGG3 = "282d469e-29e2-4a8a-8f2e-31b3202b696a"


def _v(minor: int) -> dict[str, str]:
    return {"openstack-api-version": f"placement 1.{minor}"}


def _provider(client: TestClient, name: str = "cn1") -> str:
    r = client.post("/resource_providers", json={"name": name})
    assert r.status_code == 200, r.text
    return str(r.json()["uuid"])


def _url(rp: str) -> str:
    return f"/resource_providers/{rp}/aggregates"


def _put(client: TestClient, rp: str, aggs: list[str], gen: int, **kw: Any) -> Any:
    return client.put(_url(rp), json={"aggregates": aggs, "resource_provider_generation": gen},
                      **kw)


def _get(client: TestClient, rp: str, **kw: Any) -> Any:
    r = client.get(_url(rp), **kw)
    assert r.status_code == 200, r.text
    return r.json()


def _code(r: Any) -> str:
    return str(r.json()["errors"][0]["code"])


def _db(client: TestClient) -> Database:
    db: Database = client.app.state.db  # type: ignore[attr-defined]
    return db


def _member_of(client: TestClient, agg: str) -> set[str]:
    r = client.get(f"/resource_providers?member_of={agg}")
    assert r.status_code == 200, r.text
    return {p["uuid"] for p in r.json()["resource_providers"]}


def test_set_and_get_with_generation(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert _get(any_client, rp) == {"aggregates": [], "resource_provider_generation": 0}
    r = _put(any_client, rp, [AGG2, AGG1], 0)
    assert r.status_code == 200, r.text
    assert r.json() == {"aggregates": [AGG2, AGG1], "resource_provider_generation": 1}
    got = _get(any_client, rp)
    assert sorted(got["aggregates"]) == sorted([AGG1, AGG2])
    assert got["resource_provider_generation"] == 1
    assert any_client.get(f"/resource_providers/{rp}").json()["generation"] == 1
    assert _member_of(any_client, AGG1) == {rp}
    # Replacing the set drops what is not named; an empty list clears it.
    r = _put(any_client, rp, [AGG3], 1)
    assert r.status_code == 200 and r.json()["resource_provider_generation"] == 2
    assert _get(any_client, rp)["aggregates"] == [AGG3]
    assert _member_of(any_client, AGG1) == set()
    r = _put(any_client, rp, [], 2)
    assert r.status_code == 200
    assert _get(any_client, rp) == {"aggregates": [], "resource_provider_generation": 3}


def test_stale_generation_is_409_and_changes_nothing(any_client: TestClient) -> None:
    rp = _provider(any_client)
    _put(any_client, rp, [AGG1], 0)
    r = _put(any_client, rp, [AGG2], 0)
    assert r.status_code == 409 and _code(r) == "placement.concurrent_update"
    assert _get(any_client, rp) == {"aggregates": [AGG1], "resource_provider_generation": 1}


def test_aggregates_are_shared_and_created_once(any_client: TestClient) -> None:
    rp1 = _provider(any_client, "a")
    rp2 = _provider(any_client, "b")
    assert _put(any_client, rp1, [AGG1, AGG2], 0).status_code == 200
    assert _put(any_client, rp2, [AGG1], 0).status_code == 200
    assert _member_of(any_client, AGG1) == {rp1, rp2}
    assert _member_of(any_client, AGG2) == {rp1}
    with _db(any_client).read() as conn:
        rows = conn.execute(sa.select(schema.placement_aggregates.c.uuid)).scalars().all()
    assert sorted(rows) == sorted([AGG1, AGG2])
    # Writing one provider's set leaves the other's alone.
    _put(any_client, rp1, [], 1)
    assert _get(any_client, rp2)["aggregates"] == [AGG1]


def test_before_1_19_body_is_a_list_and_generation_untouched(client: TestClient) -> None:
    rp = _provider(client)
    r = client.put(_url(rp), json=[AGG1, AGG2], headers=_v(18))
    assert r.status_code == 200, r.text
    assert r.json() == {"aggregates": [AGG1, AGG2]}
    assert _get(client, rp, headers=_v(18)) == {"aggregates": [AGG1, AGG2]}
    # No generation is checked or bumped before 1.19.
    assert client.get(f"/resource_providers/{rp}").json()["generation"] == 0
    # The forms do not mix.
    r = _put(client, rp, [AGG3], 0, headers=_v(18))
    assert r.status_code == 400
    r = client.put(_url(rp), json=[AGG3])
    assert r.status_code == 400
    assert sorted(_get(client, rp)["aggregates"]) == sorted([AGG1, AGG2])


def test_not_there_before_1_1(client: TestClient) -> None:
    rp = _provider(client)
    assert client.get(_url(rp), headers=_v(0)).status_code == 404
    r = client.put(_url(rp), json=[AGG1], headers=_v(0))
    assert r.status_code == 404
    assert _get(client, rp, headers=_v(1)) == {"aggregates": []}


def test_bad_bodies_are_400_and_change_nothing(client: TestClient) -> None:
    rp = _provider(client)
    _put(client, rp, [AGG1], 0)
    before = _get(client, rp)
    bodies: list[Any] = [
        {"aggregates": ["not-a-uuid"], "resource_provider_generation": 1},
        {"aggregates": [AGG2, AGG2], "resource_provider_generation": 1},
        {"aggregates": [AGG2]},
        {"resource_provider_generation": 1},
        {"aggregates": [AGG2], "resource_provider_generation": "1"},
        {"aggregates": AGG2, "resource_provider_generation": 1},
        {"aggregates": [5], "resource_provider_generation": 1},
        {"aggregates": [AGG2], "resource_provider_generation": 1, "extra": True},
        {"aggregates": ["{" + AGG2 + "}"], "resource_provider_generation": 1},
    ]
    for body in bodies:
        r = client.put(_url(rp), json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["errors"][0]["detail"].startswith("JSON does not validate")
    r = client.put(_url(rp), json=[AGG2, AGG2], headers=_v(18))
    assert r.status_code == 400 and AGG2 in r.json()["errors"][0]["detail"]
    r = client.put(_url(rp), content=b"[", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = client.put(_url(rp), content=b"[]", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    assert _get(client, rp) == before


def test_unknown_provider_is_404(client: TestClient) -> None:
    rp = str(uuid.uuid4())
    for r in (client.get(_url(rp)), _put(client, rp, [AGG1], 0),
              _put(client, rp, ["bad"], 0)):
        assert r.status_code == 404, r.text
        assert _code(r) == "placement.undefined_code"
    r = client.put(_url(rp), json=[AGG1], headers=_v(18))
    # Before 1.23 an error has no code, as from Placement.
    assert r.status_code == 404 and "code" not in r.json()["errors"][0], r.text


def test_cache_headers_from_1_15(client: TestClient) -> None:
    rp = _provider(client)
    r = client.get(_url(rp))
    assert r.headers["cache-control"] == "no-cache" and "last-modified" in r.headers
    r = client.get(_url(rp), headers=_v(14))
    assert "cache-control" not in r.headers and "last-modified" not in r.headers


def test_writes_record_a_change(client: TestClient) -> None:
    rp = _provider(client)
    for headers, body in ((None, {"aggregates": [AGG1], "resource_provider_generation": 0}),
                          (_v(18), [AGG2])):
        with _db(client).read() as conn:
            seq = changes.current_seq(conn)
        assert client.put(_url(rp), json=body, headers=headers).status_code == 200
        with _db(client).read() as conn:
            assert changes.since(conn, seq) == [(seq + 1, rp, "aggregates")]


def test_admin_only(client: TestClient) -> None:
    rp = _provider(client)
    user = {"x-auth-token": "bob:proj"}
    assert client.get(_url(rp), headers=user).status_code == 403
    assert _put(client, rp, [AGG1], 0, headers=user).status_code == 403
    assert _get(client, rp)["aggregates"] == []


def test_odd_input_is_4xx_never_500(any_client: TestClient) -> None:
    rp = _provider(any_client)
    assert any_client.get("/resource_providers/%00/aggregates").status_code == 404
    for odd in (AGG1 + "\u0000", AGG1 + "\n"):
        r = _put(any_client, rp, [odd], 0)
        assert r.status_code == 400, r.text
    r = _put(any_client, rp, [AGG1], 2**40)
    assert r.status_code == 409
    assert _get(any_client, rp) == {"aggregates": [], "resource_provider_generation": 0}


def test_a_provider_in_more_aggregates_than_one_query_may_name(any_client: TestClient) -> None:
    # 70,000 uuids (under the 16 MiB body limit, which holds 400,000): more
    # bound values than one statement takes (PostgreSQL 65,535; SQLite
    # 32,766, 250,000 in some builds) was a 500. The lookups go in slices now.
    rp = any_client.post("/resource_providers", json={"name": "many"}).json()
    many = [str(uuid.uuid4()) for _ in range(70_000)]
    r = any_client.put(f"/resource_providers/{rp['uuid']}/aggregates",
                       json={"resource_provider_generation": rp["generation"],
                             "aggregates": many})
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["aggregates"]) == len(many)
    got = any_client.get(f"/resource_providers/{rp['uuid']}/aggregates").json()
    assert sorted(got["aggregates"]) == sorted(many)
    r = any_client.put(f"/resource_providers/{rp['uuid']}/aggregates",
                       json={"resource_provider_generation": got["resource_provider_generation"],
                             "aggregates": many[:1]})
    assert r.status_code == 200, r.text[:300]
    assert any_client.get(f"/resource_providers/{rp['uuid']}/aggregates"
                          ).json()["aggregates"] == many[:1]
