"""The schedule request model: what it accepts, and the field every refusal names."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from strato.model.location import location_matches, location_pattern
from strato.model.schedule import ScheduleRequest


def body(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"consumers": [str(uuid.uuid4())], "project_id": "p",
                               "user_id": "u", "groups": [{"resources": {"VCPU": 1}}]}
    base.update(kw)
    return base


def test_minimal_request_and_defaults() -> None:
    r = ScheduleRequest.model_validate(body())
    assert r.atomic and not r.dry_run and r.weigher.name == "spread"
    assert r.suffixed_groups()[0][0] == ""


def test_a_rules_level_defaults_to_host_as_docs_schedule_says() -> None:
    r = ScheduleRequest.model_validate(body(group="g", constraints=[
        {"type": "anti_affinity"}, {"type": "spread"}]))
    assert [c.level for c in r.constraints] == ["host", "host"]  # type: ignore[union-attr]
    docs = (Path(__file__).parents[2] / "docs" / "schedule.md").read_text()
    levels = docs.split("#### Affinity and anti-affinity: levels", 1)[1]
    assert "has a `level` (default `host`" in " ".join(levels.split())


@pytest.mark.parametrize(("patch", "field"), [
    ({"consumers": []}, "consumers"),
    ({"consumers": ["nope"]}, "consumers"),
    ({"groups": [{"resources": {}}]}, "groups"),
    ({"groups": [{"resources": {"VCPU": 0}}]}, "groups"),
    ({"groups": [{"resources": {"vcpu": 1}}]}, "groups"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": ["!"]}]}, "required"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": ["in:"]}]}, "required"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": ["in:A,"]}]}, "required"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": ["!!A"]}]}, "required"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": [""]}]}, "required"),
    ({"groups": [{"resources": {"VCPU": 1}, "required": ["in:!A,B"]}]}, "required"),
    ({"bogus": 1}, "bogus"),
    ({"constraints": [{"type": "location", "pattern": "a//b"}]}, "constraints"),
    ({"constraints": [{"type": "tags"}]}, "constraints"),
    ({"constraints": [{"type": "anti_affinity", "level": "rack"}]}, "anti_affinity"),
    ({"constraints": [{"type": "nope"}]}, "constraints"),
    ({"constraints": [{"type": "tags", "required": ["x"], "weight": 0}]}, "weight"),
    ({"groups": [{"resources": {"VCPU": 1}}, {"resources": {"VCPU": 1}},
                 {"resources": {"VCPU": 1}}]}, "group_policy"),
])
def test_bad_requests_name_the_field(patch: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ScheduleRequest.model_validate(body(**patch))
    assert field in str(exc.value)


def test_required_takes_traits_forbidden_traits_and_any_of() -> None:
    r = ScheduleRequest.model_validate(body(groups=[{
        "resources": {"VCPU": 1}, "required": ["HW_CPU_X86_AVX2", "!CUSTOM_X", "in:A,B_2"]}]))
    assert r.groups[0].required == ["HW_CPU_X86_AVX2", "!CUSTOM_X", "in:A,B_2"]


def test_location_patterns() -> None:
    loc = ("dfw", "room1", "rack1", "machine1")
    assert location_matches(location_pattern("dfw/room1/*"), loc)
    assert location_matches(location_pattern("dfw/room1"), loc)
    assert location_matches(location_pattern("dfw/*/rack1"), loc)
    assert location_matches(location_pattern("dfw/room*"), loc)
    assert not location_matches(location_pattern("ord/*"), loc)
    assert location_matches(location_pattern("machine1.rack1.room1.dfw"), loc)
    assert not location_matches(location_pattern("rack1.room1.dfw"), loc)
    assert not location_matches(location_pattern("dfw/room1/rack1/machine1/x"), loc)
    assert not location_matches(location_pattern("dfw"), None)


@pytest.mark.parametrize("rid", ["a\x00b", "line\nbreak", "tab\there", "\x7f", ""])
def test_a_request_id_is_printable_text(rid: str) -> None:
    """No control characters (PostgreSQL's text refuses NUL; a log line stays
    one line); any other text, unicode included, is an id."""
    with pytest.raises(ValidationError) as exc:
        ScheduleRequest.model_validate(body(request_id=rid))
    assert "request_id" in str(exc.value)
    for ok in ("retry-1", "é ✓ 名前", "part@zone#0a1b2c3d"):
        assert ScheduleRequest.model_validate(body(request_id=ok)).request_id == ok
