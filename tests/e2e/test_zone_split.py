"""One request across zones, with real server processes: a root over two cells
(dfw and ord, four 8-VCPU hosts each). The three requests a new user tried
before the split existed, a gang larger than the tree, and a gang whose
second cell goes dark while it claims (nothing held once the holds expire)."""

from __future__ import annotations

import asyncio
import signal
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strato.process import ServerProcess, free_port
from tests.e2e.test_zone_tree import children, wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow
HOLD_TTL = "2"


@pytest.fixture
def cells(tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    root = zone(tmp_path, "root", extra=["--hold-ttl", HOLD_TTL]).start()
    procs = {"root": root}
    try:
        for name in ("dfw", "ord"):
            procs[name] = zone(tmp_path, name, root, ["--location-prefix", name,
                                                      "--hold-ttl", HOLD_TTL]).start()
            with api.client(procs[name].url) as c:
                for i in range(4):
                    rp = api.make_provider(c, f"{name}-h{i}", {"VCPU": {"total": 8}})
                    r = c.put(f"/strato/v1/providers/{rp}/meta",
                              json={"location": f"{name}/room1/rack{i % 2}/h{i}",
                                    "tags": []})
                    assert r.status_code == 200, r.text
        with api.client(root.url) as c:
            wait_for(lambda: {k for k, v in children(c).items() if v.get("summary")}
                     == {"dfw", "ord"})
        yield procs
    finally:
        for p in procs.values():
            if p.proc and p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
            p.stop()


def req(n: int, **kw: Any) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(n)], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"VCPU": 8}}], **kw}


def where(answer: dict[str, Any]) -> Counter[str]:
    return Counter(p["zone"].split("/")[1] for p in answer["placements"])


def used(procs: dict[str, ServerProcess]) -> dict[str, int]:
    out = {}
    for name in ("dfw", "ord"):
        with api.client(procs[name].url) as c:
            s = c.get("/strato/v1/summary?fresh=true").json()
            out[name] = int(s["classes"].get("VCPU", {}).get("used", 0))
    return out


def test_the_three_requests_a_hierarchy_exists_for(cells: dict[str, ServerProcess]) -> None:
    with api.client(cells["root"].url) as c:
        # One instance per site.
        r = c.post("/strato/v1/schedule", json=req(
            2, group="web", constraints=[{"type": "anti_affinity", "level": "site"}]))
        assert r.status_code == 200, r.text
        assert where(r.json()) == {"dfw": 1, "ord": 1}
        # Six whole hosts, atomic, when each cell has three free.
        r = c.post("/strato/v1/schedule", json=req(6))
        assert r.status_code == 200, r.text
        assert sum(where(r.json()).values()) == 6 and len(where(r.json())) == 2
        assert used(cells) == {"dfw": 32, "ord": 32}
        # Nothing left: a further whole host is refused, nothing held.
        r = c.post("/strato/v1/schedule", json=req(2))
        assert r.status_code == 409, r.text
    assert used(cells) == {"dfw": 32, "ord": 32}


def test_atomic_false_places_eight_of_nine(cells: dict[str, ServerProcess]) -> None:
    with api.client(cells["root"].url) as c:
        body = req(9, atomic=False)
        r = c.post("/strato/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        assert where(r.json()) == {"dfw": 4, "ord": 4}
        assert len(r.json()["unplaced"]) == 1
    assert used(cells) == {"dfw": 32, "ord": 32}


def test_a_gang_larger_than_the_tree_holds_nothing(cells: dict[str, ServerProcess]) -> None:
    with api.client(cells["root"].url) as c:
        r = c.post("/strato/v1/schedule", json=req(9))
        assert r.status_code == 409, r.text
        assert "8 of 9" in r.text
    assert used(cells) == {"dfw": 0, "ord": 0}


class CuttingRelay:
    """TCP to a zone on loopback that goes dark (drops everything, both ways,
    new connections too) as soon as a held share passes through it: the share
    arrives and is held, its answer never does, until heal() (once only)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut = threading.Event()
        self.armed = True  # goes dark once only
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> CuttingRelay:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result(10)
        self.port = server.sockets[0].getsockname()[1]
        return self

    def heal(self) -> None:
        self.armed = False
        self.cut.clear()

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if self.cut.is_set():
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                       watch: bool) -> None:
            try:
                while data := await src.read(65536):
                    if self.cut.is_set():
                        break
                    dst.write(data)
                    await dst.drain()
                    if watch and self.armed and b'"hold_ttl"' in data:
                        self.cut.set()
            except OSError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_w, True), pipe(up_r, writer, False))


def test_a_gang_whose_cell_goes_dark_while_it_claims_leaves_nothing_held(
        tmp_path: Path) -> None:
    """ord's share arrives and is held, then ord is cut off: the root gives up
    on it, releases dfw's held share and refuses (503: part of the tree did
    not answer). ord's hold expires by itself after the TTL; nothing stays."""
    root = zone(tmp_path, "root", extra=["--hold-ttl", HOLD_TTL]).start()
    procs = {"root": root}
    relay: CuttingRelay | None = None
    try:
        for name in ("dfw", "ord"):
            extra = ["--location-prefix", name, "--hold-ttl", HOLD_TTL]
            if name == "ord":
                port = free_port()
                relay = CuttingRelay(port).start()
                extra += ["--advertise-url", f"http://127.0.0.1:{relay.port}"]
                procs[name] = zone(tmp_path, name, root, extra, port=port).start()
            else:
                procs[name] = zone(tmp_path, name, root, extra).start()
            with api.client(procs[name].url) as c:
                for i in range(4):
                    api.make_provider(c, f"{name}-h{i}", {"VCPU": {"total": 8}})
        assert relay is not None
        with api.client(root.url) as c:
            wait_for(lambda: {k for k, v in children(c).items() if v.get("summary")}
                     == {"dfw", "ord"})
            body = req(6, request_id=f"gang-{uuid.uuid4()}")
            r = c.post("/strato/v1/schedule", json=body)
            assert relay.cut.is_set(), "the share never reached ord"
            assert r.status_code == 503, r.text
            assert used(procs)["dfw"] == 0
            # ord held its share; the hold expires by itself (TTL 2 s).
            wait_for(lambda: used(procs)["ord"] == 0, timeout=30)
            relay.heal()
            # Healed: the same request id works again (503 was not stored).
            wait_for(lambda: children(c)["ord"]["health"]["healthy"], timeout=30)
            r = c.post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            assert sum(where(r.json()).values()) == 6
            assert sum(used(procs).values()) == 48
    finally:
        for p in procs.values():
            p.stop()
