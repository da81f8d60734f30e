"""`strato serve --workers 2` (PostgreSQL): a scrape, whichever worker answers
it, counts every worker's requests (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from strato.process import free_port
from strato.store.children import upsert_child
from strato.store.db import Database
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
        # The server is ready once one worker answers; the other may still be
        # starting. A new connection each: once both are up, they take turns.
        assert len(_pids(server.url)) == 2, "one worker answered everything for 60 s"
        for _ in range(40):
            with httpx.Client(base_url=server.url, headers=H, timeout=30) as c:
                r = c.post("/strato/v1/schedule", json={
                    "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 1}}]})
                assert r.status_code == 200, r.text
        # At least ten scrapes, and until both workers answered one.
        seen: set[int] = set()
        scrapes = 0
        deadline = time.monotonic() + 60
        while scrapes < 10 or len(seen) < 2:
            assert time.monotonic() < deadline, f"every scrape reached the same worker: {seen}"
            scrapes += 1
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


def _pids(url: str, seconds: float = 60.0) -> set[int]:
    """Worker pids answering /healthz on new connections, until two did or
    `seconds` passed. A connection reset while the second worker starts (one
    in about twenty runs under a full suite's load) is asked again: what
    this test checks is the metrics of two workers once both serve."""
    pids: set[int] = set()
    deadline = time.monotonic() + seconds
    while len(pids) < 2 and time.monotonic() < deadline:
        try:
            with httpx.Client(base_url=url, timeout=30) as c:
                pids.add(c.get("/healthz").json()["pid"])
        except httpx.TransportError:
            pass
        if len(pids) < 2:
            time.sleep(0.05)
    return pids


def test_a_zone_with_children_runs_one_worker(pg_db_url: str, tmp_path: Path) -> None:
    # Its in-flight consumer and loop checks are per process: two workers
    # could each place one consumer in a different child.
    with ServerProcess(pg_db_url, log_path=tmp_path / "server.log",
                       extra=["--workers", "2"]) as server, \
            httpx.Client(base_url=server.url, headers=H, timeout=30) as c:
        r = c.post("/strato/v1/children", json={"name": "dfw",
                                                "url": "http://127.0.0.1:9"})
        assert r.status_code == 409, r.text
        assert "--workers 1" in r.json()["errors"][0]["detail"]
        assert c.get("/strato/v1/children").json()["children"] == []
    # A database that has children already: refused at start, saying why.
    db = Database(pg_db_url)
    try:
        with db.write() as conn:
            upsert_child(conn, "dfw", "http://127.0.0.1:9", None, [], None)
    finally:
        db.dispose()
    done = subprocess.run(
        [sys.executable, "-m", "strato.cli.main", "serve", "--db", pg_db_url, "--port",
         str(free_port()), "--workers", "2"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "child zones (dfw)" in done.stdout + done.stderr
