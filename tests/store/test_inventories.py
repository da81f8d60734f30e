"""store.inventories and store.aggregates on both backends, including racing writers."""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from strato.model import errors
from strato.model.inventory import Inventory
from strato.store import aggregates, changes, inventories, providers, schema
from strato.store.db import Database
from strato.store.resource_classes import ids_by_name

VCPU = Inventory("VCPU", total=8, allocation_ratio=4.0)
DISK = Inventory("DISK_GB", total=100, reserved=10)


def _provider(db: Database, name: str = "cn1") -> providers.Provider:
    with db.write() as conn:
        return providers.create_provider(conn, name=name)


def _fresh(db: Database, p: providers.Provider) -> providers.Provider:
    with db.read() as conn:
        return providers.get_provider(conn, p.uuid)


def _invs(db: Database, p: providers.Provider) -> dict[str, Inventory]:
    with db.read() as conn:
        return inventories.get_inventories(conn, p)


def _allocate(db: Database, p: providers.Provider, rc: str, used: int) -> None:
    with db.write() as conn:
        conn.execute(sa.insert(schema.allocations).values(
            resource_provider_id=p.id, consumer_id=str(uuid.uuid4()),
            resource_class_id=ids_by_name(conn, [rc])[rc], used=used))


def test_replace_round_trip_and_generation(database: Database) -> None:
    p = _provider(database)
    with database.read() as conn:
        seq = changes.current_seq(conn)
    with database.write() as conn:
        assert inventories.replace_inventories(conn, p, {"VCPU": VCPU, "DISK_GB": DISK}, 0) == 1
    assert _invs(database, p) == {"VCPU": VCPU, "DISK_GB": DISK}
    assert _fresh(database, p).generation == 1
    with database.read() as conn:
        assert changes.since(conn, seq) == [(seq + 1, p.uuid, "inventory")]
    # Update one, drop one, add one.
    new_vcpu = Inventory("VCPU", total=16)
    mem = Inventory("MEMORY_MB", total=1024, step_size=256)
    with database.write() as conn:
        gen = inventories.replace_inventories(conn, p, {"VCPU": new_vcpu, "MEMORY_MB": mem}, 1)
    assert gen == 2
    assert _invs(database, p) == {"VCPU": new_vcpu, "MEMORY_MB": mem}


def test_replace_refusals_change_nothing(database: Database) -> None:
    p = _provider(database)
    with database.write() as conn:
        inventories.replace_inventories(conn, p, {"VCPU": VCPU, "DISK_GB": DISK}, 0)
    _allocate(database, p, "DISK_GB", 50)
    cases: list[tuple[dict[str, Inventory], int, type[errors.StratoError], str]] = [
        ({"VCPU": VCPU}, 0, errors.ConcurrentUpdate, errors.CONCURRENT_UPDATE),
        ({"VCPU": VCPU}, 1, errors.Conflict, errors.INVENTORY_INUSE),
        ({"VCPU": VCPU, "DISK_GB": DISK, "CUSTOM_NOPE": VCPU}, 1, errors.BadRequest,
         errors.DEFAULT),
        ({"VCPU": Inventory("VCPU", total=4, reserved=5)}, 1, errors.BadRequest,
         errors.DEFAULT),
    ]
    for invs, gen, exc, code in cases:
        with pytest.raises(exc) as info, database.write() as conn:
            inventories.replace_inventories(conn, p, invs, gen)
        assert info.value.code == code
    assert _invs(database, p) == {"VCPU": VCPU, "DISK_GB": DISK}
    assert _fresh(database, p).generation == 1
    # Shrinking an in-use class below its usage is allowed.
    with database.write() as conn:
        inventories.replace_inventories(
            conn, p, {"VCPU": VCPU, "DISK_GB": Inventory("DISK_GB", total=20)}, 1)
    assert _invs(database, p)["DISK_GB"].total == 20


def test_store_allows_reserved_equal_total(database: Database) -> None:
    # The microversion rule (< 1.26 refuses it) lives in the API; the reshaper is 1.30+.
    p = _provider(database)
    full = Inventory("VCPU", total=4, reserved=4)
    with database.write() as conn:
        inventories.replace_inventories(conn, p, {"VCPU": full}, 0)
    assert _invs(database, p) == {"VCPU": full}


def test_one_class_operations(database: Database) -> None:
    p = _provider(database)
    with database.write() as conn:
        assert inventories.add_inventory(conn, p, VCPU) == 1
    with pytest.raises(errors.ConcurrentUpdate), database.write() as conn:
        inventories.add_inventory(conn, p, VCPU)
    with pytest.raises(errors.BadRequest), database.write() as conn:
        inventories.update_inventory(conn, p, DISK, 1)
    with pytest.raises(errors.NotFound), database.write() as conn:
        inventories.update_inventory(conn, p, Inventory("CUSTOM_NOPE", total=1), 1)
    with database.write() as conn:
        assert inventories.update_inventory(conn, p, Inventory("VCPU", total=2), 1) == 2
    _allocate(database, p, "VCPU", 1)
    with pytest.raises(errors.Conflict) as info, database.write() as conn:
        inventories.delete_inventory(conn, p, "VCPU")
    assert info.value.code == errors.INVENTORY_INUSE
    with pytest.raises(errors.NotFound), database.write() as conn:
        inventories.delete_inventory(conn, p, "DISK_GB")
    with database.read() as conn:
        inv, stamp = inventories.get_inventory(conn, p, "VCPU")
    assert inv == Inventory("VCPU", total=2) and stamp is not None
    assert _fresh(database, p).generation == 2


def test_racing_replacements_exactly_one_wins(database: Database) -> None:
    """Writers that read the same generation: one commits, the others get a 409."""
    p = _provider(database)
    n = 4
    start = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()

    def write(total: int) -> None:
        start.wait()
        try:
            with database.write() as conn:
                inventories.replace_inventories(
                    conn, p, {"VCPU": Inventory("VCPU", total=total)}, 0)
            result = "ok"
        except errors.ConcurrentUpdate:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=write, args=(i + 1,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["conflict"] * (n - 1) + ["ok"]
    assert _fresh(database, p).generation == 1
    assert len(_invs(database, p)) == 1


def test_aggregates_store(database: Database) -> None:
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    p1, p2 = _provider(database, "a"), _provider(database, "b")
    with database.write() as conn:
        assert aggregates.set_aggregates(conn, p1, [a, b], generation=0) == 1
        assert aggregates.set_aggregates(conn, p2, [b], generation=None) == 0
    with database.read() as conn:
        assert sorted(aggregates.get_aggregates(conn, p1)) == sorted([a, b])
        assert aggregates.get_aggregates(conn, p2) == [b]
        count = conn.execute(sa.select(sa.func.count()).select_from(
            schema.placement_aggregates)).scalar_one()
    assert count == 2
    with pytest.raises(errors.ConcurrentUpdate), database.write() as conn:
        aggregates.set_aggregates(conn, p1, [], generation=0)
    with database.write() as conn:
        aggregates.set_aggregates(conn, p1, [a], generation=1)
    with database.read() as conn:
        assert aggregates.get_aggregates(conn, p1) == [a]
    assert _fresh(database, p1).generation == 2
    assert _fresh(database, p2).generation == 0
