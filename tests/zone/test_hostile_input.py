"""Hostile input at a zone with children is refused as a zone without
children refuses it: 400 naming the field, before anything is asked or kept."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from strato.store import ledger
from strato.zone.inprocess import InProcessTree, ZoneSpec, build

TREE = [ZoneSpec("root"), ZoneSpec("c1", parent="root"), ZoneSpec("c2", parent="root")]


async def host(c: httpx.AsyncClient, name: str) -> str:
    rp = (await c.post("/resource_providers", json={"name": name})).json()
    r = await c.put(f"/resource_providers/{rp['uuid']}/inventories", json={
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
    assert r.status_code == 200, r.text
    return str(rp["uuid"])


def req(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"consumers": [str(uuid.uuid4())], "project_id": "p",
                            "user_id": "u", "groups": [{"resources": {"VCPU": 1}}]}
    body.update(kw)
    return body


def run(tmp_path: Path, scenario: Callable[[InProcessTree, str], Awaitable[None]]) -> None:
    async def main() -> None:
        tree = build(tmp_path, TREE)
        try:
            await tree.link()
            h1 = await host(tree.client("c1"), "h1")
            await host(tree.client("c2"), "h2")
            await scenario(tree, h1)
        finally:
            await tree.aclose()
    asyncio.run(main())


def known(tree: InProcessTree, zone: str, request_id: str) -> bool:
    with tree.dbs[zone].read() as conn:
        return ledger.lookup(conn, request_id=request_id) is not None


def test_claims_take_consumer_type_and_group_as_schedule_does(tmp_path: Path) -> None:
    async def scenario(tree: InProcessTree, h1: str) -> None:
        for zone in ("root", "c1"):  # forwarded to its owner, and at the owner
            for field, value in (("consumer_type", "bad type é"),
                                 ("consumer_type", "X" * 100_000),
                                 ("group", "a b/é")):
                consumer = str(uuid.uuid4())
                rid = f"claim-{uuid.uuid4()}"
                r = await tree.client(zone).post("/strato/v1/claims", json={
                    "project_id": "p", "user_id": "u", field: value, "request_id": rid,
                    "placements": [{"consumer_uuid": consumer,
                                    "allocations": {h1: {"resources": {"VCPU": 1}}}}]})
                assert r.status_code == 400, r.text[:300]
                err = r.json()["errors"][0]
                assert err["detail"].startswith(f"body.{field}:") and len(err["detail"]) < 200
                # ... the same words as a schedule request's refusal.
                s = await tree.client(zone).post("/strato/v1/schedule",
                                                 json=req(**{field: value}))
                assert s.status_code == 400 and s.json()["errors"][0]["detail"] == \
                    err["detail"]
                got = await tree.client("c1").get(f"/allocations/{consumer}")
                assert got.json()["allocations"] == {}
                assert not known(tree, "root", rid) and not known(tree, "c1", rid)
        usages = await tree.client("c1").get("/usages?project_id=p", headers={
            "openstack-api-version": "placement 1.38"})
        assert usages.json()["usages"] == {}  # no bucket of a bad consumer type
    run(tmp_path, scenario)


def test_a_zone_with_children_refuses_unknown_names_before_anything(tmp_path: Path
                                                                    ) -> None:
    async def scenario(tree: InProcessTree, h1: str) -> None:
        root = tree.client("root")
        for groups, words in (([{"resources": {"FOO": 1}}], "unknown resource class(es): FOO"),
                              ([{"resources": {"CUSTOM_NOPE": 1}}], "CUSTOM_NOPE"),
                              ([{"resources": {"VCPU": 1}, "required": ["NOPE"]}],
                               "unknown trait(s): NOPE"),
                              ([{"resources": {"VCPU": 1}, "required": ["in:A_X,NOPE"]}],
                               "unknown trait(s): A_X, NOPE")):
            for path in ("/strato/v1/schedule", "/strato/v1/explain"):
                r = await root.post(path, json=req(groups=groups, request_id="once"))
                assert r.status_code == 400, r.text[:300]
                err = r.json()["errors"][0]
                assert err["detail"].startswith("groups: ") and words in err["detail"]
            assert not known(tree, "root", "once")
            # The words a zone without children answers.
            leaf = await tree.client("c1").post("/strato/v1/schedule",
                                                json=req(groups=groups))
            assert leaf.json()["errors"][0]["detail"] == err["detail"]
        # Nothing was kept under the id: it places now.
        r = await root.post("/strato/v1/schedule", json=req(request_id="once"))
        assert r.status_code == 200, r.text[:300]
        # A class registered at the root is registered below it too: known.
        assert (await root.put("/resource_classes/CUSTOM_GPU")).status_code == 201
        r = await root.post("/strato/v1/schedule",
                            json=req(groups=[{"resources": {"CUSTOM_GPU": 1}}]))
        assert r.status_code == 409, r.text[:300]
        assert r.json()["errors"][0]["code"] == "strato.no_valid_placement"
        # A name made at a child alone (a zone run apart) that its summary
        # shows is known at the root too: placed there.
        c1 = tree.client("c1")
        assert (await c1.put("/resource_classes/CUSTOM_LEAF")).status_code == 201
        gen = (await c1.get(f"/resource_providers/{h1}")).json()["generation"]
        r = await c1.put(f"/resource_providers/{h1}/inventories", json={
            "resource_provider_generation": gen, "inventories": {
                "VCPU": {"total": 8}, "CUSTOM_LEAF": {"total": 2}}})
        assert r.status_code == 200, r.text[:300]
        await tree.zone_tree("root").refresh(fresh=True)
        r = await root.post("/strato/v1/schedule",
                            json=req(groups=[{"resources": {"CUSTOM_LEAF": 1}}]))
        assert r.status_code == 200, r.text[:300]
        # The weigher's class weights too: an unknown class is a 400 naming
        # the field, at the root as at a leaf; one a child's summary shows is known.
        weighed = {"weigher": {"class_weights": {"CUSTOM_NOPE": 2}}}
        for client in (root, c1):
            r = await client.post("/strato/v1/schedule", json=req(**weighed))
            assert r.status_code == 400, r.text[:300]
            assert r.json()["errors"][0]["detail"] == \
                "weigher.class_weights: unknown resource class(es): CUSTOM_NOPE"
        r = await root.post("/strato/v1/schedule", json=req(
            weigher={"class_weights": {"CUSTOM_LEAF": 2, "CUSTOM_GPU": 1}}))
        assert r.status_code == 200, r.text[:300]
    run(tmp_path, scenario)


def test_a_dry_run_past_its_deadline_is_503_at_a_zone_with_children(tmp_path: Path
                                                                    ) -> None:
    async def scenario(tree: InProcessTree, h1: str) -> None:
        for zone in ("root", "c1"):
            for path, extra in (("/strato/v1/schedule", {"dry_run": True}),
                                ("/strato/v1/explain", {}),
                                ("/strato/v1/schedule", {})):
                r = await tree.client(zone).post(path, json=req(deadline=1.0, **extra))
                assert r.status_code == 503, r.text[:300]
                err = r.json()["errors"][0]
                assert err["code"] == "strato.zone_unavailable" and "deadline" in \
                    err["detail"]
    run(tmp_path, scenario)
