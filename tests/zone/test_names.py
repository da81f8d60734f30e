"""Custom resource classes and traits made in a cell are known at the root
(zone/names.py): a request that names them there is answered for the cell's
providers, as one Placement would."""

from __future__ import annotations

from pathlib import Path

from strato.zone.inprocess import InProcessTree
from strato.zone.names import PER_SUMMARY, TreeNames
from strato.zone.tree import LEARN_BURST
from tests.zone.helpers import record_calls
from tests.zone.test_split import host, run, zt

V = {"openstack-api-version": "placement 1.39"}


async def baremetal_in_dfw(tree: InProcessTree) -> str:
    """A provider in cell dfw with a custom class and trait made there, after
    the root's last look at the cell's summary."""
    cell = tree.client("dfw")
    assert (await cell.put("/resource_classes/CUSTOM_BAREMETAL_GOLD", headers=V)
            ).status_code == 201
    assert (await cell.put("/traits/CUSTOM_RAID10", headers=V)).status_code == 201
    rp = await host(cell, "bm-1", "dfw/room1/rack0/bm-1")
    r = await cell.put(f"/resource_providers/{rp}/inventories", headers=V, json={
        "resource_provider_generation": 1,
        "inventories": {"CUSTOM_BAREMETAL_GOLD": {"total": 1}}})
    assert r.status_code == 200, r.text
    r = await cell.put(f"/resource_providers/{rp}/traits", headers=V, json={
        "resource_provider_generation": 2, "traits": ["CUSTOM_RAID10"]})
    assert r.status_code == 200, r.text
    return rp


def test_a_class_and_trait_made_in_a_cell_are_asked_for_at_the_root(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        rp = await baremetal_in_dfw(tree)
        root = tree.client("global")
        r = await root.get("/allocation_candidates?resources=CUSTOM_BAREMETAL_GOLD:1"
                           "&required=CUSTOM_RAID10", headers=V)
        assert r.status_code == 200, r.text
        assert [list(a["allocations"]) for a in r.json()["allocation_requests"]] == [[rp]]
        r = await root.get("/resource_providers?resources=CUSTOM_BAREMETAL_GOLD:1"
                           "&required=CUSTOM_RAID10", headers=V)
        assert r.status_code == 200, r.text
        assert [p["uuid"] for p in r.json()["resource_providers"]] == [rp]
        # In the root's registry now, as in the cell's.
        assert (await root.get("/resource_classes/CUSTOM_BAREMETAL_GOLD", headers=V)
                ).status_code == 200
        assert (await root.get("/traits/CUSTOM_RAID10", headers=V)).status_code == 204
    run(tmp_path, scenario)


def test_a_summary_brings_the_names_up_without_a_request(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        await baremetal_in_dfw(tree)
        await zt(tree, "global").refresh(fresh=True)
        await zt(tree, "global").names.settle(tree.dbs["global"])
        root = tree.client("global")
        assert (await root.get("/traits/CUSTOM_RAID10", headers=V)).status_code == 204
    run(tmp_path, scenario)


def test_a_name_nobody_has_is_a_400_and_its_rounds_through_the_subtree_are_rationed(
        tmp_path: Path) -> None:
    """Each request naming an unknown class asks the subtree (a cell may have
    made it just now), up to LEARN_BURST rounds at once, then one a second."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        rounds = LEARN_BURST
        # The root's own children, asked once a round each (by their URLs).
        urls = {k["url"] for k in (await root.get("/strato/v1/children")).json()["children"]}
        kids = len(urls)
        called = record_calls(tree, lambda m, p: p.startswith("/strato/v1/summary"))
        for _ in range(3 * rounds):
            r = await root.get("/allocation_candidates?resources=CUSTOM_NOWHERE:1", headers=V)
            assert r.status_code == 400, r.text
            assert "No such resource class CUSTOM_NOWHERE" in r.text
        asked = [u for u in called if u in urls]
        # The burst, and maybe one more for the time the requests took.
        assert kids and rounds * kids <= len(asked) <= (rounds + 2) * kids, (len(asked), kids)
    run(tmp_path, scenario)


def test_the_registry_listed_at_the_root_is_the_trees(tmp_path: Path) -> None:
    """GET /traits (associated or not) and GET /resource_classes at the root
    list what the cells have, as one Placement's registry would."""
    async def scenario(tree: InProcessTree) -> None:
        root = tree.client("global")
        await tree.client("ord").put("/traits/CUSTOM_UNUSED_IN_ORD", headers=V)
        assert (await root.put("/traits/CUSTOM_UNUSED_AT_ROOT", headers=V)).status_code == 201
        await baremetal_in_dfw(tree)
        r = await root.get("/traits?associated=true", headers=V)
        assert r.status_code == 200, r.text
        assert "CUSTOM_RAID10" in r.json()["traits"]
        assert "CUSTOM_UNUSED_AT_ROOT" not in r.json()["traits"]
        r = await root.get("/traits?associated=false&name=startswith:CUSTOM_", headers=V)
        assert set(r.json()["traits"]) == {"CUSTOM_UNUSED_IN_ORD", "CUSTOM_UNUSED_AT_ROOT"}
        r = await root.get("/traits?name=in:CUSTOM_UNUSED_IN_ORD,CUSTOM_RAID10", headers=V)
        assert r.json()["traits"] == ["CUSTOM_RAID10", "CUSTOM_UNUSED_IN_ORD"]
        r = await root.get("/resource_classes", headers=V)
        names = [c["name"] for c in r.json()["resource_classes"]]
        assert "CUSTOM_BAREMETAL_GOLD" in names and names[0] == "VCPU"
        tree.kill("ord")
        r = await root.get("/traits", headers=V)
        assert r.status_code == 200 and r.headers["x-strato-incomplete"] == "ord"
    run(tmp_path, scenario)


def test_a_child_listing_names_without_end_does_not_flood_the_registry(
        tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        names = TreeNames()
        db = tree.dbs["global"]
        flood = {"classes": {}, "traits": [f"CUSTOM_T{i}" for i in range(1000)]}
        names.note(flood, db)
        await names.settle(db)
        assert names.size() == PER_SUMMARY
        names.note(flood, db)
        await names.settle(db)
        assert names.size() == 2 * PER_SUMMARY
    run(tmp_path, scenario)


def test_a_schedule_at_the_root_names_a_class_a_cell_just_made(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree) -> None:
        rp = await baremetal_in_dfw(tree)
        r = await tree.client("global").post("/strato/v1/schedule", json={
            "consumers": ["5c0e5d43-9e41-4b9a-8a4e-1d8b0c7f0001"], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"CUSTOM_BAREMETAL_GOLD": 1},
                                        "required": ["CUSTOM_RAID10"]}]})
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["provider"] == rp
    run(tmp_path, scenario)
