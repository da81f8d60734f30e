"""The zone protocol: every message validated, every answer checked against its request."""

from __future__ import annotations

import contextlib
import copy
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strato.model.schedule import ScheduleRequest
from strato.zone import protocol
from strato.zone.protocol import Faulty

RP = [str(uuid.UUID(int=i + 1)) for i in range(4)]
C = [str(uuid.UUID(int=100 + i)) for i in range(4)]


def summary(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "zone": "dfw", "location_prefix": "dfw", "tags": ["hipaa"], "health": "ok",
        "as_of": "2026-11-23T20:00:00.000Z", "providers": 3,
        "classes": {"VCPU": {"capacity": 24, "used": 4, "largest_free": 8},
                    "MEMORY_MB": {"capacity": 49152, "used": 0, "largest_free": 16384}},
        "traits": ["HW_CPU_X86_AVX2"], "tags_present": [], "freed": 12345,
        "children": [{"name": "dfw-r1", "healthy": True, "age_s": 0.5},
                     {"name": "dfw-r2", "healthy": False, "age_s": None}]}
    body.update(over)
    return body


def request(n: int = 2, **over: Any) -> ScheduleRequest:
    body: dict[str, Any] = {"consumers": C[:n], "project_id": "p", "user_id": "u",
                            "groups": [{"resources": {"VCPU": 2, "MEMORY_MB": 512}},
                                       {"resources": {"VCPU": 1}}],
                            "group_policy": "none"}
    body.update(over)
    return ScheduleRequest.model_validate(body)


def placement(consumer: str, zone: str = "dfw/dfw-r1", **over: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "consumer_uuid": consumer, "provider": RP[0],
        "allocations": {RP[0]: {"resources": {"VCPU": 2, "MEMORY_MB": 512}},
                        RP[1]: {"resources": {"VCPU": 1}}},
        "location": "dfw/room1/rack1/h1", "score": 0.75, "zone": zone}
    p.update(over)
    return p


def answer(n: int = 2, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"placements": [placement(c) for c in C[:n]], "relaxed": [],
                            "retries": 0, "dry_run": False, "request_id": "r@global",
                            "unplaced": [], "explain": None}
    body.update(over)
    return body


def reason(fn: Any, *args: Any) -> str:
    with pytest.raises(Faulty) as info:
        fn(*args)
    return info.value.reason


# -- summary -------------------------------------------------------------------------------

def test_summary_honest_round_trips() -> None:
    assert protocol.read_summary(summary()) == summary()


def test_summary_keeps_only_what_was_sent() -> None:
    body = {"zone": "leaf", "providers": 0, "classes": {}}
    assert protocol.read_summary(body) == body


@pytest.mark.parametrize(("over", "field"), [
    ({"providers": "3"}, "providers"),
    ({"providers": 3.0}, "providers"),
    ({"providers": True}, "providers"),
    ({"providers": -1}, "providers"),
    ({"providers": 2**53 + 1}, "providers"),
    ({"freed": 1e308}, "freed"),
    ({"classes": {"VCPU": {"capacity": 8, "used": 0, "largest_free": 1e308}}},
     "classes.VCPU.largest_free"),
    ({"classes": {"VCPU": {"capacity": 8, "used": 0, "largest_free": float("nan")}}},
     "classes.VCPU.largest_free"),
    ({"classes": {"VCPU": {"capacity": "8", "used": 0, "largest_free": 1}}},
     "classes.VCPU.capacity"),
    ({"classes": {"VCPU": {"capacity": 8, "used": 0}}}, "classes.VCPU.largest_free"),
    ({"classes": {"VCPU": {"capacity": 8, "used": 0, "largest_free": 9}}}, "largest_free 9"),
    ({"classes": {"vcpu": {"capacity": 8, "used": 0, "largest_free": 1}}}, "resource class"),
    ({"classes": []}, "classes"),
    ({"traits": ["x" * 256]}, "traits.0"),
    ({"traits": "HW"}, "traits"),
    ({"children": [{"name": "a", "healthy": "yes"}]}, "children.0.healthy"),
    ({"children": [{"name": "a", "healthy": True, "age_s": float("inf")}]},
     "children.0.age_s"),
    ({"zone": "a/b"}, "zone"),
    ({"zone": ""}, "zone"),
    ({"clock": "now"}, "clock"),
    ({"clock": "1764300000.5"}, "clock"),
    ({"clock": True}, "clock"),
    ({"clock": float("nan")}, "clock"),
    ({"clock": -1.0}, "clock"),
    ({"clock": 1e300}, "clock"),
])
def test_summary_lies_are_faulty(over: dict[str, Any], field: str) -> None:
    assert field in reason(protocol.read_summary, summary(**over))


