"""engine.summaries: provider summaries kept per row answer exactly as ones
built from the index's columns, while usage, inventories, traits and trees
change under them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strato.engine import ProviderIndex, Scorer, candidates, summaries
from tests.engine.worlds import change_one, requests, worlds


def fresh(index: ProviderIndex, cands: list[candidates.Candidate], nested_aware: bool
          ) -> list[summaries.ProviderSummary]:
    index.derived.pop(summaries._KEY, None)
    return summaries.summarize(index, cands, nested_aware=nested_aware)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_kept_summaries_match_the_columns(data: st.DataObject) -> None:
    world = data.draw(worlds())
    records = {r.uuid: r for r in world}
    index = ProviderIndex.build(world)
    req = data.draw(requests(world))
    scorer = Scorer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(summaries, "KEPT_ROWS", data.draw(st.integers(1, 8)))  # evictions too
        mp.setattr(summaries, "KEPT_ANSWER", data.draw(st.sampled_from((1024, 2))))
        for _ in range(data.draw(st.integers(1, 10))):
            change_one(data, index, records)
            cands = candidates.build(index, req, scorer)
            got = summaries.summarize(index, cands, nested_aware=req.nested_aware)
            assert got == fresh(index, cands, req.nested_aware)
