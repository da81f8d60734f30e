"""engine/index.py: a full build keeps copies of its records' strings, not
the records' own (each would pin a block of the load's freed memory)."""

from __future__ import annotations

from strato.engine.index import ProviderIndex
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
