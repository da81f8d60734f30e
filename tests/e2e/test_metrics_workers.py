"""`strato serve --workers 2` (PostgreSQL): a scrape, whichever worker answers
it, counts every worker's requests (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from tests.api.test_health import value
from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
H = {"x-auth-token": "admin"}


def test_metrics_are_summed_over_the_workers(pg_db_url: str, tmp_path: Path) -> None:
    with ServerProcess(pg_db_url, log_path=tmp_path / "server.log",
                       extra=["--workers", "2"]) as server:
        with api.client(server.url) as c:
            api.make_provider(c, "h", {"VCPU": {"total": 1000}})
        pids = set()
        for _ in range(40):  # a new connection each: the workers take turns
            with httpx.Client(base_url=server.url, headers=H, timeout=30) as c:
                pids.add(c.get("/healthz").json()["pid"])
                r = c.post("/strato/v1/schedule", json={
                    "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 1}}]})
                assert r.status_code == 200, r.text
        assert len(pids) == 2, f"one worker answered everything: {pids}"
        seen = set()
        for _ in range(10):
            with httpx.Client(base_url=server.url, timeout=30) as c:
                seen.add(c.get("/healthz").json()["pid"])
                text = c.get("/metrics").text
            assert value(text, "strato_schedule_attempts_total", result="placed") == 40
            assert value(text, "strato_placements_total") == 40
            assert value(text, "strato_claim_duration_seconds_count") == 40
            assert value(text, "strato_http_requests_total", method="POST",
                         route="/strato/v1/schedule", status="200") == 40
            assert text.count("# TYPE strato_schedule_attempts_total") <= 1
            assert value(text, "strato_engine_providers") == 1
        assert len(seen) == 2, "every scrape reached the same worker"
