"""Answers kept by request id: reserve once, cancel (undo or tombstone), purge."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from strato.store import ledger as store
from strato.store.db import Database
from strato.store.schema import schedule_requests
from strato.store.util import utcnow


def test_reserve_once_then_cancel_and_tombstone(database: Database) -> None:
    with database.write() as conn:
        assert store.reserve(conn, "a")
        assert not store.reserve(conn, "a")
        store.finish(conn, "a", 200, {"placements": [{"consumer_uuid": "c"}]})
    with database.write() as conn:
        assert store.cancel(conn, "a") == {"placements": [{"consumer_uuid": "c"}]}
        assert store.cancel(conn, "a") is None  # idempotent
        assert store.cancel(conn, "never-came") is None
    with database.read() as conn:
        assert store.get_answer(conn, "a")[0] == store.CANCELLED  # type: ignore[index]
        assert store.get_answer(conn, "never-came")[0] == store.CANCELLED  # type: ignore[index]
    with database.write() as conn:
        assert not store.reserve(conn, "never-came")  # refused should it arrive


def test_purge_forgets_old_answers_only(database: Database) -> None:
    with database.write() as conn:
        for rid in ("old1", "old2", "new"):
            assert store.reserve(conn, rid)
            store.finish(conn, rid, 200, {})
        conn.execute(sa.update(schedule_requests)
                     .where(schedule_requests.c.request_id.like("old%"))
                     .values(created_at=utcnow() - timedelta(days=8)))
    with database.write() as conn:
        assert store.purge(conn, utcnow() - timedelta(days=7), limit=1) == 1
        assert store.purge(conn, utcnow() - timedelta(days=7)) == 1
        assert store.purge(conn, utcnow() - timedelta(days=7)) == 0
    with database.read() as conn:
        assert store.get_answer(conn, "new") is not None
        assert store.get_answer(conn, "old1") is None


def test_states_parts_and_take_over(database: Database) -> None:
    with database.write() as conn:
        assert store.reserve(conn, "r", deadline=10.0)
        store.add_part(conn, "r", "dfw", "r@root#1", ["c1"])
        store.add_part(conn, "r", "dfw", "r@root#1", ["c1"])  # recorded once
        store.add_part(conn, "r", "", "r@root#2", ["c1"])
    with database.read() as conn:
        entry = store.lookup(conn, "r")
        assert entry is not None and entry.state == store.State.PLACING
        assert [p.part_id for p in store.parts(conn, "r")] == ["r@root#1", "r@root#2"]
        assert store.overdue(conn, now=11.0) == ["r"]
        assert store.overdue(conn, now=9.0) == []
    with database.write() as conn:
        assert store.abandon(conn, "r")
        assert not store.abandon(conn, "r")  # one taker
        # Its worker can no longer write an answer over it.
        assert not store.finish(conn, "r", 200, {}, only_placing=True)
        store.give_back(conn, "r", None)
        assert store.lookup(conn, "r") is None
        # A final answer is never given back.
        assert store.reserve(conn, "s")
        assert store.finish(conn, "s", 409, {"detail": "no"}, only_placing=True)
        store.give_back(conn, "s", None)
        assert store.get_answer(conn, "s") == (409, {"detail": "no"})
        # An attempt's reservation is its own: another attempt cannot write over
        # it, record parts under it, or give it back.
        assert store.reserve(conn, "t", attempt="A")
        assert store.add_part(conn, "t", "dfw", "t@z#1", ["c"], "A")
        assert not store.add_part(conn, "t", "dfw", "t@z#2", ["c"], "B")
        assert not store.finish(conn, "t", 200, {}, only_placing=True, attempt="B")
        store.give_back(conn, "t", "B")
        assert store.lookup(conn, "t") is not None
        assert [p.part_id for p in store.parts(conn, "t", "A")] == ["t@z#1"]
        assert store.parts(conn, "t", "B") == []
        store.cancel(conn, "t")
        assert not store.add_part(conn, "t", "dfw", "t@z#3", ["c"], "A")


def test_a_cancel_while_placing_wins_over_the_answer(database: Database) -> None:
    with database.write() as conn:
        assert store.reserve(conn, "p")
        assert store.cancel(conn, "p") is None
        assert not store.finish(conn, "p", 200, {"placements": []}, only_placing=True)
    with database.read() as conn:
        assert store.get_answer(conn, "p")[0] == store.State.CANCELLED  # type: ignore[index]


def test_placed_parts_name_the_consumers_of_placed_requests_only(database: Database) -> None:
    with database.write() as conn:
        for rid, state in (("placed", 200), ("refused", 409), ("cancelled", 410)):
            assert store.reserve(conn, rid)
            store.add_part(conn, rid, "dfw", f"{rid}@root#00000001", [f"{rid}-c"])
            store.add_part(conn, rid, "", f"{rid}@root#00000002", [f"{rid}-own"])
            store.finish(conn, rid, state, {})
        # An outage gave its id back: nothing placed.
        assert store.reserve(conn, "given-back")
        store.add_part(conn, "given-back", "ord", "given-back@root#00000003", ["g-c"])
        store.give_back(conn, "given-back", None)
        assert store.reserve(conn, "later")
        store.add_part(conn, "later", "ord", "later@root#00000004", ["l1", "l2"])
        store.finish(conn, "later", 200, {})
    with database.read() as conn:
        assert store.placed_parts(conn, 10, leave_out=("",)) == [
            ("dfw", ("placed-c",)), ("ord", ("l1", "l2"))]
        assert store.placed_parts(conn, 1, leave_out=("",)) == [("ord", ("l1", "l2"))]


def test_parts_written_with_the_answer_are_found_as_recorded_ones(database: Database) -> None:
    """A routing zone holds the parts asked of children in memory and writes
    them with its answer (`reserve(answer=, parts=)`): every reader of parts
    finds them as it finds those recorded one by one."""
    held = [store.Part("dfw", "w@root#00000001", ("w1",), "A"),
            store.Part("ord", "w@root#00000002", ("w1", "w2"), "A")]
    with database.write() as conn:
        assert store.reserve(conn, "w", 10.0, "A", answer=(200, {"placements": []}),
                             parts=held)
        # The id is taken as by any reservation; nothing is written twice.
        assert not store.reserve(conn, "w", 10.0, "B", answer=(200, {}), parts=held)
        assert store.reserve(conn, "refused", 10.0, "A", answer=(409, {"detail": "no"}),
                             parts=[store.Part("dfw", "refused@root#00000003", ("r1",), "A")])
        assert store.reserve(conn, "older")
        store.add_part(conn, "older", "dfw", "older@root#00000004", ["o1"], None)
        store.finish(conn, "older", 200, {})
    with database.read() as conn:
        assert store.get_answer(conn, "w") == (200, {"placements": []})
        assert store.parts(conn, "w") == held
        assert store.parts(conn, "w", "A") == held
        assert store.parts(conn, "w", "B") == []
        # Placed requests' consumers, by child, newest last; a refusal's not.
        assert sorted(store.placed_parts(conn, 10)) == [
            ("dfw", ("o1",)), ("dfw", ("w1",)), ("ord", ("w1", "w2"))]
        assert len(store.placed_parts(conn, 2)) == 2
        since = utcnow() - timedelta(seconds=60)
        assert store.known_parts(conn, "dfw", since) == {
            "w@root#00000001", "refused@root#00000003", "older@root#00000004"}
        assert store.known_parts(conn, "ord", since) == {"w@root#00000002"}
        assert store.known_parts(conn, "ord", utcnow() + timedelta(seconds=60)) == set()
    with database.write() as conn:
        # A cancel finds them, and the purge forgets them with their answer.
        assert store.cancel(conn, "w") == {"placements": []}
        conn.execute(sa.update(schedule_requests).values(
            created_at=utcnow() - timedelta(days=8)))
        assert store.purge(conn, utcnow() - timedelta(days=7)) == 3
    with database.read() as conn:
        assert store.parts(conn, "w") == []
