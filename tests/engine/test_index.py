"""engine/index.py: a full build keeps copies of its records' strings, not
the records' own (each would pin a block of the load's freed memory); a
capacity beyond int64 is held at MAX_HELD; a record that fails changes nothing."""

from __future__ import annotations

import math

import pytest

from strato.engine import CandidateRequest, RequestGroup, Scorer, cache, candidates
from strato.engine.index import MAX_HELD, ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord


def test_a_built_index_owns_its_strings_and_answers_the_same() -> None:
    recs = [ProviderRecord(uuid=f"00000000-0000-4000-8000-{i:012d}",
                           inventories={"VCPU": InventoryRecord(total=8)},
                           traits=frozenset({"HW_CPU_X86_AVX2"}) if i % 2 else frozenset(),
                           aggregates=frozenset({"a0000000-0000-4000-8000-00000000000a"}))
            for i in range(50)]
    index = ProviderIndex.build(recs)
    for p, rec in enumerate(recs):
        assert index.uuids[p] == rec.uuid and index.uuids[p] is not rec.uuid
        assert index.pos[rec.uuid] == p
        assert index.traits[p] == rec.traits and index.aggregates[p] == rec.aggregates
        if rec.traits:
            assert index.traits[p] is not rec.traits
    # One shared set per distinct set, as the loader gives them.
    assert len({id(t) for t in index.traits}) == 2
    assert index.trait_mask("HW_CPU_X86_AVX2")[:50].sum() == 25
    assert index.agg_mask("a0000000-0000-4000-8000-00000000000a")[:50].all()
    assert index.rc_columns("VCPU") is not None


# -- capacities beyond int64 (Placement accepts allocation_ratio up to 3.4e38) --

def _host(i: int, ratio: float = 1.0, total: int = 10) -> ProviderRecord:
    return ProviderRecord(uuid=f"00000000-0000-4000-8000-{i:012d}",
                          inventories={"VCPU": InventoryRecord(total=total,
                                                               allocation_ratio=ratio)})


def _found(index: ProviderIndex) -> set[str]:
    request = CandidateRequest(groups=(RequestGroup(resources=(("VCPU", 1),)),))
    got = {index.uuids[c.items[0][0]] for c in candidates.build(index, request, Scorer())}
    assert {index.uuids[c.items[0][0]] for c in cache.build(index, request, Scorer())} == got
    return got


def test_a_capacity_beyond_int64_is_held_at_max_held() -> None:
    index = ProviderIndex.build([_host(0, 1e19), _host(1, 3.40282e38, 2**31 - 1),
                                 *(_host(i) for i in range(2, 6))])
    col = index.rc_columns("VCPU")
    assert col is not None
    assert col.capacity[:6].tolist() == [MAX_HELD, MAX_HELD, 10, 10, 10, 10]
    assert _found(index) == set(index.uuids)
    # The same as an update of a known row, and back: the index stays whole.
    index.apply([_host(2, 1e30)], ())
    assert col.capacity[2] == MAX_HELD and _found(index) == set(index.uuids)
    index.apply([_host(7, 1e19)], ())
    index.apply([_host(2), _host(7)], ())
    assert col.capacity[:7].tolist() == [MAX_HELD, MAX_HELD, 10, 10, 10, 10, 10]
    assert _found(index) == set(index.uuids)
    # Usage beyond what a row holds is held too.
    assert index.set_usage(_host(0).uuid, {"VCPU": 2**70})
    assert col.used[0] == MAX_HELD
    assert _host(0).uuid not in _found(index)


def test_a_record_that_cannot_be_indexed_changes_nothing() -> None:
    index = ProviderIndex.build([_host(i) for i in range(3)])
    before = (index.n, dict(index.pos), index.version, index.row_version.copy(),
              {k: getattr(index.rc["VCPU"], k).copy() for k in index.rc["VCPU"].__slots__})
    for bad in (_host(9, math.nan), _host(1, math.nan)):
        with pytest.raises(ValueError):
            index.apply([bad], ())
        col = index.rc["VCPU"]
        assert (index.n, index.pos, index.version) == before[:3]
        assert (index.row_version == before[3]).all()
        for k, v in before[4].items():
            assert (getattr(col, k) == v).all(), k
    assert _found(index) == set(index.uuids)
