"""Store: resource class and trait names, custom ids, provider traits, under concurrency."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from strato.model import errors
from strato.model.names import STANDARD_RESOURCE_CLASSES, STANDARD_TRAITS
from strato.store import providers, traits
from strato.store import resource_classes as rcs
from strato.store.db import Database
from strato.store.schema import CUSTOM_RC_MIN_ID


def test_standard_classes_keep_their_os_resource_classes_index(database: Database) -> None:
    with database.read() as conn:
        by_id = rcs.names_by_id(conn)
        assert by_id == dict(enumerate(STANDARD_RESOURCE_CLASSES))
        assert rcs.ids_by_name(conn, ["VCPU", "DISK_GB"]) == {
            "VCPU": STANDARD_RESOURCE_CLASSES.index("VCPU"),
            "DISK_GB": STANDARD_RESOURCE_CLASSES.index("DISK_GB")}
        assert rcs.ids_by_name(conn, []) == {}
        with pytest.raises(errors.BadRequest, match="CUSTOM_A, CUSTOM_B"):
            rcs.ids_by_name(conn, ["VCPU", "CUSTOM_B", "CUSTOM_A"])
        assert rcs.ids_by_name(conn, ["VCPU"], share_lock=True) == {"VCPU": 0}


def test_trait_ids_by_name(database: Database) -> None:
    with database.read() as conn:
        found = traits.ids_by_name(conn, ["HW_CPU_X86_SSE"])
        assert set(found) == {"HW_CPU_X86_SSE"}
        with pytest.raises(errors.BadRequest, match="No such trait"):
            traits.ids_by_name(conn, ["HW_CPU_X86_SSE", "CUSTOM_NOPE"])
        assert [t.name for t in traits.list_traits(conn)] == sorted(STANDARD_TRAITS)


def test_custom_class_ids_count_up_from_the_minimum(database: Database) -> None:
    with database.write() as conn:
        a = rcs.create_class(conn, "CUSTOM_A")
        b, created = rcs.ensure_class(conn, "CUSTOM_B")
        again, created_again = rcs.ensure_class(conn, "CUSTOM_A")
    assert (a.id, b.id, created) == (CUSTOM_RC_MIN_ID, CUSTOM_RC_MIN_ID + 1, True)
    assert (again.id, created_again) == (a.id, False)
    with database.write() as conn:
        rcs.delete_class(conn, "CUSTOM_A")
        c = rcs.create_class(conn, "CUSTOM_C")
    assert c.id == CUSTOM_RC_MIN_ID + 2
    with database.read() as conn:
        assert [rc.name for rc in rcs.list_classes(conn)][-2:] == ["CUSTOM_B", "CUSTOM_C"]


def test_store_refuses_bad_names(database: Database) -> None:
    with database.write() as conn:
        for bad in ["VCPU", "custom_a", "CUSTOM_", "CUSTOM_" + "X" * 249]:
            with pytest.raises(errors.BadRequest):
                rcs.ensure_class(conn, bad)
            with pytest.raises(errors.BadRequest):
                traits.ensure_trait(conn, bad)
        with pytest.raises(errors.BadRequest, match="standard"):
            rcs.delete_class(conn, "VCPU")
        with pytest.raises(errors.BadRequest, match="standard"):
            rcs.rename_class(conn, "VCPU", "CUSTOM_X")
        with pytest.raises(errors.BadRequest, match="standard"):
            traits.delete_trait(conn, "HW_CPU_X86_SSE")
        with pytest.raises(errors.NotFound):
            rcs.delete_class(conn, "CUSTOM_NOPE")
        with pytest.raises(errors.NotFound):
            traits.delete_trait(conn, "CUSTOM_NOPE")


def test_concurrent_custom_classes_get_distinct_ids(database: Database) -> None:
    """Parallel creators (and duplicates) never collide on an id nor fail with a 500."""
    names = [f"CUSTOM_C{i % 12}" for i in range(24)]

    def create(name: str) -> tuple[int, bool]:
        with database.write() as conn:
            rc, created = rcs.ensure_class(conn, name)
        return rc.id, created

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(create, names))
    assert sum(created for _, created in results) == 12
    by_name: dict[str, set[int]] = {}
    for name, (rc_id, _) in zip(names, results, strict=True):
        by_name.setdefault(name, set()).add(rc_id)
    assert all(len(ids) == 1 for ids in by_name.values())
    assert sorted(i for ids in by_name.values() for i in ids) == list(
        range(CUSTOM_RC_MIN_ID, CUSTOM_RC_MIN_ID + 12))


def test_concurrent_trait_creation_creates_once(database: Database) -> None:
    def create(_: int) -> bool:
        with database.write() as conn:
            return traits.ensure_trait(conn, "CUSTOM_RACE")[1]

    with ThreadPoolExecutor(max_workers=6) as pool:
        created = list(pool.map(create, range(12)))
    assert created.count(True) == 1


def test_concurrent_provider_trait_writes_serialise_on_generation(database: Database) -> None:
    """Writers naming the same generation: exactly one wins, the rest get 409."""
    with database.write() as conn:
        p = providers.create_provider(conn, name="cn1")

    def write(i: int) -> str:
        try:
            with database.write() as conn:
                traits.set_provider_traits(conn, p.uuid, [STANDARD_TRAITS[i]], 0)
        except errors.ConcurrentUpdate:
            return "conflict"
        return "ok"

    with ThreadPoolExecutor(max_workers=6) as pool:
        outcomes = list(pool.map(write, range(6)))
    assert outcomes.count("ok") == 1 and outcomes.count("conflict") == 5
    with database.read() as conn:
        pt = traits.provider_traits(conn, p.uuid)
    assert pt.generation == 1 and len(pt.traits) == 1


def test_delete_provider_traits_never_conflicts(database: Database) -> None:
    """Writes without a generation (DELETE's) never conflict: six at once, each
    a different set, make six generations. A write of the set the provider
    already has changes nothing, as in Placement."""
    with database.write() as conn:
        p = providers.create_provider(conn, name="cn1")

    def assign(i: int) -> int:
        with database.write() as conn:
            return traits.set_provider_traits(conn, p.uuid, [STANDARD_TRAITS[i]],
                                              None).generation

    with ThreadPoolExecutor(max_workers=6) as pool:
        gens = sorted(pool.map(assign, range(6)))
    assert gens == [1, 2, 3, 4, 5, 6]
    with database.write() as conn:
        assert traits.set_provider_traits(conn, p.uuid, [], None).generation == 7
        assert traits.set_provider_traits(conn, p.uuid, [], None).generation == 7


def test_trait_delete_racing_an_assignment_never_orphans(database: Database) -> None:
    """Deleting a trait while providers take it: each side either wins cleanly or is refused."""
    with database.write() as conn:
        traits.ensure_trait(conn, "CUSTOM_RACY")
        uuids = [providers.create_provider(conn, name=f"cn{i}").uuid for i in range(4)]

    def assign(uuid: str) -> str:
        try:
            with database.write() as conn:
                traits.set_provider_traits(conn, uuid, ["CUSTOM_RACY"], 0)
        except errors.BadRequest:
            return "gone"
        return "ok"

    def delete() -> str:
        try:
            with database.write() as conn:
                traits.delete_trait(conn, "CUSTOM_RACY")
        except errors.Conflict:
            return "in use"
        return "deleted"

    with ThreadPoolExecutor(max_workers=5) as pool:
        futures = [pool.submit(assign, u) for u in uuids[:2]]
        futures.append(pool.submit(delete))
        futures += [pool.submit(assign, u) for u in uuids[2:]]
        outcomes = [f.result() for f in futures]
    with database.read() as conn:
        exists = traits.get_trait_or_none(conn, "CUSTOM_RACY") is not None
        holders = [u for u in uuids if traits.provider_traits(conn, u).traits]
    if outcomes[2] == "deleted":
        assert not exists and not holders
    else:
        assert exists and holders
    assert len(holders) == outcomes.count("ok")
