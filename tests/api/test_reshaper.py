"""POST /reshaper: move inventory and allocations between providers in one step."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from tests.api.test_allocations import PROJECT, USER, v

ALT_USER = "6f1c7a2e-0000-4000-8000-00000000cccc"


def provider(client: TestClient, name: str, inventories: dict[str, dict[str, Any]],
             parent: str | None = None) -> str:
    body: dict[str, Any] = {"name": name}
    if parent:
        body["parent_provider_uuid"] = parent
    r = client.post("/resource_providers", json=body)
    assert r.status_code == 200, r.text
    rp = str(r.json()["uuid"])
    if inventories:
        r = client.put(f"/resource_providers/{rp}/inventories",
                       json={"resource_provider_generation": 0, "inventories": inventories})
        assert r.status_code == 200, r.text
    return rp


def allocate(client: TestClient, c: str, allocs: dict[str, dict[str, int]],
             user: str = USER) -> None:
    r = client.put(f"/allocations/{c}", json={
        "allocations": {rp: {"resources": res} for rp, res in allocs.items()},
        "project_id": PROJECT, "user_id": user, "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    assert r.status_code == 204, r.text


def entry(allocs: dict[str, dict[str, int]], gen: int | None, user: str = USER,
          **extra: Any) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": res} for rp, res in allocs.items()},
            "project_id": PROJECT, "user_id": user, "consumer_generation": gen,
            "consumer_type": "INSTANCE", **extra}


def state(client: TestClient, rps: list[str], consumers: list[str]) -> Any:
    """Everything a reshape may change: inventories, usages, generations, allocations."""
    return ([client.get(f"/resource_providers/{rp}/inventories").json() for rp in rps],
            [client.get(f"/resource_providers/{rp}/usages").json() for rp in rps],
            [client.get(f"/allocations/{c}").json() for c in consumers])


class Host:
    """A compute node whose VCPU is about to move to a child provider (Placement's story)."""

    def __init__(self, client: TestClient) -> None:
        self.root = provider(client, "cn", {
            "VCPU": {"total": 10, "max_unit": 8},
            "DISK_GB": {"total": 2048, "step_size": 10, "min_unit": 10, "max_unit": 1200}})
        self.c0, self.c1, self.c2 = (str(uuid.uuid4()) for _ in range(3))
        allocate(client, self.c0, {self.root: {"DISK_GB": 1000}})
        allocate(client, self.c1, {self.root: {"VCPU": 8}})
        allocate(client, self.c2, {self.root: {"DISK_GB": 20, "VCPU": 1}}, user=ALT_USER)
        self.child = provider(client, "cn-numa0", {}, parent=self.root)
        self.root_gen = client.get(f"/resource_providers/{self.root}").json()["generation"]

    def body(self, root_disk: dict[str, Any] | None = None, **overrides: Any
             ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "inventories": {
                self.root: {"resource_provider_generation": self.root_gen, "inventories": {
                    "DISK_GB": root_disk or {"total": 2048, "step_size": 10, "min_unit": 10,
                                             "max_unit": 1200}}},
                self.child: {"resource_provider_generation": 0,
                             "inventories": {"VCPU": {"total": 10, "max_unit": 8}}}},
            "allocations": {
                self.c0: entry({self.root: {"DISK_GB": 1000}}, 1),
                self.c1: entry({self.child: {"VCPU": 8}}, 1),
                self.c2: entry({self.root: {"DISK_GB": 20}, self.child: {"VCPU": 1}}, 1,
                               user=ALT_USER)}}
        out.update(overrides)
        return out

    def state(self, client: TestClient) -> Any:
        return state(client, [self.root, self.child], [self.c0, self.c1, self.c2])


def test_move_vcpu_and_its_allocations_to_a_child(any_client: TestClient) -> None:
    host = Host(any_client)
    r = any_client.post("/reshaper", json=host.body())
    assert r.status_code == 204, r.text
    root = any_client.get(f"/resource_providers/{host.root}/usages").json()
    child = any_client.get(f"/resource_providers/{host.child}/usages").json()
    # Three writes each, as in Placement: interim inventory, allocations, final inventory.
    gen = host.root_gen + 3
    assert root == {"usages": {"DISK_GB": 1020}, "resource_provider_generation": gen}
    assert child == {"usages": {"VCPU": 9}, "resource_provider_generation": 3}
    inv = any_client.get(f"/resource_providers/{host.root}/inventories").json()
    assert set(inv["inventories"]) == {"DISK_GB"}
    got = any_client.get(f"/allocations/{host.c2}").json()
    assert got["allocations"] == {
        host.root: {"generation": gen, "resources": {"DISK_GB": 20}},
        host.child: {"generation": 3, "resources": {"VCPU": 1}}}
    assert (got["consumer_generation"], got["user_id"]) == (2, ALT_USER)


def test_every_failure_changes_nothing(any_client: TestClient) -> None:
    host = Host(any_client)
    before = host.state(any_client)
    gone = str(uuid.uuid4())
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        # the allocations on VCPU stay where they are: the root's VCPU is in use
        (host.body(allocations={}), 409, "placement.inventory.inuse"),
        # stale provider generation
        ({**host.body(), "inventories": {**host.body()["inventories"], host.root: {
            "resource_provider_generation": host.root_gen - 1,
            "inventories": {"VCPU": {"total": 10}}}}}, 409, "placement.concurrent_update"),
        # stale consumer generation
        (host.body(allocations={**host.body()["allocations"],
                                host.c0: entry({host.root: {"DISK_GB": 1000}}, 7)}),
         409, "placement.concurrent_update"),
        # an allocation that breaks the new max_unit
        (host.body(root_disk={"total": 2048, "step_size": 10, "min_unit": 10,
                              "max_unit": 600}), 409, None),
        # more than the new inventory holds, and more than was used before
        # (as much as before passes: Placement lets a write leave an
        # over-capacity provider no worse, see the test below)
        (host.body(root_disk={"total": 500}, allocations={
            **host.body()["allocations"], host.c0: entry({host.root: {"DISK_GB": 1010}}, 1)}),
         409, None),
        # a provider that does not exist
        (host.body(inventories={**host.body()["inventories"], gone: {
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 1}}}}),
         400, "placement.resource_provider.not_found"),
        # a class that does not exist
        (host.body(root_disk=None, inventories={**host.body()["inventories"], host.root: {
            "resource_provider_generation": host.root_gen,
            "inventories": {"DISK_OF_STEEL": {"total": 2048}}}}), 400, None),
        # an invalid inventory record
        (host.body(root_disk={"total": 10, "reserved": 11}), 400, None),
    ]
    for body, status, code in cases:
        r = any_client.post("/reshaper", json=body)
        assert r.status_code == status, (body, r.text)
        if code:
            assert r.json()["errors"][0]["code"] == code, r.text
        assert host.state(any_client) == before
    # After all that, the real reshape still works: nothing was half applied.
    assert any_client.post("/reshaper", json=host.body()).status_code == 204