def test_summary_missing_zone_and_not_an_object() -> None:
    body = summary()
    del body["zone"]
    assert "zone" in reason(protocol.read_summary, body)
    assert "not a JSON object" in reason(protocol.read_summary, [summary()])
    assert "not a JSON object" in reason(protocol.read_summary, None)
    assert "not a JSON object" in reason(protocol.read_summary, "<html>")


def test_summary_lists_are_bounded() -> None:
    many = [f"T{i}" for i in range(protocol.MAX_TRAITS + 1)]
    assert "traits" in reason(protocol.read_summary, summary(traits=many))


def test_summary_ignores_fields_of_a_newer_protocol() -> None:
    assert protocol.read_summary(summary(future_field={"x": 1})) == summary()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(["providers", "freed", "classes", "traits", "children", "zone",
                            "tags", "as_of", "location_prefix"]), value=_json)
def test_summary_any_value_is_accepted_or_faulty(key: str, value: Any) -> None:
    """Whatever a child puts in a field, the parent gets a summary or Faulty."""
    try:
        out = protocol.read_summary(summary(**{key: value}))
    except Faulty:
        return
    assert out["zone"]


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.integers(), st.floats(), st.booleans(), st.text(max_size=3)))
def test_summary_counts_are_ints_within_bounds(value: Any) -> None:
    body = summary(classes={"VCPU": {"capacity": 2**53, "used": value, "largest_free": 0}})
    ok = type(value) is int and 0 <= value <= 2**53
    try:
        protocol.read_summary(body)
    except Faulty:
        assert not ok
    else:
        assert ok


# -- schedule answers ----------------------------------------------------------------------

def test_answer_honest_round_trips() -> None:
    req = request()
    got = protocol.read_schedule_answer(req, answer(), "dfw")
    assert got == answer()


def test_answer_with_summary_and_shared_pool_part() -> None:
    req = request(1, groups=[{"resources": {"VCPU": 2, "DISK_GB": 10}}])
    p = placement(C[0], allocations={RP[0]: {"resources": {"VCPU": 2}},
                                     RP[2]: {"resources": {"DISK_GB": 10}, "zone": "dfw"}},
                  shared_zone="dfw")
    body = answer(1, placements=[p], zone_summary=summary(), replayed=True,
                  relaxed=[{"index": 0, "type": "anti_affinity", "weight": 1.0,
                            "rule": "anti_affinity web@rack"}],
                  explain={"summary": "ok", "stages": [{"stage": "fit", "removed": 3}]})
    assert protocol.read_schedule_answer(req, body, "dfw") == body


def test_answer_non_atomic_with_unplaced() -> None:
    req = request(3, atomic=False)
    body = answer(2, unplaced=[C[2]])
    assert protocol.read_schedule_answer(req, body, "dfw")["unplaced"] == [C[2]]


def test_answer_dry_run_must_match() -> None:
    assert "dry_run" in reason(protocol.read_schedule_answer, request(dry_run=True), answer(),
                               "dfw")
    body = answer(dry_run=True)
    assert protocol.read_schedule_answer(request(dry_run=True), body, "dfw") == body


def _with(i: int, **over: Any) -> dict[str, Any]:
    body = answer()
    body["placements"][i].update(over)
    return body


