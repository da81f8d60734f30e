"""`strato release`: against a real server process, a consumer placed and
released, then the exit codes for nothing held, bad input and no server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strato.process import free_port
from tests.cli.test_schedule_cli import invoke
from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def server(sqlite_db_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(sqlite_db_url, extra=["--auth-token", "s3cret"],
                       log_path=tmp_path / "server.log") as s:
        yield s


def test_release(server: ServerProcess) -> None:
    env = {"STRATO_AUTH_TOKEN": "s3cret"}
    with httpx.Client(base_url=server.url, headers={**api.HEADERS, "x-auth-token": "s3cret"},
                      timeout=30) as c:
        api.make_provider(c, "h1", {"VCPU": {"total": 4}})
        consumer = str(uuid.uuid4())
        r = c.post("/strato/v1/schedule", json={
            "consumers": [consumer], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 2}}]})
        assert r.status_code == 200, r.text
        result = invoke("release", consumer, "--url", server.url, env=env)
        assert result.exit_code == 0, result.output
        assert f"released {consumer}" in result.output
        assert c.get(f"/allocations/{consumer}").json()["allocations"] == {}
        result = invoke("release", consumer, "--url", server.url, env=env)
        assert result.exit_code == 1 and "holds nothing" in result.output
    result = invoke("release", "not-a-uuid", "--url", server.url, env=env)
    assert result.exit_code == 2
    result = invoke("release", str(uuid.uuid4()), "--url", server.url, "--token", "wrong")
    assert result.exit_code == 1  # refused, as for every command (2 is bad input)
    assert "401" in result.output and "--auth-token there" in result.output, result.output
    # Asked with the wrong token, `strato tree` says so (exit 1): the zone was reached.
    result = invoke("tree", "--url", server.url, "--token", "wrong")
    assert result.exit_code == 1, result.output
    assert "HTTP 401" in result.output and "--token or STRATO_AUTH_TOKEN" in result.output
    assert "could not be reached" not in result.output
    result = invoke("release", str(uuid.uuid4()), "--url",
                    f"http://127.0.0.1:{free_port()}", env=env)
    assert result.exit_code == 3