def test_bad_bodies_are_400(client: TestClient) -> None:
    host = Host(client)
    before = host.state(client)
    good = host.body()
    inv_root = good["inventories"][host.root]
    bad_bodies: list[Any] = [
        {"cows": "moo"},
        {"inventories": good["inventories"]},
        {"allocations": good["allocations"]},
        {**good, "inventories": {}},
        {**good, "extra": 1},
        {**good, "inventories": {"not-a-uuid": inv_root}},
        {**good, "inventories": {host.root: {**inv_root, "bad_field": "moo"}}},
        {**good, "inventories": {host.root: {"inventories": inv_root["inventories"]}}},
        {**good, "inventories": {host.root: {**inv_root, "inventories": {
            "DISK_GB": {"total": 0}}}}},
        {**good, "inventories": {host.root: {**inv_root, "inventories": {
            "DISK_GB": {"total": 10, "bad_field": 1}}}}},
        {**good, "inventories": {host.root: {**inv_root, "inventories": {
            "DISK_GB": {"total": "10"}}}}},
        {**good, "allocations": {host.c0: {**good["allocations"][host.c0], "bad_field": 1}}},
        {**good, "allocations": {host.c0: {k: val for k, val in good["allocations"][
            host.c0].items() if k != "consumer_type"}}},
        {**good, "allocations": {host.c0: entry({host.root: {"DISK_GB": 0}}, 1)}},
        {**good, "allocations": {"nope": good["allocations"][host.c0]}},
    ]
    for body in bad_bodies:
        r = client.post("/reshaper", json=body)
        assert r.status_code == 400, (body, r.text)
        assert "JSON does not validate" in r.json()["errors"][0]["detail"], r.text
    assert host.state(client) == before


