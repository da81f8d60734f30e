"""zone/summary.py: the own summary kept on the index and caught up on the
rows whose usage moved answers exactly as one computed afresh, whatever
usage, inventories, trees and the stale set do under it."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strato.engine.hosts import HostArrays
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.zone import protocol, summary
from strato.zone.protocol import MAX_COUNT
from tests.engine.worlds import move_usage

TRAIT = "HW_CPU_X86_AVX2"


@st.composite
def worlds(draw: st.DrawFn) -> list[ProviderRecord]:
    out: list[ProviderRecord] = []
    for i in range(draw(st.integers(1, 12))):
        root = f"00000000-0000-4000-8000-{i:012d}"
        out.append(ProviderRecord(
            uuid=root, root_uuid=root,
            traits=frozenset({TRAIT}) if draw(st.booleans()) else frozenset(),
            inventories={"DISK_GB": InventoryRecord(total=draw(st.integers(0, 50)))}
            if draw(st.booleans()) else {}))
        for j in range(draw(st.integers(0, 2))):
            out.append(ProviderRecord(
                uuid=f"00000000-0000-4000-9{j:03d}-{i:012d}", parent_uuid=root,
                root_uuid=root,
                inventories={"VCPU": InventoryRecord(total=draw(st.integers(1, 16)),
                                                     allocation_ratio=2.0)}))
    return out


def _arrays(index: ProviderIndex) -> HostArrays:
    n = index.size
    return HostArrays(locations=[None] * n, loc_code=np.zeros(n, dtype=np.int64),
                      domains={}, domain_names={},
                      tags={"gpu": np.arange(n) % 3 == 0})


def _afresh(index: ProviderIndex, excluded: np.ndarray) -> dict[str, object]:
    kept = index.derived.pop(summary._KEPT, None)
    try:
        return summary.own_summary(index, _arrays(index), excluded)
    finally:
        if kept is not None:
            index.derived[summary._KEPT] = kept


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_kept_summary_answers_as_one_computed_afresh(data: st.DataObject) -> None:
    world = data.draw(worlds())
    index = ProviderIndex.build(world)
    records = {r.uuid: r for r in world}
    excluded = np.zeros(index.size, dtype=bool)
    for _ in range(data.draw(st.integers(1, 12))):
        u = data.draw(st.sampled_from(sorted(records)))
        rec = records[u]
        action = data.draw(st.sampled_from(("set", "add", "stale", "inventory", "remove",
                                            "none")))
        if action in ("set", "add"):
            move_usage(data, index, rec, action)
        elif action == "stale":
            excluded = excluded.copy()
            excluded[index.pos[u]] = not excluded[index.pos[u]]
        elif action == "inventory" and rec.inventories:
            rc = sorted(rec.inventories)[0]
            rec = records[u] = ProviderRecord(
                uuid=rec.uuid, parent_uuid=rec.parent_uuid, root_uuid=rec.root_uuid,
                traits=rec.traits, inventories={rc: InventoryRecord(
                    total=data.draw(st.integers(1, 40)))},
                used={rc: int(index.rc[rc].used[index.pos[u]])})
            index.apply([rec], ())
        elif action == "remove" and rec.parent_uuid is not None:
            index.apply([], [u])
            del records[u]
        got = summary.own_summary(index, _arrays(index), excluded)
        assert got == _afresh(index, excluded)


def test_a_claim_is_caught_up_not_recomputed() -> None:
    world = [ProviderRecord(uuid=f"00000000-0000-4000-8000-{i:012d}",
                            inventories={"VCPU": InventoryRecord(total=8)})
             for i in range(100)]
    index = ProviderIndex.build(world)
    excluded = np.zeros(index.size, dtype=bool)
    first = summary.own_summary(index, _arrays(index), excluded)
    kept = index.derived[summary._KEPT]
    index.add_usage(world[3].uuid, {"VCPU": 8})
    index.add_usage(world[4].uuid, {"VCPU": 5})
    after = summary.own_summary(index, _arrays(index), excluded)
    assert index.derived[summary._KEPT] is kept  # the same state, caught up
    assert after["classes"]["VCPU"]["used"] == first["classes"]["VCPU"]["used"] + 13
    assert after == _afresh(index, excluded)


def test_a_pool_beyond_what_a_zone_sends_is_sent_as_max_count() -> None:
    # 2,000 providers of 2**53 each (Placement accepts far more): their sum
    # overflows int64 and exceeds what a zone may send.
    world = [ProviderRecord(uuid=f"00000000-0000-4000-8000-{i:012d}",
                            inventories={"VCPU": InventoryRecord(
                                total=2**31 - 1, allocation_ratio=3.40282e38)},
                            used={"VCPU": 5})
             for i in range(2000)]
    index = ProviderIndex.build(world)
    own = summary.own_summary(index, _arrays(index), np.zeros(index.size, dtype=bool))
    vcpu = own["classes"]["VCPU"]
    assert vcpu["capacity"] == vcpu["max_capacity"] == MAX_COUNT
    assert vcpu["largest_free"] == MAX_COUNT - 5
    assert vcpu["used"] == 10_000
    merged = summary.merge([own, own])
    for one in (own, merged):
        protocol.Summary.model_validate({"zone": "z", **one})
    assert merged["classes"]["VCPU"]["capacity"] == MAX_COUNT
    assert merged["classes"]["VCPU"]["used"] == 20_000
