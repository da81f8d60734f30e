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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from strato.process import ServerProcess, free_port
from tests.e2e.test_zone_tree import children, hosts, stop_all, wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow
HOLD_TTL = "2"


@contextmanager
def over_two_cells(tmp_path: Path, root: ServerProcess,
                   extra: list[str] | None = None) -> Iterator[dict[str, ServerProcess]]:
    """`root` (started) over cells dfw and ord, four 8-VCPU hosts each, once
    the root's summaries of them hold the hosts; every process stopped after."""
    procs = {"root": root}
    try:
        _two_cells(tmp_path, procs, extra)
        yield procs
    finally:
        stop_all(procs)


def _two_cells(tmp_path: Path, procs: dict[str, ServerProcess],
               extra: list[str] | None) -> None:
    root = procs["root"]
    for name in ("dfw", "ord"):
        procs[name] = zone(tmp_path, name, root,
                           ["--location-prefix", name, *(extra or [])]).start()
        hosts(procs[name], name, [f"{name}/room1/rack{i % 2}/h{i}" for i in range(4)])
    with api.client(root.url) as c:
        # Summaries that hold the hosts (one taken as a cell registered
        # would show an empty cell, and the root prunes what cannot fit).
        wait_for(lambda: {k for k, v in children(c).items()
                          if (v.get("summary") or {}).get("providers") == 4}
                 == {"dfw", "ord"})


@pytest.fixture
def cells(tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    with over_two_cells(tmp_path, zone(tmp_path, "root", extra=["--hold-ttl", HOLD_TTL]).start(),
                        ["--hold-ttl", HOLD_TTL]) as procs:
        yield procs


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

    def __init__(self, target_port: int, on_share: Callable[[], None] | None = None,
                 trigger: bytes = b'"hold_ttl"') -> None:
        """`on_share`: done instead of going dark, when `trigger` is in what the
        parent sends, before it is passed on."""
        self.target_port = target_port
        self.on_share = on_share
        self.trigger = trigger
        self.seen = threading.Event()
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
                    hit = watch and self.armed and self.trigger in data
                    if hit and self.on_share is not None:
                        self.armed = False
                        self.seen.set()
                        self.on_share()
                    dst.write(data)
                    await dst.drain()
                    if hit and self.on_share is None:
                        self.seen.set()
                        self.cut.set()
            except OSError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_w, True), pipe(up_r, writer, False))


def start_cells(tmp_path: Path, procs: dict[str, ServerProcess], relay: CuttingRelay,
                port: int) -> None:
    """dfw and ord under procs["root"], four 8-VCPU hosts each; the root
    reaches ord (on `port`) through `relay`."""
    for name in ("dfw", "ord"):
        extra = ["--location-prefix", name, "--hold-ttl", HOLD_TTL]
        if name == "ord":
            extra += ["--advertise-url", f"http://127.0.0.1:{relay.port}"]
            procs[name] = zone(tmp_path, name, procs["root"], extra, port=port).start()
        else:
            procs[name] = zone(tmp_path, name, procs["root"], extra).start()
        with api.client(procs[name].url) as c:
            for i in range(4):
                api.make_provider(c, f"{name}-h{i}", {"VCPU": {"total": 8}})


