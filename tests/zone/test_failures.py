"""A parent remembers what a child refused, until room grows there."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from strato.model.schedule import ScheduleRequest
from strato.zone.failures import FailureMemory, Refusal, shape_of
from strato.zone.inprocess import InProcessTree
from strato.zone.tree import REFUSED_BEFORE
from tests.zone.test_tree import req, run


def request(vcpu: int, mem: int = 0, n: int = 1, **kw: Any) -> ScheduleRequest:
    res = {"VCPU": vcpu, **({"MEMORY_MB": mem} if mem else {})}
    return ScheduleRequest.model_validate(req(n, groups=[{"resources": res}], **kw))


def test_a_refusal_covers_every_request_that_asks_as_much_or_more() -> None:
    memory = FailureMemory()
    no = Refusal("VCPU: 3 providers short", None)
    memory.note("cell", shape_of(request(4, 4096)), 7, no)
    assert memory.blocks("cell", shape_of(request(4, 4096)), 7) == no
    assert memory.blocks("cell", shape_of(request(8, 4096)), 7) == no
    assert memory.blocks("cell", shape_of(request(4, 4096, n=3)), 7) == no
    # Less of a class, another class set, or traits: may fit.
    assert memory.blocks("cell", shape_of(request(2, 4096)), 7) is None
    assert memory.blocks("cell", shape_of(request(4)), 7) is None
    assert memory.blocks("other", shape_of(request(4, 4096)), 7) is None
    # Something was freed there: ask again.
    assert memory.blocks("cell", shape_of(request(4, 4096)), 8) is None
    memory.note("cell", shape_of(request(8, 8192)), 8, no)
    assert memory.blocks("cell", shape_of(request(4, 4096)), 8) is None
    assert memory.blocks("cell", shape_of(request(8, 8192)), 8) == no


def test_group_rules_are_not_remembered() -> None:
    spread = request(1, constraints=[{"type": "anti_affinity", "level": "rack"}],
                     group="web")
    assert shape_of(spread) is None
    tagged = request(1, constraints=[{"type": "tags", "required": ["hipaa"]}])
    assert shape_of(tagged) != shape_of(request(1))


def test_soft_group_rules_are_not_remembered_either() -> None:
    """A routing zone keeps a soft rule above its children by how it divides
    the request: its refusal says what that division found, not only how much
    room there is. Remembered under the shape without the rule, it blocked
    every request of that shape (a soft room anti-affinity refused as if hard
    was then "refused as much before" for a plain request too)."""
    memory = FailureMemory()
    for rule in ({"type": "anti_affinity", "level": "room", "hard": False},
                 {"type": "affinity", "level": "room", "hard": False},
                 {"type": "spread", "level": "room", "hard": False}):
        soft = request(2, 4096, n=3, constraints=[rule], group="web5")
        assert shape_of(soft) is None
        memory.note("dfw", shape_of(soft), 7, Refusal("the children could take 2 of 3", None))
        assert memory.blocks("dfw", shape_of(request(2, 4096, n=3)), 7) is None
    # Soft static rules still do not matter: they are dropped before a refusal.
    located = request(1, constraints=[{"type": "location", "pattern": "lon/*",
                                       "hard": False}])
    assert shape_of(located) == shape_of(request(1))


def test_tree_stops_asking_a_packed_child_until_it_frees_room(tmp_path: Path) -> None:
    """dfw-r1 has free VCPU on one host and free memory on the others: its
    summary passes a request for both, and it refuses. The parents remember;
    after a release there, the widen step sees the new token and asks again."""
    async def scenario(tree: InProcessTree) -> None:
        leaf = tree.client("dfw-r1")
        hosts = {p["name"]: p["uuid"] for p in
                 (await leaf.get("/resource_providers")).json()["resource_providers"]}
        held = {}
        for name, res in (("dfw-r1-h0", {"VCPU": 8}), ("dfw-r1-h1", {"MEMORY_MB": 16384}),
                          ("dfw-r1-h2", {"VCPU": 8})):
            consumer = str(uuid.uuid4())
            r = await leaf.put(f"/allocations/{consumer}", json={
                "allocations": {hosts[name]: {"resources": res}},
                "project_id": "p", "user_id": "u", "consumer_generation": None},
                headers={"openstack-api-version": "placement 1.28"})
            assert r.status_code == 204, r.text
            held[name] = consumer
        body = {"groups": [{"resources": {"VCPU": 4, "MEMORY_MB": 4096}}],
                "constraints": [{"type": "location", "pattern": "dfw/room1/*"}],
                "explain": True}
        r = await tree.client("global").post("/strato/v1/schedule", json=req(1, **body))
        assert r.status_code == 409, r.text
        first = {o["zone"]: o for o in r.json()["explain"]["children"]}
        assert first["dfw"]["outcome"] == "no_valid_placement"
        r = await tree.client("global").post("/strato/v1/schedule", json=req(1, **body))
        assert r.status_code == 409, r.text
        again = {o["zone"]: o for o in r.json()["explain"]["children"]}
        assert again["dfw"]["outcome"] == "pruned"
        assert REFUSED_BEFORE in again["dfw"]["reason"]
        # Free h0's VCPU: dfw-r1's token moves; the parents' cached summaries
        # still show the old one, so the request is pruned, widened, and placed.
        r = await leaf.delete(f"/allocations/{held['dfw-r1-h0']}")
        assert r.status_code == 204, r.text
        r = await tree.client("global").post("/strato/v1/schedule", json=req(1, **body))
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["provider"] == hosts["dfw-r1-h0"]
    run(tmp_path, scenario)
