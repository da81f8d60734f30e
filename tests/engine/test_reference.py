"""The engine agrees with the slow reference implementation on random worlds."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strato.engine import ProviderIndex, Scorer, WeigherConfig, build, candidates
from strato.engine.candidates import Candidate
from strato.engine.records import ProviderRecord
from strato.engine.reference import RefCandidate, reference_candidates
from strato.engine.request import CandidateRequest, RequestGroup
from tests.engine.worlds import requests, worlds

EPS = 1e-9


def _identity(index: ProviderIndex, c: Candidate) -> tuple[object, object]:
    u = index.uuids
    items = tuple(sorted((u[p], rc, a) for p, rc, a in c.items))
    maps = tuple((s, tuple(sorted(u[p] for p in ps))) for s, ps in c.mappings)
    return items, maps


def _ref_identity(c: RefCandidate) -> tuple[object, object]:
    return c.items, c.mappings


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[ProviderRecord], CandidateRequest, str]:
    world = draw(worlds())
    return world, draw(requests(world)), draw(st.sampled_from(("spread", "pack")))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_engine_matches_reference(case: tuple[list[ProviderRecord], CandidateRequest, str]
                                  ) -> None:
    world, request, weigher = case
    index = ProviderIndex.build(world)
    scorer = Scorer(WeigherConfig(name=weigher))
    full_req = replace(request, limit=None)
    expected = reference_candidates(world, full_req, weigher=weigher)
    got = build(index, full_req, scorer)
    assert {_identity(index, c) for c in got} == {_ref_identity(c) for c in expected}
    assert len(got) == len(expected)
    scores = {_ref_identity(c): c.score for c in expected}
    for c in got:
        assert abs(scores[_identity(index, c)] - c.score) < EPS
    assert all(a.score >= b.score - EPS for a, b in itertools.pairwise(got))
    if request.limit is not None:
        limited = build(index, request, scorer)
        assert len(limited) == min(request.limit, len(expected))
        ids = {_ref_identity(c) for c in expected}
        assert all(_identity(index, c) in ids for c in limited)
        if limited:
            kth = expected[len(limited) - 1].score
            assert min(c.score for c in limited) >= kth - EPS


@settings(max_examples=150, deadline=None)
@given(cases())
def test_no_candidate_exceeds_free_capacity(
        case: tuple[list[ProviderRecord], CandidateRequest, str]) -> None:
    world, request, weigher = case
    index = ProviderIndex.build(world)
    by_uuid = {r.uuid: r for r in world}
    for c in build(index, replace(request, limit=None), Scorer(WeigherConfig(name=weigher))):
        for p, rc, amount in c.items:
            rec = by_uuid[index.uuids[p]]
            inv = rec.inventories[rc]
            assert rec.used.get(rc, 0) + amount <= inv.capacity
            assert amount <= inv.max_unit


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(1, 3))
def test_limit_keeps_the_best(case: tuple[list[ProviderRecord], CandidateRequest, str],
                              limit: int) -> None:
    """With a limit, trees are pruned by score bounds; the top k must survive."""
    world, request, weigher = case
    index = ProviderIndex.build(world)
    scorer = Scorer(WeigherConfig(name=weigher))
    expected = reference_candidates(world, replace(request, limit=None), weigher=weigher)
    got = build(index, replace(request, limit=limit), scorer)
    assert len(got) == min(limit, len(expected))
    for mine, theirs in zip(got, expected, strict=False):
        assert abs(mine.score - theirs.score) < EPS


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(1, 4), st.sampled_from(("spread", "pack")))
def test_the_plain_fast_path_answers_as_the_general_path(data: st.DataObject, limit: int,
                                                         weigher: str) -> None:
    """One group of resources over single-provider trees: `_plain` answers; with
    it switched off, the general path must give the very same candidates."""
    world = [replace(r, parent_uuid=None, root_uuid=r.uuid, aggregates=frozenset(),
                     traits=r.traits - {"MISC_SHARES_VIA_AGGREGATE"})
             for r in data.draw(worlds())]
    resources = data.draw(st.dictionaries(st.sampled_from(("VCPU", "MEMORY_MB", "DISK_GB")),
                                          st.integers(1, 8), min_size=1, max_size=3))
    request = CandidateRequest(groups=(RequestGroup(
        suffix="", resources=tuple(sorted(resources.items()))),), limit=limit)
    index = ProviderIndex.build(world)
    scorer = Scorer(WeigherConfig(name=weigher))
    fast = build(index, request, scorer)
    assert candidates._plain(index, request, scorer, None) is not None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(candidates, "_plain", lambda *a: None)
        general = build(index, request, scorer)
    assert [(c.items, c.mappings, c.key) for c in fast] == \
        [(c.items, c.mappings, c.key) for c in general]
    assert [c.score for c in fast] == pytest.approx([c.score for c in general])
