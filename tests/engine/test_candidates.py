"""engine/candidates.py: a limited answer is the first `limit` of the full ranking,
whichever way the k-th best score is found (many hosts tied at the best, or
scores that all differ)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from strato.engine import ProviderIndex, Scorer, WeigherConfig, cache, candidates
from strato.engine.records import InventoryRecord, ProviderRecord


def _hosts(used: list[int]) -> list[ProviderRecord]:
    return [ProviderRecord(uuid=f"00000000-0000-0000-0000-{i:012d}",
                           root_uuid=f"00000000-0000-0000-0000-{i:012d}",
                           inventories={"VCPU": InventoryRecord(total=16)},
                           used={"VCPU": u} if u else {})
            for i, u in enumerate(used, start=1)]


def _ids(index: ProviderIndex, got: list[candidates.Candidate]) -> list[str]:
    return [index.uuids[c.items[0][0]] for c in got]


@settings(max_examples=300, deadline=None)
@given(used=st.lists(st.sampled_from([0, 0, 0, 2, 4, 8, 12]), min_size=1, max_size=60),
       limit=st.integers(2, 70), weigher=st.sampled_from(("spread", "pack")))
def test_a_limited_answer_is_the_head_of_the_full_ranking(used: list[int], limit: int,
                                                           weigher: str) -> None:
    index = ProviderIndex.build(_hosts(used))
    scorer = Scorer(WeigherConfig(name=weigher))
    full = candidates.CandidateRequest(groups=(candidates.RequestGroup(
        resources=(("VCPU", 1),)),))
    everything = candidates.build(index, full, scorer)
    head = _ids(index, everything)[:limit]
    assert _ids(index, candidates.build(index, replace(full, limit=limit), scorer)) == head
    # The engine's own entry (the one-group fast path, and the kept state).
    assert _ids(index, cache.build(index, replace(full, limit=limit), scorer)) == head