@pytest.mark.parametrize(("body", "field"), [
    (_with(0, consumer_uuid=C[3]), "was not asked"),
    (_with(0, consumer_uuid="not-a-uuid"), "placements.0.consumer_uuid"),
    (answer(placements=[placement(C[0]), placement(C[0])]), "answered 2 times"),
    (answer(placements=[placement(C[0])], unplaced=[C[0], C[1]]), "answered 2 times"),
    (answer(placements=[placement(C[0])]), "neither placed nor unplaced"),
    (answer(placements=[placement(C[0])], unplaced=[C[1]]), "atomic"),
    (_with(1, allocations={RP[0]: {"resources": {"VCPU": 4, "MEMORY_MB": 512}}}),
     "placements.1.allocations"),
    (_with(1, allocations={RP[0]: {"resources": {"VCPU": 3, "MEMORY_MB": 512,
                                                 "DISK_GB": 1}}}),
     "placements.1.allocations"),
    (_with(0, allocations={RP[0]: {"resources": {"VCPU": "3", "MEMORY_MB": 512}}}),
     "placements.0.allocations"),
    (_with(0, allocations={RP[0]: {"resources": {"VCPU": 3.0, "MEMORY_MB": 512}}}),
     "placements.0.allocations"),
    (_with(0, allocations={RP[0]: {"resources": {"VCPU": 0, "VCPU_X": 3, "MEMORY_MB": 512}}}),
     "placements.0.allocations"),
    (_with(0, allocations={RP[0]: {"resources": {"VCPU": -3, "MEMORY_MB": 512}}}),
     "placements.0.allocations"),
    (_with(0, allocations={"host-1": {"resources": {"VCPU": 3, "MEMORY_MB": 512}}}),
     "allocations key"),
    (_with(0, allocations={}), "placements.0.allocations"),
    (_with(0, zone="ord/ord-r1"), "placements.0.zone"),
    (_with(0, zone="dfw//x"), "placements.0.zone"),
    (_with(0, zone="/".join(["dfw"] * 40)), "placements.0.zone"),
    (_with(0, score=float("inf")), "placements.0.score"),
    (_with(0, score=1e300), "placements.0.score"),
    (_with(0, score="high"), "placements.0.score"),
    (answer(retries=-1), "retries"),
    (answer(dry_run=None), "dry_run"),
    (answer(placements={"a": 1}), "placements"),
    (answer(zone_summary={"providers": 1}), "zone_summary.zone"),
    (answer(explain={"x": "y" * (protocol.MAX_EXPLAIN_BYTES + 1)}), "explain"),
    (answer(relaxed=[{"index": 0, "type": "x", "weight": float("nan"), "rule": "r"}]),
     "relaxed.0.weight"),
])
def test_answer_lies_are_faulty(body: dict[str, Any], field: str) -> None:
    assert field in reason(protocol.read_schedule_answer, request(), body, "dfw")


def test_answer_missing_keys() -> None:
    for key in ("placements", "dry_run"):
        body = answer()
        del body[key]
        assert key in reason(protocol.read_schedule_answer, request(), body, "dfw")
    body = answer()
    del body["placements"][0]["zone"]
    assert "placements.0.zone" in reason(protocol.read_schedule_answer, request(), body, "dfw")


def test_explain_depth_is_bounded() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(protocol.MAX_EXPLAIN_DEPTH + 5):
        node["x"] = {}
        node = node["x"]
    assert "explain" in reason(protocol.read_schedule_answer, request(), answer(explain=deep),
                               "dfw")


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.integers(0, 3), max_size=6), unplaced=st.lists(st.integers(0, 3),
                                                                        max_size=3),
       atomic=st.booleans())
def test_answer_consumers_property(picks: list[int], unplaced: list[int], atomic: bool
                                   ) -> None:
    """Accepted exactly when placed and unplaced are the asked consumers, once each
    (and, for an atomic request, all placed)."""
    req = request(2, atomic=atomic)
    body = answer(placements=[placement(C[i]) for i in picks],
                  unplaced=[C[i] for i in unplaced])
    together = picks + unplaced
    ok = sorted(together) == [0, 1] and not (atomic and unplaced)
    try:
        protocol.read_schedule_answer(req, body, "dfw")
    except Faulty:
        assert not ok
    else:
        assert ok


@settings(max_examples=150, deadline=None)
@given(vcpu=st.integers(-2, 5), mem=st.integers(-2, 600), split=st.booleans())
def test_answer_amounts_property(vcpu: int, mem: int, split: bool) -> None:
    """Accepted exactly when a placement's allocations add up to one instance's demand."""
    req = request(1)
    if split:
        allocs = {RP[0]: {"resources": {"VCPU": vcpu, "MEMORY_MB": mem}},
                  RP[1]: {"resources": {"VCPU": 1}}}
        ok = vcpu == 2 and mem == 512
    else:
        allocs = {RP[0]: {"resources": {"VCPU": vcpu, "MEMORY_MB": mem}}}
        ok = vcpu == 3 and mem == 512
    body = answer(1, placements=[placement(C[0], allocations=allocs)])
    try:
        protocol.read_schedule_answer(req, body, "dfw")
    except Faulty:
        assert not ok
    else:
        assert ok


