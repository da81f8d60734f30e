"""A zone's own facts: `put` is one upsert, safe when two workers start at once."""

from __future__ import annotations

import threading

from strato.store import zone_meta
from strato.store.db import Database


def test_put_sets_replaces_and_removes(database: Database) -> None:
    with database.write() as conn:
        zone_meta.put(conn, "k", "1")
        zone_meta.put(conn, "k", "2")
    with database.read() as conn:
        assert zone_meta.get(conn, "k") == "2"
    with database.write() as conn:
        zone_meta.put(conn, "k", None)
    with database.read() as conn:
        assert zone_meta.get(conn, "k") is None


def test_concurrent_puts_of_one_new_key_both_succeed(database: Database) -> None:
    """Two workers' first heartbeats at once (a delete then an insert let the
    second fail on the key on PostgreSQL, and its start-up aborted)."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def beat(n: int) -> None:
        try:
            barrier.wait(10)
            with database.write() as conn:
                zone_meta.put(conn, "alive_at", str(n))
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=beat, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    with database.read() as conn:
        assert zone_meta.get(conn, "alive_at") in {str(n) for n in range(8)}
