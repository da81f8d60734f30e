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
