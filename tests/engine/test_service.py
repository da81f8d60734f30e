"""Engine: excluded providers, own claims, skipped ties, and its configuration."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from strato.engine import CandidateRequest, Engine, EngineConfig, RequestGroup
from strato.engine.service import parse_class_weights
from strato.store.db import Database
from tests.engine.cloud import AGG_A, SHARES, Cloud

VCPU1 = CandidateRequest(groups=(RequestGroup(suffix="", resources=(("VCPU", 1),)),))
WITH_DISK = CandidateRequest(groups=(RequestGroup(
    suffix="", resources=(("VCPU", 1), ("DISK_GB", 10))),))


def _used(engine: Engine, request: CandidateRequest, exclude: set[str] | None = None
          ) -> list[set[str]]:
    result = engine.query(request, exclude=exclude or ())
    return [set(ar.allocations) for ar in result.allocation_requests]


def _set(used: list[set[str]]) -> set[frozenset[str]]:
    return {frozenset(u) for u in used}


def test_excluded_providers_are_as_if_absent(client: TestClient,
                                             sqlite_database: Database) -> None:
    cloud = Cloud(client)
    cn1 = cloud.host("cn1", VCPU=8, aggs=(AGG_A,))
    cn2 = cloud.host("cn2", VCPU=8, aggs=(AGG_A,))
    nfs = cloud.host("nfs", DISK_GB=100, traits=(SHARES,), aggs=(AGG_A,))
    engine = Engine(sqlite_database)
    try:
        assert _set(_used(engine, WITH_DISK)) == {frozenset({cn1, nfs}), frozenset({cn2, nfs})}
        assert _used(engine, VCPU1, {cn1}) == [{cn2}]
        assert _used(engine, WITH_DISK, {nfs}) == []
        # Uuids the index does not know are ignored.
        unknown = {"00000000-0000-4000-8000-000000000000"}
        assert _set(_used(engine, VCPU1, unknown)) == {frozenset({cn1}), frozenset({cn2})}
        # The engine's own view of the index is not changed by an exclusion.
        assert len(_used(engine, VCPU1)) == 2
    finally:
        engine.close()


def test_exclusion_mask_follows_new_providers(client: TestClient,
                                              sqlite_database: Database) -> None:
    cloud = Cloud(client)
    cn1 = cloud.host("cn1", VCPU=8)
    engine = Engine(sqlite_database)
    try:
        stale = {cn1}
        assert _used(engine, VCPU1, stale) == []
        # A provider created later gets a new row; the same exclusion set must
        # still cover cn1 and not hide the newcomer.
        cn2 = cloud.host("cn2", VCPU=8)
        assert _used(engine, VCPU1, stale) == [{cn2}]
        assert _used(engine, VCPU1, {cn1, cn2}) == []
    finally:
        engine.close()


def test_config_values_win_over_the_environment() -> None:
    env = {"STRATO_WEIGHER": "pack", "STRATO_CLASS_WEIGHTS": "VCPU:2, MEMORY_MB:0.5",
           "STRATO_RANDOMIZE_CANDIDATES": "true", "STRATO_MAX_CANDIDATES": "50"}
    from_env = EngineConfig.from_env(env)
    assert (from_env.weigher.name, dict(from_env.weigher.class_weights),
            from_env.weigher.randomize, from_env.max_candidates) == (
        "pack", {"VCPU": 2.0, "MEMORY_MB": 0.5}, True, 50)
    given = EngineConfig.from_env(env, weigher="spread", class_weights={}, randomize=False,
                                  max_candidates=-1)
    assert (given.weigher.name, dict(given.weigher.class_weights), given.weigher.randomize,
            given.max_candidates) == ("spread", {}, False, -1)
    default = EngineConfig.from_env({})
    assert (default.weigher.name, default.weigher.randomize, default.max_candidates) == (
        "spread", False, -1)


def test_class_weights_take_equals_or_colon() -> None:
    assert parse_class_weights("VCPU:2,MEMORY_MB=0.5") == {"VCPU": 2.0, "MEMORY_MB": 0.5}


@pytest.mark.parametrize("bad", ["VCPU", "VCPU:x", ":2"])
def test_malformed_class_weights_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_class_weights(bad)


def test_unknown_weigher_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown weigher"):
        EngineConfig.from_env({}, weigher="random")


def _vcpu_used(engine: Engine, uuid: str) -> int:
    with engine.fresh() as index:
        return int(index.rc["VCPU"].used[index.pos[uuid]])


def _claim(db: Database, rp: str, n: int) -> int:
    import uuid as uuidlib

    from strato.store.allocations import ConsumerClaim, claim
    with db.write() as conn:
        return claim(conn, [ConsumerClaim(str(uuidlib.uuid4()), {rp: {"VCPU": n}},
                                          project_id="p", user_id="u",
                                          generation=None)]).change_seq


@pytest.fixture
def one_host(client: TestClient, sqlite_database: Database) -> Iterator[tuple[Engine, str]]:
    """An engine over one host with 8 VCPU, loaded, nothing used."""
    cn1 = Cloud(client).host("cn1", VCPU=8)
    engine = Engine(sqlite_database)
    try:
        assert _vcpu_used(engine, cn1) == 0
        yield engine, cn1
    finally:
        engine.close()


def _reads(engine: Engine) -> int:
    return engine.stats.incremental + engine.stats.full_loads


def test_own_claims_enter_the_index_without_reading_the_store(
        one_host: tuple[Engine, str], sqlite_database: Database) -> None:
    engine, cn1 = one_host
    reads = _reads(engine)
    # Committed in order 1, 2 but reported 2, 1: applied once the gap closes.
    s1, s2 = _claim(sqlite_database, cn1, 1), _claim(sqlite_database, cn1, 2)
    engine.own_claim(s2, {cn1: {"VCPU": 2}})
    assert engine.index.seq == s1 - 1
    engine.own_claim(s1, {cn1: {"VCPU": 1}})
    assert engine.index.seq == s2
    assert _vcpu_used(engine, cn1) == 3
    assert _reads(engine) == reads
    # A write this process did not report: the chain breaks and the next
    # refresh reads the store, which has the truth.
    _claim(sqlite_database, cn1, 1)
    s4 = _claim(sqlite_database, cn1, 1)
    engine.own_claim(s4, {cn1: {"VCPU": 1}})
    assert _vcpu_used(engine, cn1) == 5
    assert _reads(engine) == reads + 1
    # A report for what the index already has changes nothing.
    engine.own_claim(s4, {cn1: {"VCPU": 1}})
    assert _vcpu_used(engine, cn1) == 5


def test_a_plan_waits_for_the_hooks_of_a_commit_it_can_already_see(
        one_host: tuple[Engine, str], sqlite_database: Database) -> None:
    """A group commit is visible in the store a moment before its post-commit
    hook tells the engine what it wrote: settle() waits for the hook instead of
    reading the claim back."""
    import threading

    engine, cn1 = one_host
    reads = _reads(engine)
    engine.settle()  # nothing under way: returns at once
    sqlite_database.publishing(True)  # as the writer thread, around a batch
    seq = _claim(sqlite_database, cn1, 2)  # committed, hook not run yet
    hooked = threading.Event()

    def hook() -> None:
        engine.own_claim(seq, {cn1: {"VCPU": 2}})
        hooked.set()
        sqlite_database.publishing(False)

    timer = threading.Timer(0.05, hook)
    timer.start()
    engine.settle(timeout=10)
    assert hooked.is_set()
    assert _vcpu_used(engine, cn1) == 2
    assert _reads(engine) == reads
    timer.join()


def test_skip_ties_keeps_the_best_scores_and_explores_fewer_trees(
        client: TestClient, sqlite_database: Database) -> None:
    import strato.engine.candidates as builder

    cloud = Cloud(client)
    for i in range(6):
        cloud.host(f"flat{i}", VCPU=8)
    for i in range(6):
        cloud.host(f"tree{i}", VCPU=8)
        cloud.host(f"tree{i}-numa", parent=f"tree{i}", VCPU=8)
    engine = Engine(sqlite_database)
    explored: list[int] = []
    real = builder._enumerate_tree
    me = threading.get_ident()

    def counting(ctx: Any, t: int) -> Any:
        # Only this test's own search: the app's threads (its engine, behind
        # `client`) may build candidates at the same moment.
        if threading.get_ident() == me:
            explored.append(t)
        return real(ctx, t)
    try:
        for skip in (False, True):
            explored.clear()
            req = CandidateRequest(groups=VCPU1.groups, limit=3, skip_ties=skip)
            with engine.fresh() as index:
                builder._enumerate_tree = counting  # type: ignore[assignment]
                try:
                    cands = builder.build(index, req, engine.scorer)
                finally:
                    builder._enumerate_tree = real  # type: ignore[assignment]
            scores = [c.score for c in cands]
            if not skip:
                exact, exact_explored = scores, len(explored)
        assert scores == exact  # the same best scores (ties broken differently)
        assert len(explored) < exact_explored
    finally:
        engine.close()


def test_summary_lists_standard_traits_before_custom_ones(client: TestClient,
                                                          sqlite_database: Database) -> None:
    # As Placement, which lists a provider's traits by id: the standard ones exist first.
    cloud = Cloud(client)
    client.put("/traits/CUSTOM_FOO")
    cn1 = cloud.host("cn1", VCPU=8, traits=("HW_NUMA_ROOT", "CUSTOM_FOO", "COMPUTE_NODE"))
    engine = Engine(sqlite_database)
    try:
        summaries = engine.query(VCPU1).provider_summaries
        assert [s.traits for s in summaries if s.uuid == cn1] == [
            ("COMPUTE_NODE", "HW_NUMA_ROOT", "CUSTOM_FOO")]
    finally:
        engine.close()


def test_a_store_with_a_capacity_beyond_int64_loads(client: TestClient,
                                                    sqlite_database: Database) -> None:
    # What a zone does as it starts: a full load of the store.
    cloud = Cloud(client)
    huge = cloud.host("huge", VCPU={"total": 2147483647, "allocation_ratio": 3.40282e38})
    cn1 = cloud.host("cn1", VCPU=8)
    engine = Engine(sqlite_database)
    try:
        engine.refresh()
        assert engine.loaded
        assert _set(_used(engine, VCPU1)) == {frozenset({huge}), frozenset({cn1})}
    finally:
        engine.close()
