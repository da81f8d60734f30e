"""Requests in doubt at a child: recorded once per child and part id."""

from __future__ import annotations

from strato.store import in_doubt
from strato.store.db import Database


def test_a_part_is_recorded_in_doubt_once(database: Database) -> None:
    with database.write() as conn:
        assert in_doubt.add(conn, "cell", "r1@mid#00000000", ["c1"], "timed out")
        # A parent's cancel re-sent while the child is still down: no second
        # row (and the zone logs it once).
        assert not in_doubt.add(conn, "cell", "r1@mid#00000000", ["c1"], "timed out again")
        assert in_doubt.add(conn, "other", "r1@mid#00000000", ["c1"], "timed out")
    with database.read() as conn:
        rows = in_doubt.pending(conn)
    assert [(r.child, r.reason) for r in rows] == [("cell", "timed out"),
                                                   ("other", "timed out")]


def test_the_earlier_tries_of_a_request_are_found_by_id_and_by_consumer(
        database: Database) -> None:
    """What a retry of a request must cancel first: parts in doubt recorded
    under its id here, and parts holding its consumers under another id (a
    parent's retry comes with a new part id)."""
    from strato.store import ledger
    consumers = [f"c{i}" for i in range(40)]
    with database.write() as conn:
        ledger.reserve(conn, "r1")
        ledger.add_part(conn, "r1", "cell", "r1@mid#00000001", ["a"], None)
        in_doubt.add(conn, "cell", "r1@mid#00000001", ["a"], "lost")
        in_doubt.add(conn, "cell", "p0@root#00000002", ["b", "c"], "lost")
        in_doubt.add(conn, "other", "p1@root#00000003", consumers[:2], "lost")
        in_doubt.add(conn, "cell", "p2@root#00000004", ["cX1"], "lost")
    with database.read() as conn:
        def ids(**kw: object) -> list[str]:
            return [r.request_id for r in in_doubt.earlier_tries(conn, **kw)]  # type: ignore[arg-type]
        assert ids(request_id="r1") == ["r1@mid#00000001"]
        assert ids(request_id="r9", consumers=["c", "x"]) == ["p0@root#00000002"]
        assert ids(request_id="r1", consumers=["c", "c0"]) == [
            "r1@mid#00000001", "p0@root#00000002", "p1@root#00000003"]
        assert ids(request_id="r1", consumers=["c", "c0"], children=["other"]) == [
            "p1@root#00000003"]
        assert ids(request_id="r9", consumers=["c11"]) == []
        # More consumers than one LIKE each: matched in Python.
        assert ids(request_id="r9", consumers=consumers) == ["p1@root#00000003"]
        assert ids(request_id="r9", consumers=["c_1"]) == []  # no LIKE wildcard
        assert ids(request_id="r9", consumers=["cX1"]) == ["p2@root#00000004"]


def test_a_part_in_doubt_written_with_its_answer_is_an_earlier_try(database: Database) -> None:
    """The parts a routing zone wrote with its answer (ledger.reserve(parts=))
    are found by the request's id as recorded ones are."""
    from strato.store import ledger
    with database.write() as conn:
        ledger.reserve(conn, "r2", 10.0, "A", answer=(409, {"detail": "no"}), parts=[
            ledger.Part("cell", "r2@mid#00000005", ("d",), "A"),
            ledger.Part("other", "r2@mid#00000006", ("d",), "A")])
        in_doubt.add(conn, "cell", "r2@mid#00000005", ["d"], "lost")
        # The same part id at another child is another part.
        in_doubt.add(conn, "third", "r2@mid#00000005", ["d"], "lost")
    with database.read() as conn:
        assert [(r.child, r.request_id) for r in in_doubt.earlier_tries(conn, "r2")] == [
            ("cell", "r2@mid#00000005")]
        assert in_doubt.earlier_tries(conn, "r2", children=["other"]) == []
