"""Server logs: timestamps, levels and the request id on every line; JSON lines
with --log-format json; access lines on by default."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from strato.process import ServerProcess
from tests.helpers import api

pytestmark = pytest.mark.slow


def test_json_logs_carry_the_request_id(sqlite_db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ServerProcess(sqlite_db_url, extra=["--log-format", "json", "--log-level", "info"],
                       log_path=log) as s:
        with httpx.Client(base_url=s.url, headers={**api.HEADERS,
                                                   "x-openstack-request-id": "req-mine"}) as c:
            r = c.get("/resource_providers")
            assert r.status_code == 200
            rid = r.headers["x-openstack-request-id"]
        time.sleep(0.3)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert lines, log.read_text()[:500]
    assert all({"time", "level", "logger", "request_id", "message"} <= set(x) for x in lines)
    access = [x for x in lines if x["logger"] == "uvicorn.access"]
    assert any(x["request_id"] == rid and x["global_request_id"] == "req-mine"
               and "/resource_providers" in x["message"] for x in access), access


def test_text_logs_have_timestamps(sqlite_db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with ServerProcess(sqlite_db_url, log_path=log) as s:
        httpx.get(s.url + "/healthz")
        time.sleep(0.3)
    access = [x for x in log.read_text().splitlines() if "uvicorn.access" in x]
    assert access and access[-1][:4].isdigit() and " INFO uvicorn.access [req-" in access[-1]
