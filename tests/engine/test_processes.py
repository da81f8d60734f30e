"""Real server processes: freshness across processes, and claims under load."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.api import capacity, client, make_provider, usages
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

Q = "/allocation_candidates?resources=VCPU:1"


def _hosts(body: dict[str, Any]) -> set[str]:
    return {u for ar in body["allocation_requests"] for u in ar["allocations"]}


def _claim(c: httpx.Client, rp: str, amount: int) -> str:
    consumer = str(uuid.uuid4())
    r = c.put(f"/allocations/{consumer}", json={
        "allocations": {rp: {"resources": {"VCPU": amount}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert r.status_code == 204, r.text
    return consumer


@pytest.mark.postgres
def test_two_processes_see_each_others_writes(pg_db_url: str, tmp_path: Path) -> None:
    with ServerProcess(pg_db_url, log_path=tmp_path / "a.log") as a, \
            ServerProcess(pg_db_url, log_path=tmp_path / "b.log") as b, \
            client(a.url) as ca, client(b.url) as cb:
        # Both engines load their index before any provider exists.
        assert ca.get(Q).json()["allocation_requests"] == []
        assert cb.get(Q).json()["allocation_requests"] == []
        # A write through A is visible in B's very next answer...
        rp = make_provider(ca, "cn1", {"VCPU": {"total": 2}})
        assert _hosts(cb.get(Q).json()) == {rp}
        # ...and a claim through B in A's.
        consumer = _claim(cb, rp, 2)
        body = ca.get(Q).json()
        assert body["allocation_requests"] == []
        assert ca.get("/allocation_candidates?resources=VCPU:1&limit=1").json()[
            "allocation_requests"] == []
        assert cb.delete(f"/allocations/{consumer}").status_code == 204
        summary = ca.get(Q).json()["provider_summaries"][rp]
        assert summary["resources"]["VCPU"] == {"capacity": 2, "used": 0}
        # Traits and aggregates written through one are filters in the other.
        gen = ca.get(f"/resource_providers/{rp}").json()["generation"]
        r = ca.put(f"/resource_providers/{rp}/traits",
                   json={"traits": ["HW_CPU_X86_AVX2"], "resource_provider_generation": gen})
        assert r.status_code == 200, r.text
        assert _hosts(cb.get(Q + "&required=HW_CPU_X86_AVX2").json()) == {rp}
        assert _hosts(cb.get(Q + "&required=!HW_CPU_X86_AVX2").json()) == set()
        # A deleted provider disappears from the other process too.
        other = make_provider(cb, "cn2", {"VCPU": {"total": 4}})
        assert _hosts(ca.get(Q).json()) == {rp, other}
        assert cb.delete(f"/resource_providers/{other}").status_code == 204
        assert _hosts(ca.get(Q).json()) == {rp}


def test_candidates_never_exceed_free_capacity_under_16_claimers(
        sqlite_db_url: str, tmp_path: Path) -> None:
    with ServerProcess(sqlite_db_url, log_path=tmp_path / "s.log") as server, \
            client(server.url) as admin:
        hosts = [make_provider(admin, f"cn{i}", {"VCPU": {"total": 8}}) for i in range(6)]

        def worker(_: int) -> int:
            placed = 0
            with client(server.url) as c:
                for _attempt in range(12):
                    body = c.get("/allocation_candidates?resources=VCPU:2&limit=3").json()
                    for ar in body["allocation_requests"]:
                        for u, alloc in ar["allocations"].items():
                            res = body["provider_summaries"][u]["resources"]["VCPU"]
                            assert res["used"] + alloc["resources"]["VCPU"] <= res["capacity"]
                    for ar in body["allocation_requests"]:
                        consumer = str(uuid.uuid4())
                        r = c.put(f"/allocations/{consumer}", json={
                            "allocations": ar["allocations"], "project_id": "p",
                            "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"})
                        if r.status_code == 204:
                            placed += 1
                            break
                        assert r.status_code == 409, r.text
            return placed

        with ThreadPoolExecutor(16) as pool:
            placed = sum(pool.map(worker, range(16)))
        assert placed == 6 * 8 // 2  # every unit used exactly once, never more
        for h in hosts:
            assert usages(admin, h)["VCPU"] <= capacity(admin, h)["VCPU"]
        assert admin.get("/allocation_candidates?resources=VCPU:2").json()[
            "allocation_requests"] == []
