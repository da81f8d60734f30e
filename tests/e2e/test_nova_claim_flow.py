"""Nova's claim flow, replayed byte for byte against a real server.

Nova's scheduler asks `GET /allocation_candidates`, picks one, and claims by
sending that candidate's `allocations` *and* `mappings` back in
`PUT /allocations/{instance}` at the candidates' microversion, with
`consumer_generation: null` for a new instance. The unnamed group's key in
`mappings` is `""`. Moves (resize, migrate) swap allocations between the
instance and a migration consumer with `POST /allocations`.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.api import make_provider
from tests.helpers.server import ServerProcess

PROJECT = str(uuid.uuid4())
USER = str(uuid.uuid4())
FLAVOR = "resources=VCPU:1,MEMORY_MB:512,DISK_GB:1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("nova")
    with ServerProcess(f"sqlite:///{tmp / 'strato.db'}", log_path=tmp / "server.log") as s:
        yield s


def api(server: ServerProcess, version: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30.0, headers={
        "x-auth-token": "admin", "openstack-api-version": f"placement {version}"})


@pytest.fixture(scope="module")
def hosts(server: ServerProcess) -> list[str]:
    with api(server, "1.39") as c:
        inv = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192},
               "DISK_GB": {"total": 100}}
        return [make_provider(c, f"compute{i}", inv) for i in range(2)]


def claim_body(candidate: dict[str, Any], version: str, generation: int | None
               ) -> dict[str, Any]:
    """What Nova's report client sends: the candidate, deep-copied, plus who."""
    body = copy.deepcopy(candidate)
    body.update(project_id=PROJECT, user_id=USER, consumer_generation=generation)
    if version >= "1.38":
        body["consumer_type"] = "INSTANCE"
    return body


@pytest.mark.parametrize("version", ["1.36", "1.37", "1.38", "1.39"])
def test_boot_claims_with_the_candidates_mappings(server: ServerProcess, hosts: list[str],
                                                  version: str) -> None:
    with api(server, version) as c:
        r = c.get(f"/allocation_candidates?{FLAVOR}&limit=1000")
        assert r.status_code == 200, r.text
        candidate = r.json()["allocation_requests"][0]
        assert "" in candidate["mappings"]  # the unnamed group, as Nova gets it
        instance = str(uuid.uuid4())
        r = c.put(f"/allocations/{instance}", json=claim_body(candidate, version, None))
        assert r.status_code == 204, r.text
        got = c.get(f"/allocations/{instance}").json()
        assert got["consumer_generation"] == 1
        assert got["allocations"].keys() == candidate["allocations"].keys()
        # A retry with the stale null generation is a conflict, as in Placement.
        r = c.put(f"/allocations/{instance}", json=claim_body(candidate, version, None))
        assert r.status_code == 409
        assert r.json()["errors"][0]["code"] == "placement.concurrent_update"
        assert c.delete(f"/allocations/{instance}").status_code == 204


def test_granular_claim_echoes_numbered_and_unnamed_groups(server: ServerProcess,
                                                           hosts: list[str]) -> None:
    with api(server, "1.36") as c:
        r = c.get("/allocation_candidates?resources=VCPU:1&resources1=MEMORY_MB:256"
                  "&group_policy=none&limit=5")
        assert r.status_code == 200, r.text
        candidate = r.json()["allocation_requests"][0]
        assert set(candidate["mappings"]) == {"", "1"}
        instance = str(uuid.uuid4())
        r = c.put(f"/allocations/{instance}", json=claim_body(candidate, "1.36", None))
        assert r.status_code == 204, r.text
        assert c.delete(f"/allocations/{instance}").status_code == 204


def test_move_swaps_allocations_to_a_migration(server: ServerProcess,
                                               hosts: list[str]) -> None:
    """Resize: the instance's allocations move to the migration record, the
    instance claims the destination, then confirm drops the migration's."""
    with api(server, "1.36") as c:
        cands = c.get(f"/allocation_candidates?{FLAVOR}&limit=1000").json()
        source = cands["allocation_requests"][0]
        instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
        assert c.put(f"/allocations/{instance}",
                     json=claim_body(source, "1.36", None)).status_code == 204
        held = c.get(f"/allocations/{instance}").json()
        # Nova's move_allocations at 1.28: one POST, both consumers' generations.
        r = c.post("/allocations", json={
            migration: {"allocations": held["allocations"], "project_id": PROJECT,
                        "user_id": USER, "consumer_generation": None},
            instance: {"allocations": {}, "project_id": PROJECT, "user_id": USER,
                       "consumer_generation": held["consumer_generation"]}})
        assert r.status_code == 204, r.text
        assert c.get(f"/allocations/{instance}").json()["allocations"] == {}
        moved = c.get(f"/allocations/{migration}").json()
        assert moved["allocations"].keys() == held["allocations"].keys()
        # The destination: another host's candidate, claimed for the instance.
        (src_rp,) = held["allocations"]
        dest = next(ar for ar in cands["allocation_requests"]
                    if src_rp not in ar["allocations"])
        gen = c.get(f"/allocations/{instance}").json().get("consumer_generation")
        r = c.put(f"/allocations/{instance}", json=claim_body(dest, "1.36", gen))
        assert r.status_code == 204, r.text
        # Confirm the resize: the migration's allocations go.
        assert c.delete(f"/allocations/{migration}").status_code == 204
        assert c.get(f"/allocations/{instance}").json()["allocations"].keys() \
            == dest["allocations"].keys()
        assert c.delete(f"/allocations/{instance}").status_code == 204


@pytest.mark.parametrize(("mappings", "status"), [
    ({"": ["not-a-uuid"], "1": None}, 400),   # "1" matches the group pattern: must be uuids
    ({"1": []}, 400),                          # minItems
    ({}, 400),                                 # minProperties
    ({"": ["anything"], "!": 5}, 204),         # keys without a group character: free
    ({"_NUMA0": [str(uuid.UUID(int=7))]}, 204),
])
def test_mappings_validated_as_placement_validates_them(
        server: ServerProcess, hosts: list[str], mappings: dict[str, Any], status: int) -> None:
    with api(server, "1.36") as c:
        body = {"allocations": {hosts[1]: {"resources": {"VCPU": 1}}},
                "project_id": PROJECT, "user_id": USER, "consumer_generation": None,
                "mappings": mappings}
        instance = str(uuid.uuid4())
        r = c.put(f"/allocations/{instance}", json=body)
        assert r.status_code == status, r.text
        if status == 400:
            assert r.json()["errors"][0]["code"] == "placement.undefined_code"
            assert c.get(f"/allocations/{instance}").json()["allocations"] == {}
        else:
            c.delete(f"/allocations/{instance}")