def test_microversions(client: TestClient) -> None:
    host = Host(client)
    assert client.post("/reshaper", json=host.body(), headers=v("1.29")).status_code == 404
    assert client.get("/reshaper").status_code == 405
    # consumer_type is refused before 1.38 ...
    r = client.post("/reshaper", json=host.body(), headers=v("1.37"))
    assert r.status_code == 400 and "consumer_type" in r.json()["errors"][0]["detail"]
    # ... and the older body works there.
    body = host.body()
    for e in body["allocations"].values():
        del e["consumer_type"]
    assert client.post("/reshaper", json=body, headers=v("1.30")).status_code == 204
    assert client.get(f"/allocations/{host.c1}").json()["consumer_type"] == "INSTANCE"


def test_new_consumers_and_type(client: TestClient) -> None:
    rp = provider(client, "cn", {"DISK_GB": {"total": 100}})
    c = str(uuid.uuid4())
    r = client.post("/reshaper", json={
        "inventories": {rp: {"resource_provider_generation": 1, "inventories": {
            "DISK_GB": {"total": 200}, "VCPU": {"total": 8}}}},
        "allocations": {c: {**entry({rp: {"DISK_GB": 150, "VCPU": 2}}, None),
                            "consumer_type": "RESHAPED"}}})
    assert r.status_code == 204, r.text
    got = client.get(f"/allocations/{c}").json()
    assert got["consumer_type"] == "RESHAPED" and got["consumer_generation"] == 1


def test_admin_only(client: TestClient) -> None:
    r = client.post("/reshaper", json={}, headers={"x-auth-token": "bob:proj"})
    assert r.status_code == 403


def test_a_reshape_to_a_capacity_beyond_int64_keeps_the_engine_answering(
        client: TestClient) -> None:
    host = Host(client)
    body = host.body()
    body["inventories"][host.child]["inventories"]["VCPU"] = {
        "total": 2147483647, "allocation_ratio": 1e30}
    r = client.post("/reshaper", json=body)
    assert r.status_code == 204, r.text
    r = client.get("/allocation_candidates?resources=VCPU:1")
    assert r.status_code == 200, r.text
    assert r.json()["provider_summaries"][host.child]["resources"]["VCPU"]["used"] == 9
    r = client.post("/strato/v1/schedule", json={
        "consumers": [str(uuid.uuid4())], "project_id": PROJECT, "user_id": USER,
        "groups": [{"resources": {"VCPU": 1}}]})
    assert r.status_code == 200, r.text
    assert client.get("/strato/v1/summary").status_code == 200


def test_a_reshape_may_leave_a_provider_over_capacity_no_worse(any_client: TestClient) -> None:
    """As Placement 16.0.0 answers (checked against it): the root's DISK_GB
    shrinks below what stays allocated on it, and no allocation grows."""
    host = Host(any_client)
    before = any_client.get(f"/resource_providers/{host.root}/usages").json()["usages"]
    r = any_client.post("/reshaper", json=host.body(root_disk={"total": 500}))
    assert r.status_code == 204, r.text
    after = any_client.get(f"/resource_providers/{host.root}/usages").json()["usages"]
    assert before["DISK_GB"] == after["DISK_GB"] == 1020
