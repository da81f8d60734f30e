"""store.allocations.claim: the one write path for allocations, on both backends."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from strato.model import errors
from strato.model.inventory import Inventory
from strato.store import allocations, changes, inventories, providers
from strato.store.allocations import ANY_GENERATION, ConsumerClaim, claim
from strato.store.db import Database


def make_provider(db: Database, name: str, **totals: int) -> str:
    with db.write() as conn:
        p = providers.create_provider(conn, name=name)
        inventories.replace_inventories(
            conn, p, {rc: Inventory(resource_class=rc, total=t) for rc, t in totals.items()},
            p.generation)
        return p.uuid


def generation(db: Database, rp: str) -> int:
    with db.read() as conn:
        return providers.get_provider(conn, rp).generation


def held(db: Database, consumer: str) -> dict[str, dict[str, int]]:
    with db.read() as conn:
        found = allocations.get_consumer_allocations(conn, consumer)
    return {rp: share.resources for rp, share in found.allocations.items()}


def new_claim(allocs: dict[str, dict[str, int]], gen: Any = None, **kw: Any) -> ConsumerClaim:
    return ConsumerClaim(consumer_uuid=str(uuid.uuid4()), allocations=allocs,
                         project_id="p", user_id="u", generation=gen, **kw)


def test_claim_writes_bumps_and_records(database: Database) -> None:
    a = make_provider(database, "a", VCPU=4)
    b = make_provider(database, "b", VCPU=4, MEMORY_MB=1024)
    gen_a, gen_b = generation(database, a), generation(database, b)
    c = new_claim({a: {"VCPU": 1}, b: {"VCPU": 2, "MEMORY_MB": 256}})
    with database.write() as conn:
        seq_before = changes.current_seq(conn)
        result = claim(conn, [c])
    assert result.generations == {c.consumer_uuid: 1}
    assert set(result.touched_providers) == {a, b}
    assert result.change_seq == seq_before + 1
    assert (generation(database, a), generation(database, b)) == (gen_a + 1, gen_b + 1)
    assert held(database, c.consumer_uuid) == {a: {"VCPU": 1}, b: {"VCPU": 2, "MEMORY_MB": 256}}
    with database.read() as conn:
        logged = {rp for seq, rp, kind in changes.since(conn, seq_before)
                  if kind == "allocation"}
    assert logged == {a, b}

    # Moving everything to b touches a too (its usage changed, the index must
    # hear of it), but as in Placement only b's generation moves.
    moved = ConsumerClaim(consumer_uuid=c.consumer_uuid, allocations={b: {"VCPU": 4}},
                          generation=1)
    with database.write() as conn:
        result = claim(conn, [moved])
    assert set(result.touched_providers) == {a, b}
    assert (generation(database, a), generation(database, b)) == (gen_a + 1, gen_b + 2)
    # Emptied through POST /allocations, the providers left behind move (Placement);
    # a delete moves none.
    emptied = ConsumerClaim(consumer_uuid=c.consumer_uuid, generation=2, bump_emptied=True)
    with database.write() as conn:
        claim(conn, [emptied])
    assert (generation(database, a), generation(database, b)) == (gen_a + 1, gen_b + 3)


def test_all_or_nothing(database: Database) -> None:
    rp = make_provider(database, "cn", VCPU=4)
    first = new_claim({rp: {"VCPU": 3}})
    too_much = new_claim({rp: {"VCPU": 2}})
    gen = generation(database, rp)
    with pytest.raises(errors.Conflict), database.write() as conn:
        claim(conn, [first, too_much])
    assert held(database, first.consumer_uuid) == {}
    assert generation(database, rp) == gen
    with database.read() as conn:
        p = providers.get_provider(conn, rp)
        assert allocations.get_provider_allocations(conn, p.id).allocations == {}


def test_errors(database: Database) -> None:
    rp = make_provider(database, "cn", VCPU=4)
    cases: list[tuple[ConsumerClaim, type[errors.StratoError], str | None]] = [
        (new_claim({str(uuid.uuid4()): {"VCPU": 1}}), errors.BadRequest, None),
        (new_claim({rp: {"CUSTOM_NOPE": 1}}), errors.BadRequest, None),
        (new_claim({rp: {"DISK_GB": 1}}), errors.Conflict, None),
        (new_claim({rp: {"VCPU": 5}}), errors.Conflict, None),
        (new_claim({rp: {"VCPU": 0}}), errors.BadRequest, None),
        (new_claim({rp: {"VCPU": 1}}, gen=3), errors.ConcurrentUpdate,
         "placement.concurrent_update"),
    ]
    for c, exc, code in cases:
        with pytest.raises(exc) as info, database.write() as conn:
            claim(conn, [c])
        if code:
            assert info.value.code == code
    c = new_claim({rp: {"VCPU": 1}})
    with pytest.raises(errors.BadRequest), database.write() as conn:
        claim(conn, [c, c])
    assert generation(database, rp) == 1


def test_constraint_violation_is_conflict(database: Database) -> None:
    with database.write() as conn:
        p = providers.create_provider(conn, name="cn")
        inventories.replace_inventories(conn, p, {"DISK_GB": Inventory(
            resource_class="DISK_GB", total=100, min_unit=10, max_unit=50, step_size=10)}, 0)
    for amount in (5, 60, 15):
        with pytest.raises(errors.Conflict) as info, database.write() as conn:
            claim(conn, [new_claim({p.uuid: {"DISK_GB": amount}})])
        assert "step_size" in info.value.detail


def test_consumer_generations(database: Database) -> None:
    rp = make_provider(database, "cn", VCPU=4)
    c = new_claim({rp: {"VCPU": 1}})
    with database.write() as conn:
        claim(conn, [c])
    again = ConsumerClaim(consumer_uuid=c.consumer_uuid, allocations={rp: {"VCPU": 2}},
                          generation=None)
    with pytest.raises(errors.ConcurrentUpdate), database.write() as conn:
        claim(conn, [again])
    unchecked = ConsumerClaim(consumer_uuid=c.consumer_uuid, allocations={rp: {"VCPU": 2}},
                              generation=ANY_GENERATION)
    with database.write() as conn:
        assert claim(conn, [unchecked]).generations == {c.consumer_uuid: 2}
    # Removing everything forgets the consumer: it may then start over from null.
    with database.write() as conn:
        gone = ConsumerClaim(consumer_uuid=c.consumer_uuid, generation=2)
        assert claim(conn, [gone]).generations == {c.consumer_uuid: None}
    with database.write() as conn:
        assert claim(conn, [c]).generations == {c.consumer_uuid: 1}


def test_concurrent_claims_never_overcommit(database: Database) -> None:
    rp = make_provider(database, "cn", VCPU=5)
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    def worker() -> None:
        start.wait()
        try:
            with database.write() as conn:
                claim(conn, [new_claim({rp: {"VCPU": 1}})])
            outcome = "ok"
        except errors.Conflict:
            outcome = "full"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == ["full"] * 7 + ["ok"] * 5
    with database.read() as conn:
        p = providers.get_provider(conn, rp)
        used = allocations.get_provider_allocations(conn, p.id).allocations
    assert sum(s.resources["VCPU"] for s in used.values()) == 5


# --- Cost: indexed lookups only --------------------------------------------

_BIG_TABLES = ("resource_providers", "inventories", "allocations", "consumers", "projects",
               "users", "consumer_types")
_SCAN = re.compile(r"\bSCAN (?:TABLE )?(\w+)")


@pytest.fixture
def statements(sqlite_database: Database) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cur: Any, stmt: str, params: Any, _ctx: Any, many: bool) -> None:
        if not many:
            seen.append((stmt, params))

    sa.event.listen(sqlite_database.engine, "before_cursor_execute", capture)
    yield seen
    sa.event.remove(sqlite_database.engine, "before_cursor_execute", capture)


def test_claim_scans_no_table(sqlite_database: Database,
                              statements: list[tuple[str, Any]]) -> None:
    """Every statement of a claim is an index search: its cost does not grow with the zone."""
    db = sqlite_database
    rps = [make_provider(db, f"cn{i}", VCPU=8, MEMORY_MB=4096) for i in range(30)]
    with db.write() as conn:
        claim(conn, [new_claim({rp: {"VCPU": 1}}) for rp in rps[:10]])
    first = new_claim({rps[10]: {"VCPU": 1}, rps[11]: {"MEMORY_MB": 64}}, consumer_type="VM")
    with db.write() as conn:
        claim(conn, [first])
    statements.clear()
    moved = ConsumerClaim(consumer_uuid=first.consumer_uuid, generation=1,
                          allocations={rps[12]: {"VCPU": 2}}, project_id="p", user_id="u")
    with db.write() as conn:
        claim(conn, [moved])
    assert statements
    scans: list[tuple[str, str]] = []
    with db.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        for stmt, params in statements:
            if not stmt.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
                continue
            for row in raw.execute("EXPLAIN QUERY PLAN " + stmt, params or ()).fetchall():
                m = _SCAN.search(str(row[-1]))
                if m and m.group(1) in _BIG_TABLES:
                    scans.append((m.group(1), stmt))
    assert scans == []
