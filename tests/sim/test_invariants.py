"""The invariant checker catches what must never happen, in real stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from strato.sim.cluster import build_hosts
from strato.sim.inprocess import InProcessZone
from strato.sim.invariants import InvariantError, assert_databases, check_databases
from strato.sim.workload import requests
from strato.store.schema import allocations, resource_classes, resource_providers
from tests.sim.worlds import tiny


@pytest.fixture
def zone() -> Iterator[InProcessZone]:
    sc = tiny()
    z = InProcessZone(build_hosts(sc, 1), levels=sc.levels)
    yield z
    z.close()


def _plant(z: InProcessZone, consumer: str, provider: str, rc: str, used: int) -> None:
    """Write an allocation straight into the table, past claim()'s checks."""
    with z.db.write() as conn:
        pid = conn.execute(sa.select(resource_providers.c.id)
                           .where(resource_providers.c.uuid == provider)).scalar_one()
        rcid = conn.execute(sa.select(resource_classes.c.id)
                            .where(resource_classes.c.name == rc)).scalar_one()
        conn.execute(sa.insert(allocations).values(
            resource_provider_id=pid, consumer_id=consumer, resource_class_id=rcid, used=used))


def test_clean_zone_passes(zone: InProcessZone) -> None:
    req = next(requests(tiny().workload, 1))
    assert zone.schedule(req).accepted
    assert_databases([zone.db], live=set(req.consumers))


def test_planted_overcommit_is_caught(zone: InProcessZone) -> None:
    host = zone.snapshot_for_invariants()[0].capacity
    provider = sorted(host)[0]
    _plant(zone, "11111111-1111-4111-8111-111111111111", provider, "VCPU", 9)  # capacity 8
    found = check_databases([zone.db])
    assert [v.kind for v in found] == ["over_capacity"]
    assert provider in found[0].detail and "used 9 > capacity 8" in found[0].detail
    with pytest.raises(InvariantError, match="over_capacity"):
        assert_databases([zone.db])


def test_allocation_without_inventory_is_caught(zone: InProcessZone) -> None:
    provider = sorted(zone.snapshot_for_invariants()[0].capacity)[0]
    _plant(zone, "22222222-2222-4222-8222-222222222222", provider, "SRIOV_NET_VF", 1)
    assert [v.kind for v in check_databases([zone.db])] == ["no_inventory"]


def test_consumer_in_two_zones_is_caught() -> None:
    sc = tiny()
    hosts = build_hosts(sc, 1)
    a = InProcessZone(hosts[:3], levels=sc.levels, zone="a")
    b = InProcessZone(hosts[3:], levels=sc.levels, zone="b")
    try:
        twice = "33333333-3333-4333-8333-333333333333"
        _plant(a, twice, hosts[0].uuid, "VCPU", 1)
        _plant(b, twice, hosts[3].uuid, "VCPU", 1)
        found = check_databases([a.db, b.db], zones=["a", "b"])
        assert [v.kind for v in found] == ["allocated_twice"]
        assert "zones a, b" in found[0].detail
    finally:
        a.close()
        b.close()


def test_orphans_and_lost_consumers(zone: InProcessZone) -> None:
    reqs = requests(tiny().workload, 1)
    first, second = next(reqs), next(reqs)
    assert zone.schedule(first).accepted and zone.schedule(second).accepted
    kinds = {v.kind for v in check_databases(
        [zone.db], live={*first.consumers, "44444444-4444-4444-8444-444444444444"})}
    assert kinds == {"orphan", "lost"}
    zone.release(second.consumers)
    assert check_databases([zone.db], live=set(first.consumers)) == []
