"""The Placement API at a zone with children answers for consumers below it
(zone/subtree.py): GET and DELETE /allocations/{consumer} and GET /usages at
the root, for consumers placed through it into a cell."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from strato.zone.inprocess import InProcessTree
from tests.zone.test_split import make, req, used

V = "openstack-api-version"


def run(tmp: Path, scenario: Any) -> None:
    async def main() -> None:
        tree = await make(tmp)
        try:
            await scenario(tree)
        finally:
            await tree.aclose()
    asyncio.run(main())


async def place(tree: InProcessTree, n: int = 1, vcpu: int = 2, **kw: Any) -> dict[str, Any]:
    r = await tree.client("global").post("/strato/v1/schedule", json=req(n, vcpu=vcpu, **kw))
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_consumer_placed_through_the_root_is_seen_and_released_there(tmp_path: Path
                                                                       ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree)
        p = answer["placements"][0]
        c = p["consumer_uuid"]
        r = await root.get(f"/allocations/{c}", headers={V: "placement 1.38"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert list(body["allocations"]) == [p["provider"]]
        assert body["allocations"][p["provider"]]["resources"] == {"VCPU": 2,
                                                                  "MEMORY_MB": 1024}
        assert body["project_id"] == "p" and body["consumer_generation"] == 1
        assert body["consumer_type"] == "unknown"  # what the schedule call said
        # An old microversion gets the old shape.
        r = await root.get(f"/allocations/{c}", headers={V: "placement 1.0"})
        assert set(r.json()) == {"allocations"}
        # Usages at the root count what is below it.
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.json() == {"usages": {"VCPU": 2, "MEMORY_MB": 1024}}
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.38"})
        assert r.json()["usages"]["unknown"]["consumer_count"] == 1
        # Released at the root: gone from its cell.
        r = await root.delete(f"/allocations/{c}")
        assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 0
        assert (await root.get(f"/allocations/{c}")).json() == {"allocations": {}}
        r = await root.delete(f"/allocations/{c}")
        assert r.status_code == 404, r.text
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.json() == {"usages": {}}
    run(tmp_path, scenario)


def test_a_cell_that_does_not_answer_makes_reads_fail_clearly_not_wrong(tmp_path: Path
                                                                       ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree)
        where = answer["placements"][0]["zone"].split("/")[1]
        other = "ord" if where == "dfw" else "dfw"
        c = answer["placements"][0]["consumer_uuid"]
        tree.kill(other)
        # Found in the cell that answers: fine.
        r = await root.get(f"/allocations/{c}")
        assert r.status_code == 200 and r.json()["allocations"], r.text
        # Not found, and a cell could not say: 503 naming it, not an empty answer.
        r = await root.get(f"/allocations/{uuid.uuid4()}")
        assert r.status_code == 503, r.text
        assert other in r.text and r.headers.get("retry-after")
        r = await root.get("/usages?project_id=p", headers={V: "placement 1.9"})
        assert r.status_code == 503 and other in r.text
        r = await root.delete(f"/allocations/{uuid.uuid4()}")
        assert r.status_code == 503, r.text
        tree.revive(other)
        await asyncio.sleep(0.3)  # a failed child is probed again after backoff
        for _ in range(40):
            r = await root.get(f"/allocations/{uuid.uuid4()}")
            if r.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200 and r.json() == {"allocations": {}}
    run(tmp_path, scenario)


def test_a_divided_gang_is_released_consumer_by_consumer_at_the_root(tmp_path: Path
                                                                    ) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        answer = await place(tree, 6, vcpu=8, atomic=True)
        assert {p["zone"] for p in answer["placements"]} == {"global/dfw", "global/ord"}
        for p in answer["placements"]:
            r = await root.delete(f"/allocations/{p['consumer_uuid']}")
            assert r.status_code == 204, r.text
        assert await used(tree, "dfw") + await used(tree, "ord") == 0
    run(tmp_path, scenario)


def test_the_roots_metrics_show_its_children(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        await place(tree, 6, vcpu=8)
        text = (await root.get("/metrics")).text
        assert 'strato_child_healthy{child="dfw"} 1.0' in text
        assert 'strato_child_healthy{child="ord"} 1.0' in text
        assert 'strato_schedule_attempts_total{result="placed"} 1.0' in text
        assert 'strato_placements_total 6.0' in text
        tree.kill("ord")
        await root.get(f"/allocations/{uuid.uuid4()}")  # asks ord: a failure
        text = (await root.get("/metrics")).text
        assert 'strato_child_healthy{child="ord"} 0.0' in text
    run(tmp_path, scenario)
