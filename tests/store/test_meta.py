"""Provider metadata in the store: location inheritance, validation, heartbeats, staleness."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strato.model import errors
from strato.store import changes, providers
from strato.store import meta as store
from strato.store.db import Database


def _tree(db: Database) -> tuple[str, str]:
    with db.write() as conn:
        host = providers.create_provider(conn, name="host").uuid
        numa = providers.create_provider(conn, name="numa0", parent_uuid=host).uuid
    return host, numa


def test_defaults_without_a_row(database: Database) -> None:
    host, _ = _tree(database)
    with database.read() as conn:
        m = store.get_meta(conn, host)
    assert (m.location, m.tags, m.heartbeat, m.last_report_at) == (None, (), False, None)
    assert not m.is_stale(store.now_utc(), 1.0)


def test_location_inherited_from_root_unless_own(database: Database) -> None:
    host, numa = _tree(database)
    with database.write() as conn:
        seq = changes.current_seq(conn)
        store.set_meta(conn, host, location="m1.rack1.room1.dfw", tags=["pci-dss", "hipaa"])
        touched = {u for _, u, k in changes.since(conn, seq) if k == "meta"}
    assert touched == {host, numa}  # the child's effective location changed too
    with database.read() as conn:
        child = store.get_meta(conn, numa)
        assert store.get_meta(conn, host).tags == ("hipaa", "pci-dss")
    assert (child.location, child.own_location) == ("dfw/room1/rack1/m1", None)
    with database.write() as conn:
        store.set_meta(conn, numa, location="dfw/room1/rack2", tags=[])
        assert store.get_meta(conn, numa).location == "dfw/room1/rack2"


def test_bad_input_names_the_field_and_changes_nothing(database: Database) -> None:
    host, _ = _tree(database)
    with database.write() as conn:
        store.set_meta(conn, host, location="dfw", tags=["a"])
    for loc, tags, field in [("dfw/a.b", ["a"], "location"), ("dfw", ["Bad Tag"], "tags")]:
        with pytest.raises(errors.BadRequest, match=f"^{field}: "), database.write() as conn:
            store.set_meta(conn, host, location=loc, tags=tags)
    with database.read() as conn:
        m = store.get_meta(conn, host)
    assert (m.location, m.tags) == ("dfw", ("a",))
    with pytest.raises(errors.NotFound), database.write() as conn:
        store.set_meta(conn, "00000000-0000-0000-0000-000000000000", location=None, tags=[])


def test_heartbeats_make_and_unmake_stale(database: Database) -> None:
    host, numa = _tree(database)
    with database.write() as conn:
        api_only = providers.create_provider(conn, name="api-only").uuid
    t0 = store.now_utc()
    with database.write() as conn:
        r = store.record_report(conn, host, now=t0, window=10)
    assert not r.was_stale
    with database.read() as conn:
        assert store.stale_providers(conn, t0 + timedelta(seconds=5), 10) == {}
        late = store.stale_providers(conn, t0 + timedelta(seconds=15), 10)
        # The agent reports for the host's tree: its NUMA child is stale with it.
        assert set(late) == {host, numa} and late[host] == pytest.approx(15)
        assert store.stale_reason(late[host]) == "stale: no report for 15s"
        assert api_only not in late  # never had an agent: never stale
        stale = store.list_meta(conn, now=t0 + timedelta(seconds=15), window=10, stale=True)
        assert [m.uuid for m in stale] == [host, numa]
        assert stale[1].stale_age(t0 + timedelta(seconds=15), 10) == (True, 15)
    with database.write() as conn:
        seq = changes.current_seq(conn)
        r = store.record_report(conn, host, now=t0 + timedelta(seconds=16), window=10)
        assert r.was_stale
        assert changes.current_seq(conn) == seq + 1  # recovery is a change the engine sees
        store.record_report(conn, host, now=t0 + timedelta(seconds=17), window=10)
        assert changes.current_seq(conn) == seq + 1  # a plain heartbeat is not
    with database.read() as conn:
        assert store.stale_provider_uuids(conn, t0 + timedelta(seconds=20), 10) == frozenset()


def test_configured_heartbeat_without_report_is_stale_and_can_be_turned_off(
        database: Database) -> None:
    host, _ = _tree(database)
    with database.write() as conn:
        store.set_meta(conn, host, location=None, tags=[], heartbeat=True)
    with database.read() as conn:
        assert store.stale_providers(conn, store.now_utc(), 90)[host] is None
    with database.write() as conn:
        store.set_meta(conn, host, location=None, tags=[])  # heartbeat kept
        assert store.get_meta(conn, host).heartbeat
        store.set_meta(conn, host, location=None, tags=[], heartbeat=False)
    with database.read() as conn:
        assert store.stale_provider_uuids(conn, store.now_utc(), 90) == frozenset()


def test_deleting_a_provider_deletes_its_meta(database: Database) -> None:
    with database.write() as conn:
        p = providers.create_provider(conn, name="gone").uuid
        store.set_meta(conn, p, location="dfw", tags=["x"])
        store.record_report(conn, p)
    with database.write() as conn:
        providers.delete_provider(conn, p)
    with database.read() as conn:
        assert store.list_meta(conn, now=store.now_utc(), window=90) == []
