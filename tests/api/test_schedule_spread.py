"""Topology spread (`type: spread`): instances even across the domains of a
level within `max_skew`, at most `max_per_domain` in one, hard or soft, with
earlier members of the group counted."""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastapi.testclient import TestClient

from tests.api.test_schedule import rack_hosts, req, schedule  # noqa: F401 (fixture)


def racks(answer: dict[str, Any]) -> Counter[str]:
    return Counter("/".join(p["location"].split("/")[:3]) for p in answer["placements"])


def sites(answer: dict[str, Any]) -> Counter[str]:
    return Counter(p["location"].split("/")[0] for p in answer["placements"])


def spread(level: str, **kw: Any) -> list[dict[str, Any]]:
    return [{"type": "spread", "level": level, **kw}]


def test_spread_is_even_within_the_skew(client: TestClient,
                                        rack_hosts: dict[str, str]) -> None:  # noqa: F811
    got = schedule(client, req(8, constraints=spread("rack")))
    assert sorted(racks(got).values()) == [2, 2, 2, 2]
    got = schedule(client, req(6, constraints=spread("site")))
    assert sorted(sites(got).values()) == [3, 3]


def test_max_per_domain_is_a_cap(client: TestClient,
                                 rack_hosts: dict[str, str]) -> None:  # noqa: F811
    schedule(client, req(5, constraints=spread("rack", max_per_domain=1)), 409)
    got = schedule(client, req(4, constraints=spread("rack", max_per_domain=1)))
    assert sorted(racks(got).values()) == [1, 1, 1, 1]
    # Soft: relaxed, reported.
    got = schedule(client, req(5, constraints=spread("rack", max_per_domain=1, hard=False)))
    assert len(got["placements"]) == 5
    assert [r["type"] for r in got["relaxed"]] == ["spread"]


def test_earlier_members_of_the_group_count(client: TestClient,
                                            rack_hosts: dict[str, str]) -> None:  # noqa: F811
    first = schedule(client, req(2, group="web", constraints=spread("site")))
    assert sorted(sites(first).values()) == [1, 1]
    got = schedule(client, req(2, group="web", constraints=spread("site", max_per_domain=2)))
    assert sorted(sites(got).values()) == [1, 1]
    schedule(client, req(1, group="web", constraints=spread("site", max_per_domain=2)), 409)


def test_spread_needs_no_group_and_its_fields_are_checked(client: TestClient) -> None:
    r = client.post("/strato/v1/schedule", json=req(
        2, constraints=[{"type": "anti_affinity", "level": "rack", "max_skew": 2}], group="g"))
    assert r.status_code == 400 and "max_skew" in r.text
    r = client.post("/strato/v1/schedule", json=req(
        2, constraints=[{"type": "spread", "level": "rack", "max_skew": 0}]))
    assert r.status_code == 400 and "max_skew" in r.text


def _refusal(client: TestClient, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    r = client.post("/strato/v1/schedule", json={**body, "explain": True})
    assert r.status_code == 409, r.text
    err = r.json()["errors"][0]
    return err["detail"], err.get("explain") or {}


def test_why_nothing_names_what_the_instances_need_together(
        client: TestClient, rack_hosts: dict[str, str]) -> None:  # noqa: F811
    # Every provider left fits one instance: the cause is the rule that needs
    # more racks than they are in, not the location rule that left out four.
    detail, _ = _refusal(client, req(3, group="web", constraints=[
        {"type": "location", "pattern": "dfw/*"}, {"type": "anti_affinity", "level": "rack"}]))
    assert detail.split(": ", 1)[1].startswith(
        "anti_affinity web@rack: 3 instances need 3 racks apart, and the providers that fit "
        "are in 2 rack(s); left out: location dfw/*: 4 providers"), detail
    detail, _ = _refusal(client, req(5, constraints=spread("rack", max_per_domain=1)))
    assert "at most 1 per rack, and the 4 rack(s) the providers that fit are in take 4 " \
        "more" in detail, detail
    assert "every provider passed the filters" not in detail
    detail, _ = _refusal(client, req(3, vcpu=6, group="db", constraints=[
        {"type": "affinity", "level": "rack"}]))
    assert "no single rack among the 4 the providers that fit are in has room for all 3" \
        in detail, detail
    detail, _ = _refusal(client, req(17, vcpu=4))
    assert "the 8 host(s) that fit one instance have room for fewer than all 17 instances " \
        "together" in detail, detail
    # A filter that leaves nothing is still the cause.
    detail, _ = _refusal(client, req(1, vcpu=400))
    assert detail.endswith("VCPU: short of 400: 8 providers"), detail
