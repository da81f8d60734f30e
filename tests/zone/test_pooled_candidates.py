"""GET /allocation_candidates at a zone with a sharing pool and children
(zone/subtree.pooled): the pool is combined with the children's computes in
its aggregates as Placement combines a sharing provider with a compute node,
also for a class some child has, and the pool's traits count for the
unnamed group's `required`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strato.zone.inprocess import InProcessTree
from tests.zone.test_shared_pool import AGG, provider, run

V = {"openstack-api-version": "placement 1.39"}


def combos(body: dict[str, Any]) -> set[frozenset[str]]:
    return {frozenset(a["allocations"]) for a in body["allocation_requests"]}


async def names(tree: InProcessTree) -> dict[str, str]:
    r = await tree.client("global").get("/resource_providers", headers=V)
    return {p["name"]: p["uuid"] for p in r.json()["resource_providers"]}


async def candidates(tree: InProcessTree, query: str) -> dict[str, Any]:
    r = await tree.client("global").get(f"/allocation_candidates?{query}", headers=V)
    assert r.status_code == 200, r.text
    assert "x-strato-incomplete" not in r.headers, r.headers["x-strato-incomplete"]
    return dict(r.json())


def test_a_compute_with_disk_of_its_own_is_offered_with_the_pool_too(tmp_path: Path
                                                                      ) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        # One compute in the pool's aggregate has disk of its own: DISK_GB is
        # then a class a child has, and was never taken from the pool.
        await provider(tree.client("c1"), "c1-disk", {"VCPU": {"total": 8},
                                                     "DISK_GB": {"total": 500}}, aggs=[AGG])
        await tree.apps["global"].state.tree.refresh(fresh=True)
        n = await names(tree)
        body = await candidates(tree, "resources=VCPU:1,DISK_GB:10")
        assert combos(body) == {
            frozenset({n["c1-h0"], pool}), frozenset({n["c1-h1"], pool}),
            frozenset({n["c1-disk"]}), frozenset({n["c1-disk"], pool})}
        assert pool in body["provider_summaries"]
        # c2's hosts are not in the pool's aggregate, nor is any with a
        # member_of that leaves the pool's aggregate out.
        assert all(n["c2-h0"] not in c and n["c2-h1"] not in c for c in combos(body))
        # Which classes the pools here have is kept until the store changes
        # (then asked again, off the event loop).
        local = tree.apps["global"].state.tree.local
        assert local.pooled_classes_nowait(["VCPU", "DISK_GB"]) == {"DISK_GB"}
        await tree.client("global").put("/resource_classes/CUSTOM_GPU", headers=V)
        await provider(tree.client("global"), "gpu-pool", {"CUSTOM_GPU": {"total": 4}},
                       traits=["MISC_SHARES_VIA_AGGREGATE"], aggs=[AGG])
        assert local.pooled_classes_nowait(["DISK_GB"]) is None
        assert local.pooled_classes(["DISK_GB", "CUSTOM_GPU", "VCPU"]) == {"DISK_GB",
                                                                          "CUSTOM_GPU"}
    run(tmp_path, scenario)


def test_a_required_trait_of_the_pool_is_met_by_the_pool(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        root = tree.client("global")
        gen = (await root.get(f"/resource_providers/{pool}", headers=V)).json()["generation"]
        r = await root.put(f"/resource_providers/{pool}/traits", headers=V, json={
            "resource_provider_generation": gen,
            "traits": ["MISC_SHARES_VIA_AGGREGATE", "STORAGE_DISK_SSD"]})
        assert r.status_code == 200, r.text
        for t in ("CUSTOM_NONE", "CUSTOM_OTHER"):  # traits no provider has
            assert (await root.put(f"/traits/{t}", headers=V)).status_code == 201
        n = await names(tree)
        both = {frozenset({n["c1-h0"], pool}), frozenset({n["c1-h1"], pool})}
        for q in ("required=STORAGE_DISK_SSD", "required=in:STORAGE_DISK_SSD,CUSTOM_NONE",
                  "required=STORAGE_DISK_SSD,!CUSTOM_NONE", ""):
            body = await candidates(tree, f"resources=VCPU:1,DISK_GB:10&{q}")
            assert combos(body) == both, q
        # A trait neither the pool nor a compute has; the pool's trait forbidden.
        for q in ("required=STORAGE_DISK_SSD,CUSTOM_NONE", "required=!STORAGE_DISK_SSD",
                  "required=in:CUSTOM_NONE,CUSTOM_OTHER"):
            body = await candidates(tree, f"resources=VCPU:1,DISK_GB:10&{q}")
            assert combos(body) == set(), q
    run(tmp_path, scenario)


def test_the_first_limit_counts_as_at_the_route(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, pool: str) -> None:
        # Four hosts below (two a cell): Placement takes the first limit.
        body = await candidates(tree, "resources=VCPU:1&limit=3&limit=1")
        assert len(body["allocation_requests"]) == 3
        body = await candidates(tree, "resources=VCPU:1&limit=1&limit=3")
        assert len(body["allocation_requests"]) == 1
    run(tmp_path, scenario)


def test_nova_s_boot_query_gets_the_pool_with_the_cells_computes(tmp_path: Path) -> None:
    """Nova sends `root_required=!COMPUTE_STATUS_DISABLED` with every boot (its
    mandatory compute_status_filter), and `group_policy` when a flavor sets
    one: the pool is still combined with the computes in its aggregates (it
    offered no candidate at all, so every Nova boot taking disk from a pool
    at the root found no host). root_required is about the compute's tree:
    a disabled compute is left out, the pool's traits do not count."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        n = await names(tree)
        both = {frozenset({n["c1-h0"], pool}), frozenset({n["c1-h1"], pool})}
        nova = "limit=1000&resources=DISK_GB:10,VCPU:1&root_required=!COMPUTE_STATUS_DISABLED"
        assert combos(await candidates(tree, nova)) == both
        assert combos(await candidates(tree, nova + "&group_policy=none")) == both
        c1 = tree.client("c1")
        h0 = n["c1-h0"]
        gen = (await c1.get(f"/resource_providers/{h0}", headers=V)).json()["generation"]
        r = await c1.put(f"/resource_providers/{h0}/traits", headers=V, json={
            "resource_provider_generation": gen, "traits": ["COMPUTE_STATUS_DISABLED"]})
        assert r.status_code == 200, r.text
        assert combos(await candidates(tree, nova)) == {frozenset({n["c1-h1"], pool})}
        body = await candidates(tree, "resources=DISK_GB:10,VCPU:1"
                                "&root_required=COMPUTE_STATUS_DISABLED")
        assert combos(body) == {frozenset({h0, pool})}
        # The pool's own trait is not a root's: MISC_SHARES_VIA_AGGREGATE
        # required at the root finds no compute.
        body = await candidates(tree, "resources=DISK_GB:10,VCPU:1"
                                "&root_required=MISC_SHARES_VIA_AGGREGATE")
        assert combos(body) == set()
    run(tmp_path, scenario)


