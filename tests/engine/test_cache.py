"""engine.cache: search state kept between requests answers exactly as a fresh
build, while usage, inventories, exclusions and structure change under it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strato.engine import ProviderIndex, Scorer, WeigherConfig, cache, candidates
from strato.engine.candidates import Candidate
from strato.engine.records import InventoryRecord, ProviderRecord
from tests.engine.worlds import SHARING, TRAITS, change_one, requests, worlds


def answer(cands: list[Candidate]) -> list[tuple[object, ...]]:
    return [(c.items, c.mappings, c.key, c.score) for c in cands]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(("spread", "pack")))
def test_kept_state_answers_as_a_fresh_build(data: st.DataObject, weigher: str) -> None:
    world = data.draw(worlds())
    if data.draw(st.booleans()):  # sharing providers turn the cache off: mostly without
        world = [replace(r, traits=r.traits - {SHARING}) for r in world]
    records = {r.uuid: r for r in world}
    index = ProviderIndex.build(world)
    scorer = Scorer(WeigherConfig(name=weigher))
    reqs = [replace(data.draw(requests(world)),
                    limit=data.draw(st.one_of(st.none(), st.integers(1, 3))),
                    skip_ties=data.draw(st.booleans()))
            for _ in range(data.draw(st.integers(1, 2)))]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cache, "FULL_SHARE", 2.0)  # always the incremental update
        # Few best rows kept: they run out, are cut, and the floor matters.
        mp.setattr(cache, "TOP_MIN", 1)
        mp.setattr(cache, "TOP_SHARE", data.draw(st.integers(1, 2)))
        for _ in range(data.draw(st.integers(1, 10))):
            change_one(data, index, records)
            exclude = (np.array(data.draw(st.lists(st.booleans(), min_size=index.size,
                                                   max_size=index.size)), dtype=bool)
                       if data.draw(st.booleans()) else None)
            if exclude is not None and data.draw(st.booleans()):
                exclude = exclude[index.root[: index.size]]  # whole trees, as rules do
            req = data.draw(st.sampled_from(reqs))
            kept = cache.build_kept(index, req, scorer, exclude=exclude)
            fresh = candidates.build(index, req, scorer, exclude=exclude)
            eligible = not index.sharing_anchors()
            assert (kept is not None) == eligible
            if kept is not None:
                assert answer(kept) == answer(fresh)
            assert answer(cache.build(index, req, scorer, exclude=exclude)) == answer(fresh)


def test_a_full_rebuild_past_the_share_of_changed_rows_answers_the_same() -> None:
    world = [ProviderRecord(uuid=f"00000000-0000-0000-0000-{i:012d}",
                            root_uuid=f"00000000-0000-0000-0000-{i:012d}",
                            inventories={"VCPU": InventoryRecord(total=8)})
             for i in range(1, 9)]
    index = ProviderIndex.build(world)
    scorer = Scorer()
    req = candidates.CandidateRequest(groups=(candidates.RequestGroup(
        resources=(("VCPU", 2),), required=((TRAITS[0],),)),), limit=2)
    index.apply([replace(r, traits=frozenset({TRAITS[0]})) for r in world], ())
    first = cache.build_kept(index, req, scorer)
    assert first is not None and len(first) == 2
    for r in world[:5]:  # most rows change: rebuilt, not updated
        index.add_usage(r.uuid, {"VCPU": 4})
    again = cache.build_kept(index, req, scorer)
    assert again is not None
    assert answer(again) == answer(candidates.build(index, req, scorer))
    assert {index.uuids[c.items[0][0]] for c in again} <= {r.uuid for r in world[5:]}


def test_isolate_over_two_groups_never_takes_one_host_after_an_update() -> None:
    """Kept state for `isolate` over two granular groups: a host alone cannot
    serve it, before or after its usage moves (the update redoes its row)."""
    host = ProviderRecord(uuid="00000000-0000-0000-0000-000000000001",
                          root_uuid="00000000-0000-0000-0000-000000000001",
                          inventories={"VCPU": InventoryRecord(total=8)})
    root = "00000000-0000-0000-0000-000000000002"
    numa = [ProviderRecord(uuid=f"00000000-0000-0000-0000-00000000000{i}", parent_uuid=root,
                           root_uuid=root, inventories={"VCPU": InventoryRecord(total=4)})
            for i in (3, 4)]
    index = ProviderIndex.build([host, ProviderRecord(uuid=root, root_uuid=root), *numa])
    RG = candidates.RequestGroup
    req = candidates.CandidateRequest(groups=(RG(suffix="1", resources=(("VCPU", 1),)),
                                              RG(suffix="2", resources=(("VCPU", 1),))),
                                      group_policy=candidates.GroupPolicy.ISOLATE, limit=3)
    scorer = Scorer()
    for used in (0, 2, 1):
        index.set_usage(host.uuid, {"VCPU": used})
        kept = cache.build_kept(index, req, scorer)
        assert kept is not None and answer(kept) == answer(candidates.build(index, req, scorer))
        assert all(len({p for p, _, _ in c.items}) == 2 for c in kept)


@st.composite
def like_inventories(draw: st.DrawFn, nested: bool) -> dict[str, InventoryRecord]:
    """VCPU and memory from a few sizes (ties everywhere); a NUMA node may have one only."""
    rcs = (draw(st.sampled_from((("VCPU",), ("MEMORY_MB",), ("VCPU", "MEMORY_MB"))))
           if nested else ("VCPU", "MEMORY_MB"))
    return {rc: InventoryRecord(total=draw(st.sampled_from((4, 8)))) for rc in rcs}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(("spread", "pack")))
def test_kept_best_rows_follow_claims_and_releases(data: st.DataObject, weigher: str) -> None:
    """With a limit, the best single-provider rows are kept between requests
    (cache.TOP_SHARE x limit of them): claims push them below the rest, releases
    lift others above them, ties at the floor go by uuid, whole trees drop out
    (most requests the same ones, which then crowd the list).
    So are the trees searched first (best bound first), including when a
    granular group's loose bounds make the search go past them. A cloud of
    like hosts and like nested ones."""
    world = [ProviderRecord(uuid=f"{i:08d}-0000-0000-0000-000000000000",
                            root_uuid=f"{i:08d}-0000-0000-0000-000000000000",
                            inventories=data.draw(like_inventories(False)))
             for i in range(1, data.draw(st.integers(1, 16)) + 1)]
    for t in range(data.draw(st.integers(0, 10))):
        root = f"ffffff{t:02d}-0000-0000-0000-000000000000"
        world += [ProviderRecord(uuid=root, root_uuid=root)] + [
            ProviderRecord(uuid=f"ffffff{t:02d}-0000-0000-0000-00000000000{i}",
                           parent_uuid=root, root_uuid=root, inventories=invs)
            for i, invs in enumerate(data.draw(st.lists(like_inventories(True),
                                                        min_size=1, max_size=3)))]
    index = ProviderIndex.build(world)
    scorer = Scorer(WeigherConfig(name=weigher))
    shape = data.draw(st.sampled_from(((("VCPU", 1),), (("VCPU", 2),),
                                       (("VCPU", 1), ("MEMORY_MB", 1)))))
    RG = candidates.RequestGroup
    group = RG(suffix="1", resources=shape) if data.draw(st.booleans()) else RG(resources=shape)
    req = candidates.CandidateRequest(groups=(group,), limit=data.draw(st.integers(1, 4)))
    def trees(rows: list[int]) -> npt.NDArray[np.bool_]:
        drop = np.zeros(index.size, dtype=bool)
        drop[rows] = True
        return drop[index.root[: index.size]]

    # What most requests leave out, as the scheduler's spare hosts: the rows
    # the others' claims leave at the top crowd the kept list.
    rows = st.lists(st.integers(0, index.size - 1), max_size=4)
    spare = trees(data.draw(rows))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cache, "FULL_SHARE", 2.0)
        mp.setattr(cache, "TOP_MIN", 1)
        mp.setattr(cache, "TOP_SHARE", data.draw(st.integers(1, 3)))
        for _ in range(data.draw(st.integers(1, 25))):
            drop = data.draw(st.sampled_from((None, spare, spare, "more", "other")))
            if isinstance(drop, str):
                drop = trees(data.draw(rows)) | (spare if drop == "more" else False)
            got = cache.build_kept(index, req, scorer, exclude=drop)
            assert got is not None
            assert answer(got) == answer(candidates.build(index, req, scorer, exclude=drop))
            if data.draw(st.integers(0, 2)) == 0 or not got:  # a release somewhere
                rec = data.draw(st.sampled_from([r for r in world if r.inventories]))
                rc = data.draw(st.sampled_from(sorted(rec.inventories)))
                index.add_usage(rec.uuid, {rc: -data.draw(st.integers(1, 2))})
            else:  # a claim on one of the best
                for p, rc, _ in data.draw(st.sampled_from(got)).items:
                    index.add_usage(index.uuids[p], {rc: data.draw(st.integers(1, 3))})
