"""A server killed with SIGKILL mid-stream keeps every acknowledged claim, whole."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow


def test_sigkill_keeps_acknowledged_claims(db_url: str, tmp_path: Path) -> None:
    server = ServerProcess(db_url, log_path=tmp_path / "server.log").start()
    try:
        with api.client(server.url) as c:
            a = api.make_provider(c, "a", {"VCPU": {"total": 100000}})
            b = api.make_provider(c, "b", {"DISK_GB": {"total": 100000}})
        acked: list[str] = []
        sent: list[str] = []
        stop = threading.Event()

        def stream() -> None:
            with api.client(server.url, timeout=5) as c:
                while not stop.is_set():
                    consumer = str(uuid.uuid4())
                    sent.append(consumer)
                    # Each claim spans two providers: half-written would show one.
                    body = {"allocations": {a: {"resources": {"VCPU": 1}},
                                            b: {"resources": {"DISK_GB": 2}}},
                            "project_id": "p", "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"}
                    try:
                        r = c.put(f"/allocations/{consumer}", json=body)
                    except httpx.HTTPError:
                        return
                    if r.status_code == 204:
                        acked.append(consumer)

        threads = [threading.Thread(target=stream) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 150 and time.monotonic() < deadline:
            time.sleep(0.05)
        server.kill()
        stop.set()
        for t in threads:
            t.join(10)
        assert len(acked) >= 150
    finally:
        server.stop()

    with ServerProcess(db_url, log_path=tmp_path / "server2.log") as again, \
            api.client(again.url) as c:
        for consumer in acked:
            got = c.get(f"/allocations/{consumer}").json()["allocations"]
            assert got == {a: {"generation": got[a]["generation"], "resources": {"VCPU": 1}},
                           b: {"generation": got[b]["generation"], "resources": {"DISK_GB": 2}}}
        present = 0
        for consumer in sent:
            got = c.get(f"/allocations/{consumer}").json()["allocations"]
            assert set(got) in (set(), {a, b}), f"half-written consumer {consumer}: {got}"
            present += bool(got)
        assert api.usages(c, a)["VCPU"] == present
        assert api.usages(c, b)["DISK_GB"] == 2 * present