@settings(max_examples=200, deadline=None)
@given(path=st.lists(st.sampled_from(["placements", 0, "allocations", RP[0], "resources",
                                      "VCPU", "zone", "score", "consumer_uuid", "unplaced",
                                      "zone_summary", "explain"]), min_size=1, max_size=5),
       value=_json)
def test_answer_any_mutation_is_accepted_or_faulty(path: list[Any], value: Any) -> None:
    """No value anywhere in an answer makes the reader raise anything but Faulty."""
    body = answer()
    node: Any = body
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[path[-1]] = value
    except (IndexError, TypeError):
        return
    with contextlib.suppress(Faulty):
        protocol.read_schedule_answer(request(), copy.deepcopy(body), "dfw")


def test_demand_sums_groups() -> None:
    assert protocol.demand(request()) == {"VCPU": 3, "MEMORY_MB": 512}


# -- claims, confirm, release, cancel --------------------------------------------------------

def claim(consumers: list[str], **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"claimed": consumers, "providers": [RP[0]],
                            "placements": [{"consumer_uuid": c, "zone": "dfw-r1"}
                                           for c in consumers]}
    body.update(over)
    return body


def test_claim_answer() -> None:
    assert protocol.read_claim_answer(C[:2], claim(C[:2])) == claim(C[:2])
    replay = claim(C[:2], replayed=True, zone_summary=summary())
    assert protocol.read_claim_answer(C[:2], replay) == replay
    assert "was not asked" in reason(protocol.read_claim_answer, C[:2], claim(C[:3]))
    assert "not exactly" in reason(protocol.read_claim_answer, C[:2], claim(C[:1]))
    assert "not exactly" in reason(protocol.read_claim_answer, C[:2],
                                   claim([C[0], C[0], C[1]]))
    assert "claimed" in reason(protocol.read_claim_answer, C[:2], claim([1, 2]))
    assert "placements.0.zone" in reason(protocol.read_claim_answer, C[:1],
                                         claim(C[:1], placements=[{"consumer_uuid": C[0]}]))


def test_confirm_release_cancel_answers() -> None:
    assert protocol.read_confirm_answer(C[:2], {"confirmed": [C[0]]}) == {"confirmed": [C[0]]}
    assert "was not asked" in reason(protocol.read_confirm_answer, C[:1],
                                     {"confirmed": [C[1]]})
    assert "confirmed" in reason(protocol.read_confirm_answer, C[:1], {"confirmed": "all"})
    assert protocol.read_release_answer(C[:2], {"released": []}) == {"released": []}
    assert "was not asked" in reason(protocol.read_release_answer, C[:1],
                                     {"released": [C[2]]})
    body = {"request_id": "r@global", "released": [C[0]], "forwarded": ["a"], "deferred": []}
    assert protocol.read_cancel_answer("r@global", body) == body
    assert "request_id" in reason(protocol.read_cancel_answer, "other", body)
    assert "forwarded" in reason(protocol.read_cancel_answer, "r@global",
                                 {**body, "forwarded": [1]})


# -- errors and registration -----------------------------------------------------------------

def test_error_body() -> None:
    body = {"errors": [{"status": 409, "title": "Conflict", "detail": "no room",
                        "code": "strato.no_valid_placement", "request_id": "req-1"}],
            "explain": {"summary": "VCPU exhausted"}}
    assert protocol.read_error(body) == body
    assert "errors" in reason(protocol.read_error, {"errors": []})
    assert "errors.0.status" in reason(protocol.read_error, {"errors": [{"status": "409"}]})
    assert "errors.0.status" in reason(protocol.read_error, {"errors": [{"status": 9000}]})
    assert "errors.0.detail" in reason(
        protocol.read_error, {"errors": [{"status": 409, "detail": "x" * 100_000}]})
    assert "not a JSON object" in reason(protocol.read_error, "<html>")


def test_registration() -> None:
    body = {"name": "dfw-r1", "url": "http://127.0.0.1:8001", "location_prefix": "dfw/room1",
            "tags": ["hipaa"], "credential": "secret"}
    assert protocol.read_registration(body) == body
    assert "name" in reason(protocol.read_registration, {**body, "name": "a/b"})
    assert "url" in reason(protocol.read_registration, {**body, "url": "x" * 2000})
    assert "surprise" in reason(protocol.read_registration, {**body, "surprise": 1})


def test_protocol_version_is_sent() -> None:
    from strato.zone.transport import HEADERS
    assert HEADERS["x-strato-zone-protocol"] == protocol.ZONE_PROTOCOL