def test_a_gang_whose_cell_goes_dark_while_it_claims_leaves_nothing_held(
        tmp_path: Path) -> None:
    """ord's share arrives and is held, then ord is cut off: the root gives up
    on it, releases dfw's held share and refuses (503: part of the tree did
    not answer). ord's hold expires by itself after the TTL; nothing stays."""
    root = zone(tmp_path, "root", extra=["--hold-ttl", HOLD_TTL]).start()
    procs = {"root": root}
    try:
        port = free_port()
        relay = CuttingRelay(port).start()
        start_cells(tmp_path, procs, relay, port)
        with api.client(root.url) as c:
            # Summaries that hold the hosts (one taken as a cell registered
            # would show an empty cell, and the root prunes what cannot fit).
            wait_for(lambda: {k for k, v in children(c).items()
                              if (v.get("summary") or {}).get("providers") == 4}
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


def test_a_gang_whose_cell_is_frozen_while_it_claims_leaves_nothing_held(
        tmp_path: Path) -> None:
    """As above, but ord is paused (SIGSTOP) after its share is held, as the
    root's confirm is about to reach it, and resumed after the hold's TTL: the
    root gave up and undid dfw's share; ord, resumed, neither keeps its hold
    nor confirms it for the expired request."""
    root = zone(tmp_path, "root", extra=["--hold-ttl", HOLD_TTL]).start()
    procs = {"root": root}
    frozen = threading.Event()

    def freeze() -> None:
        proc = procs["ord"].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        frozen.set()
    try:
        port = free_port()
        relay = CuttingRelay(port, on_share=freeze,
                             trigger=b"/strato/v1/claims/confirm").start()
        start_cells(tmp_path, procs, relay, port)
        with api.client(root.url, timeout=60) as c:
            # Summaries that hold the hosts (one taken as a cell registered
            # would show an empty cell, and the root prunes what cannot fit).
            wait_for(lambda: {k for k, v in children(c).items()
                              if (v.get("summary") or {}).get("providers") == 4}
                     == {"dfw", "ord"})
            body = req(6, request_id=f"gang-{uuid.uuid4()}")
            r = c.post("/strato/v1/schedule", json=body)
            assert frozen.wait(10), "the confirm never reached ord"
            assert r.status_code == 503, r.text
            with api.client(procs["dfw"].url) as d:  # (ord cannot answer: paused)
                s = d.get("/strato/v1/summary?fresh=true").json()
                assert int(s["classes"].get("VCPU", {}).get("used", 0)) == 0
            threading.Event().wait(float(HOLD_TTL) + 1)  # the hold's TTL passes, frozen
            proc = procs["ord"].proc
            assert proc is not None
            proc.send_signal(signal.SIGCONT)
            wait_for(lambda: used(procs)["ord"] == 0, timeout=30)
            # And it stays so: nothing acts on the expired request later.
            threading.Event().wait(3)
            assert used(procs) == {"dfw": 0, "ord": 0}
            wait_for(lambda: children(c)["ord"]["health"]["healthy"], timeout=30)
            r = c.post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            assert sum(used(procs).values()) == 48
    finally:
        stop_all(procs)


def test_zone_level_rules_and_topology_spread(cells: dict[str, ServerProcess]) -> None:
    small = [{"resources": {"VCPU": 2}}]
    with api.client(cells["root"].url) as c:
        # One per child zone; three cannot be.
        r = c.post("/strato/v1/schedule", json=req(
            2, group="db", constraints=[{"type": "anti_affinity", "level": "zone"}]))
        assert r.status_code == 200, r.text
        assert where(r.json()) == {"dfw": 1, "ord": 1}
        r = c.post("/strato/v1/schedule", json=req(
            3, group="db2", constraints=[{"type": "anti_affinity", "level": "zone"}]))
        assert r.status_code == 409, r.text
        assert ("anti_affinity db2@zone: 3 instances need 3 zones apart, and the children "
                "that could take one are in 2 zone(s)") in r.text, r.text[:1500]
        before = used(cells)
        # Even over the sites: 4 instances, skew 1.
        r = c.post("/strato/v1/schedule", json={**req(4, group="web"), "groups": small,
                                                "constraints": [{"type": "spread",
                                                                 "level": "site",
                                                                 "max_skew": 1}]})
        assert r.status_code == 200, r.text
        assert where(r.json()) == {"dfw": 2, "ord": 2}
        # At most one per site: three are refused whole, or two placed.
        rule = [{"type": "spread", "level": "site", "max_per_domain": 1}]
        r = c.post("/strato/v1/schedule", json={**req(3, group="one"), "groups": small,
                                                "constraints": rule})
        assert r.status_code == 409, r.text
        after = used(cells)
        assert after == {k: before[k] + 4 for k in before}
        r = c.post("/strato/v1/schedule", json={**req(3, group="one2", atomic=False),
                                                "groups": small, "constraints": rule})
        assert r.status_code == 200, r.text
        assert where(r.json()) == {"dfw": 1, "ord": 1}
        assert len(r.json()["unplaced"]) == 1
