"""GET /resource_providers/{uuid}/usages and GET /usages, read as a spec."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from tests.api.test_allocations import PROJECT, USER, make_provider, v


def put(client: TestClient, rp: str, resources: dict[str, int], *, ctype: str | None = None,
        project: str = PROJECT, user: str = USER) -> str:
    c = str(uuid.uuid4())
    body: dict[str, Any] = {"allocations": {rp: {"resources": resources}},
                            "project_id": project, "user_id": user,
                            "consumer_generation": None}
    headers = v("1.37")
    if ctype is not None:
        body["consumer_type"] = ctype
        headers = v("1.38")
    r = client.put(f"/allocations/{c}", json=body, headers=headers)
    assert r.status_code == 204, r.text
    return c


def test_provider_usages(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU=8, MEMORY_MB=4096, DISK_GB=100)
    assert any_client.get(f"/resource_providers/{rp}/usages").json() == {
        "resource_provider_generation": 0,
        "usages": {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}}
    put(any_client, rp, {"VCPU": 2, "MEMORY_MB": 512})
    put(any_client, rp, {"VCPU": 1})
    r = any_client.get(f"/resource_providers/{rp}/usages")
    assert r.json() == {"resource_provider_generation": 2,
                        "usages": {"VCPU": 3, "MEMORY_MB": 512, "DISK_GB": 0}}
    assert r.headers["cache-control"] == "no-cache"
    assert "cache-control" not in any_client.get(f"/resource_providers/{rp}/usages",
                                                 headers=v("1.14")).headers
    r = any_client.get(f"/resource_providers/{uuid.uuid4()}/usages")
    assert r.status_code == 404


def test_total_usages_by_project_and_user(any_client: TestClient) -> None:
    a = make_provider(any_client, "a", VCPU=8, MEMORY_MB=4096)
    b = make_provider(any_client, "b", VCPU=8)
    put(any_client, a, {"VCPU": 2, "MEMORY_MB": 256})
    put(any_client, b, {"VCPU": 3}, user="other-user")
    put(any_client, b, {"VCPU": 1}, project="other-project")
    old = v("1.37")
    got = any_client.get(f"/usages?project_id={PROJECT}", headers=old).json()
    assert got == {"usages": {"VCPU": 5, "MEMORY_MB": 256}}
    got = any_client.get(f"/usages?project_id={PROJECT}&user_id={USER}", headers=old).json()
    assert got == {"usages": {"VCPU": 2, "MEMORY_MB": 256}}
    got = any_client.get("/usages?project_id=nobody", headers=old).json()
    assert got == {"usages": {}}


def test_usages_by_consumer_type_from_1_38(any_client: TestClient) -> None:
    rp = make_provider(any_client, "cn", VCPU=32, DISK_GB=1000)
    put(any_client, rp, {"VCPU": 2, "DISK_GB": 10}, ctype="INSTANCE")
    put(any_client, rp, {"VCPU": 1}, ctype="INSTANCE")
    put(any_client, rp, {"DISK_GB": 20}, ctype="MIGRATION")
    put(any_client, rp, {"VCPU": 4, "DISK_GB": 5})  # no type: "unknown"

    def usages(extra: str = "") -> dict[str, Any]:
        r = any_client.get(f"/usages?project_id={PROJECT}{extra}")
        assert r.status_code == 200, r.text
        got: dict[str, Any] = r.json()["usages"]
        return got

    assert usages() == {
        "INSTANCE": {"VCPU": 3, "DISK_GB": 10, "consumer_count": 2},
        "MIGRATION": {"DISK_GB": 20, "consumer_count": 1},
        "unknown": {"VCPU": 4, "DISK_GB": 5, "consumer_count": 1}}
    assert usages("&consumer_type=MIGRATION") == {
        "MIGRATION": {"DISK_GB": 20, "consumer_count": 1}}
    assert usages("&consumer_type=all") == {
        "all": {"VCPU": 7, "DISK_GB": 35, "consumer_count": 4}}
    assert usages("&consumer_type=unknown") == {
        "unknown": {"VCPU": 4, "DISK_GB": 5, "consumer_count": 1}}
    # Upper-case spellings are ordinary (absent) type names, as in Placement.
    assert usages("&consumer_type=ALL") == {}
    assert usages("&consumer_type=UNKNOWN") == {}
    assert usages("&consumer_type=COW") == {}
    assert usages("&user_id=someone-else") == {}
    r = any_client.get("/usages?project_id=nobody&consumer_type=all")
    assert r.json() == {"usages": {}}


def test_total_usages_query_validation(client: TestClient) -> None:
    r = client.get(f"/usages?project_id={PROJECT}", headers=v("1.8"))
    assert r.status_code == 404
    bad = [
        "/usages",
        "/usages?user_id=u",
        "/usages?project_id=",
        f"/usages?project_id={'x' * 256}",
        f"/usages?project_id={PROJECT}&bogus=1",
        f"/usages?project_id={PROJECT}&consumer_type=instance",
        f"/usages?project_id={PROJECT}&consumer_type=",
        f"/usages?project_id={PROJECT}&user_id=",
    ]
    for path in bad:
        r = client.get(path)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["errors"][0]["detail"]
    r = client.get(f"/usages?project_id={PROJECT}&consumer_type=all", headers=v("1.37"))
    assert r.status_code == 400


def test_usages_admin_only(client: TestClient) -> None:
    user = {"x-auth-token": "bob:proj"}
    assert client.get(f"/usages?project_id={PROJECT}", headers=user).status_code == 403
    rp = make_provider(client, "cn", VCPU=1)
    assert client.get(f"/resource_providers/{rp}/usages", headers=user).status_code == 403