def test_a_pool_is_combined_with_a_compute_for_nova_s_request_with_a_port_group(
        tmp_path: Path) -> None:
    """Nova's request for an instance with a QoS port: disk, VCPU in the
    unnamed group, the port's bandwidth in a suffixed group with its physnet
    trait. The unnamed group's disk comes from the pool at the root, the
    rest from a cell's compute and its NIC, as Placement combines them (no
    candidate was offered: every suffixed group left the pool out); the
    mappings say which provider meets which group, and the candidate can be
    claimed at the root as Nova claims it."""
    async def scenario(tree: InProcessTree, pool: str) -> None:
        c1 = tree.client("c1")
        r = await tree.client("global").put("/traits/CUSTOM_PHYSNET0", headers=V)
        assert r.status_code == 201, r.text  # made in every cell too
        n = await names(tree)
        r = await c1.post("/resource_providers", headers=V, json={
            "name": "c1-h0-nic", "parent_provider_uuid": n["c1-h0"]})
        nic = r.json()["uuid"]
        r = await c1.put(f"/resource_providers/{nic}/inventories", headers=V, json={
            "resource_provider_generation": 0,
            "inventories": {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": 10000}}})
        assert r.status_code == 200, r.text
        r = await c1.put(f"/resource_providers/{nic}/traits", headers=V, json={
            "resource_provider_generation": 1, "traits": ["CUSTOM_PHYSNET0"]})
        assert r.status_code == 200, r.text
        await tree.apps["global"].state.tree.refresh(fresh=True)
        port = ("resources_P=NET_BW_EGR_KILOBIT_PER_SEC:1000&required_P=CUSTOM_PHYSNET0")
        nova = ("group_policy=none&limit=1000&resources=DISK_GB:10,VCPU:1&"
                f"{port}&root_required=!COMPUTE_STATUS_DISABLED")
        body = await candidates(tree, nova)
        assert combos(body) == {frozenset({n["c1-h0"], nic, pool})}
        areq = body["allocation_requests"][0]
        assert areq["mappings"] == {"": sorted([n["c1-h0"], pool]), "_P": [nic]}
        assert areq["allocations"][pool]["resources"] == {"DISK_GB": 10}
        assert {pool, nic, n["c1-h0"]} <= set(body["provider_summaries"])
        # Two port groups kept apart: one NIC cannot take both.
        body = await candidates(tree, nova.replace("group_policy=none", "group_policy=isolate")
                                + "&resources_Q=NET_BW_EGR_KILOBIT_PER_SEC:1000")
        assert combos(body) == set()
        body = await candidates(tree, nova + "&resources_Q=NET_BW_EGR_KILOBIT_PER_SEC:1000")
        assert combos(body) == {frozenset({n["c1-h0"], nic, pool})}
        # Claimed at the root as Nova claims it (1.36: the mappings too).
        r = await tree.client("global").put(
            "/allocations/9b0c2b5e-3f0e-4a57-9d71-0c6a8c1f2d11",
            headers={"openstack-api-version": "placement 1.36"},
            json={**areq, "project_id": "p", "user_id": "u", "consumer_generation": None})
        assert r.status_code == 204, r.text
        r = await tree.client("global").get(f"/resource_providers/{pool}/usages", headers=V)
        assert r.json()["usages"]["DISK_GB"] == 10
    run(tmp_path, scenario)
