"""A real `strato agent` process against a real `strato serve` process.

The agent's host facts come from a JSON facts file the test rewrites, so what
it reports does not depend on the machine running the tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from strato.cli import main as cli
from tests.helpers import api
from tests.helpers.server import ServerProcess, free_port

pytestmark = pytest.mark.slow

HOST = "6b0f6c49-3f0e-4d43-8c2e-2a8f1bb0c001"


class AgentProcess:
    """`python -m strato.cli.agent` in a child process, logging to a file."""

    def __init__(self, zone_url: str, tmp_path: Path, *extra: str) -> None:
        self.log_path = tmp_path / "agent.log"
        self.facts = tmp_path / "facts.json"
        self.cmd = [sys.executable, "-m", "strato.cli.agent", "--zone-url", zone_url,
                    "--uuid", HOST, "--name", "host1", "--facts-file", str(self.facts),
                    "--interval", "0.2", "--max-backoff", "0.4", "--timeout", "2", *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    def set_facts(self, vcpu: int = 8, memory_mb: int = 16384, disk_gb: int = 100,
                  **used: float) -> None:
        tmp = self.facts.with_suffix(".tmp")
        tmp.write_text(json.dumps({"vcpu": vcpu, "memory_mb": memory_mb, "disk_gb": disk_gb,
                                   "used": {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0, **used}}))
        os.replace(tmp, self.facts)  # atomic: the agent never reads half a file

    def start(self) -> AgentProcess:
        out = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=out)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


def wait_for(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError, AssertionError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def inventory(c: httpx.Client) -> dict[str, dict[str, Any]]:
    r = c.get(f"/resource_providers/{HOST}/inventories")
    return dict(r.json()["inventories"]) if r.status_code == 200 else {}


def meta(c: httpx.Client) -> dict[str, Any]:
    return dict(c.get(f"/strato/v1/providers/{HOST}/meta").json())


@pytest.fixture
def server(sqlite_db_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(sqlite_db_url, extra=["--stale-after", "1"],
                      log_path=tmp_path / "server.log").start()
    yield s
    s.stop()


@pytest.fixture
def agent(server: ServerProcess, tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(server.url, tmp_path, "--location", "host1.rack1.room1.dfw",
                     "--tag", "hipaa", "--reserve", "MEMORY_MB=512")
    a.set_facts()
    yield a
    a.stop()


def test_registers_and_follows_inventory_changes(server: ServerProcess,
                                                  agent: AgentProcess) -> None:
    agent.start()
    with api.client(server.url) as c:
        wait_for("registration", lambda: inventory(c).get("VCPU", {}).get("total") == 8)
        assert c.get(f"/resource_providers/{HOST}").json()["name"] == "host1"
        inv = inventory(c)
        assert inv["MEMORY_MB"] == {"total": 16384, "reserved": 512, "min_unit": 1,
                                    "max_unit": 16384, "step_size": 1,
                                    "allocation_ratio": 1.0}
        m = meta(c)
        assert (m["location"], m["tags"], m["heartbeat"]) == (
            "dfw/room1/rack1/host1", ["hipaa"], True)
        gen = c.get(f"/resource_providers/{HOST}").json()["generation"]
        time.sleep(0.6)  # a few steady intervals: heartbeats only, no writes
        assert c.get(f"/resource_providers/{HOST}").json()["generation"] == gen
        agent.set_facts(vcpu=16, disk_gb=80)
        wait_for("new inventory", lambda: inventory(c)["VCPU"]["total"] == 16
                 and inventory(c)["DISK_GB"]["total"] == 80)


def test_external_usage_is_reserved_and_shrinking_keeps_allocations(
        server: ServerProcess, agent: AgentProcess) -> None:
    agent.start()
    with api.client(server.url) as c:
        wait_for("registration", lambda: inventory(c).get("MEMORY_MB"))
        consumer = str(uuidlib.uuid4())
        r = c.put(f"/allocations/{consumer}", json={
            "allocations": {HOST: {"resources": {"MEMORY_MB": 8192, "VCPU": 2}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE"})
        assert r.status_code == 204, r.text
        # The host sees Strato's 8 GiB workload plus 3000 MiB that Strato did not
        # place: only the latter (rounded up to 256 MiB) becomes reserved.
        agent.set_facts(MEMORY_MB=8192 + 3000, VCPU=2)
        wait_for("external usage reserved",
                 lambda: inventory(c)["MEMORY_MB"]["reserved"] == 512 + 3072)
        assert inventory(c)["VCPU"]["reserved"] == 0
        # The host loses memory: capacity falls below what is allocated. The zone
        # takes the report, the allocation stays, and the agent says so.
        agent.set_facts(memory_mb=8192, MEMORY_MB=8192)
        wait_for("shrunk inventory", lambda: inventory(c)["MEMORY_MB"]["total"] == 8192)
        assert api.usages(c, HOST)["MEMORY_MB"] == 8192
        assert c.get(f"/allocations/{consumer}").json()["allocations"][HOST]["resources"] == {
            "MEMORY_MB": 8192, "VCPU": 2}
        wait_for("log line", lambda: "MEMORY_MB shrank below current usage" in agent.log())


def test_stopped_agent_goes_stale_and_recovers(server: ServerProcess,
                                               agent: AgentProcess) -> None:
    agent.start()
    with api.client(server.url) as c:
        r = c.post("/resource_providers", json={"name": "api-only"})
        api_only = r.json()["uuid"]
        wait_for("first report", lambda: meta(c)["heartbeat"])
        assert meta(c)["stale"] is False
        assert agent.stop() == 0
        stale = wait_for("stale", lambda: c.get("/strato/v1/providers?stale=true")
                         .json()["providers"], timeout=5)
        assert [p["uuid"] for p in stale] == [HOST]  # never the provider without an agent
        assert stale[0]["stale_reason"].startswith("stale: no report for")
        assert api_only not in {p["uuid"] for p in stale}
        shown = CliRunner().invoke(cli.app, ["providers", "--stale", "--zone-url", server.url],
                                   env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        assert "host1" in shown.output and "stale: no report for" in shown.output
        assert "api-only" not in shown.output
        agent.start()
        wait_for("recovery", lambda: meta(c)["stale"] is False)
        assert c.get("/strato/v1/providers?stale=true").json()["providers"] == []


def test_server_restart_during_reporting(sqlite_db_url: str, tmp_path: Path) -> None:
    port = free_port()
    first = ServerProcess(sqlite_db_url, port=port, log_path=tmp_path / "s1.log").start()
    agent = AgentProcess(first.url, tmp_path)
    agent.set_facts()
    agent.start()
    try:
        with api.client(first.url) as c:
            wait_for("registration", lambda: inventory(c).get("VCPU", {}).get("total") == 8)
        first.kill()  # a crash, mid-stream
        agent.set_facts(vcpu=12)  # the host changes while the zone is away
        time.sleep(1.0)
        assert agent.alive()
        assert "report failed" in agent.log()
        # The zone comes back on the same database: the agent catches up.
        with ServerProcess(sqlite_db_url, port=port, log_path=tmp_path / "s2.log") as again, \
                api.client(again.url) as c:
            wait_for("catch up", lambda: inventory(c)["VCPU"]["total"] == 12)
            assert meta(c)["stale"] is False
        # It comes back on an empty database: the agent registers again.
        empty = f"sqlite:///{tmp_path / 'empty.db'}"
        with ServerProcess(empty, port=port, log_path=tmp_path / "s3.log") as fresh, \
                api.client(fresh.url) as c:
            wait_for("re-registration", lambda: inventory(c).get("VCPU", {}).get("total") == 12)
        assert agent.alive()
    finally:
        assert agent.stop() in (0, 1)
        first.stop()


def test_once_reports_and_exits(server: ServerProcess, agent: AgentProcess,
                                tmp_path: Path) -> None:
    agent.cmd.append("--once")
    agent.start()
    assert agent.proc is not None and agent.proc.wait(30) == 0
    with api.client(server.url) as c:
        assert inventory(c)["VCPU"]["total"] == 8
    down = AgentProcess(f"http://127.0.0.1:{free_port()}", tmp_path / "x", "--once")
    down.log_path.parent.mkdir()
    down.set_facts()
    down.start()
    assert down.proc is not None and down.proc.wait(30) == 1
