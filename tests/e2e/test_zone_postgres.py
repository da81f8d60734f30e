"""A routing zone on PostgreSQL (a big zone's database) over two SQLite cells,
real processes: the request ledger's promises hold there as on SQLite.
Duplicates sent at once are placed once, a split request sent several times
at once is placed once across both cells, and its cancel leaves nothing held.
On PostgreSQL the reservation's insert waits for a concurrent transaction
holding the same id, where SQLite serialises every writer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from strato.process import ServerProcess, free_port
from tests.chaos.cluster import _provider
from tests.e2e.test_zone_faults import HoldingRelay, until_not_503
from tests.e2e.test_zone_split import over_two_cells
from tests.e2e.test_zone_tree import TIMING, children, stop_all, wait_for, zone
from tests.helpers import api

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def pg_tree(pg_db_url: str, tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    root = ServerProcess(pg_db_url, extra=["--zone", "root", *TIMING],
                         log_path=tmp_path / "root.log")
    with over_two_cells(tmp_path, root.start()) as procs:
        yield procs


def req(n: int, **kw: Any) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(n)], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"VCPU": 8}}], **kw}


def held(procs: dict[str, ServerProcess], consumer: str) -> list[str]:
    """The cells whose own store holds allocations of `consumer`."""
    out = []
    for name in ("dfw", "ord"):
        with api.client(procs[name].url) as c:
            r = c.get(f"/allocations/{consumer}")
            assert r.status_code == 200, r.text
            if r.json()["allocations"]:
                out.append(name)
    return out


def send_all(url: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """Every body at once, one client each."""
    def one(body: dict[str, Any]) -> httpx.Response:
        with api.client(url) as c:
            return c.post("/strato/v1/schedule", json=body, timeout=30)
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


def test_duplicates_at_a_postgresql_root_are_placed_once(
        pg_tree: dict[str, ServerProcess]) -> None:
    bodies = [req(1, request_id=f"pg-dup-{i}") for i in range(4)]
    sends = [b for b in bodies for _ in range(3)]
    answers = send_all(pg_tree["root"].url, sends)
    by_id: dict[str, list[Any]] = {}
    for b, r in zip(sends, answers, strict=True):
        # A duplicate that waited past its time is told the request is in
        # progress (409); every other answer is the first one's.
        assert r.status_code in (200, 409), r.text
        if r.status_code == 200:
            by_id.setdefault(b["request_id"], []).append(
                sorted((p["consumer_uuid"], p["zone"]) for p in r.json()["placements"]))
    for b in bodies:
        seen = by_id.get(b["request_id"], [])
        assert seen and all(s == seen[0] for s in seen), (b["request_id"], seen)
        assert len(held(pg_tree, b["consumers"][0])) == 1
    # Eight hosts, four placed: the other four are still free.
    with api.client(pg_tree["root"].url) as c:
        r = c.post("/strato/v1/schedule", json=req(4))
        assert r.status_code == 200, r.text


def test_a_split_sent_three_times_at_once_then_cancelled_leaves_nothing(
        pg_tree: dict[str, ServerProcess]) -> None:
    body = req(2, request_id="pg-split", group="web",
               constraints=[{"type": "anti_affinity", "level": "site"}])
    answers = send_all(pg_tree["root"].url, [body] * 3)
    placed = [r for r in answers if r.status_code == 200]
    assert placed, [r.text for r in answers]
    assert all(r.status_code in (200, 409) for r in answers), [r.text for r in answers]
    first = sorted((p["consumer_uuid"], p["zone"]) for p in placed[0].json()["placements"])
    assert {z.split("/")[1] for _, z in first} == {"dfw", "ord"}, first
    for r in placed[1:]:
        assert sorted((p["consumer_uuid"], p["zone"])
                      for p in r.json()["placements"]) == first
    for consumer in body["consumers"]:
        assert len(held(pg_tree, consumer)) == 1
    with api.client(pg_tree["root"].url) as c:
        r = c.post("/strato/v1/requests/cancel", json={"request_id": "pg-split"})
        assert r.status_code == 200, r.text
        # Released in the cells, each asked once and confirming.
        assert sorted(r.json()["forwarded"]) == ["dfw", "ord"], r.text
        assert r.json()["deferred"] == [], r.text
        # A retry of the cancelled request is refused, and places nothing.
        r = c.post("/strato/v1/schedule", json=body)
        assert r.status_code == 409, r.text
    for consumer in body["consumers"]:
        assert held(pg_tree, consumer) == []


def test_a_request_at_work_when_a_postgresql_root_died_is_answered_soon_after_its_restart(
        pg_db_url: str, tmp_path: Path) -> None:
    """As on SQLite (tests/e2e/test_zone_faults.py): a root killed while its
    own pool is held for a request (its cell still asked) leaves the request
    placing in its ledger. Restarted, with no other server of its database
    alive beside it (its advisory lock), it undoes that at once, not at the
    request's deadline (30 s, every retry meanwhile a 409
    request_in_progress)."""
    slow = ["--zone", "root", *TIMING, "--child-timeout", "20", "--log-level", "info"]
    root = ServerProcess(pg_db_url, extra=slow, log_path=tmp_path / "root.log").start()
    procs = {"root": root}
    try:
        port = free_port()
        relay = HoldingRelay(port, pattern=b"/strato/v1/schedule").start()
        procs["dfw"] = zone(tmp_path, "dfw", root, [
            "--location-prefix", "dfw", "--advertise-url", f"http://127.0.0.1:{relay.port}"],
            port=port).start()
        agg = str(uuid.uuid4())
        with api.client(procs["dfw"].url) as c:
            host = _provider(c, "dfw-h0", {"VCPU": {"total": 8}}, aggs=[agg])
            r = c.put(f"/strato/v1/providers/{host}/meta",
                      json={"location": "dfw/room1/rack1/h0", "tags": []})
            assert r.status_code == 200, r.text
        with api.client(root.url) as c:
            _provider(c, "pool", {"DISK_GB": {"total": 800}}, aggs=[agg],
                      traits=["MISC_SHARES_VIA_AGGREGATE"])
        body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 1, "DISK_GB": 40}}],
                "request_id": f"r-{uuid.uuid4()}"}
        with api.client(root.url) as c:
            wait_for(lambda: (children(c).get("dfw", {}).get("summary") or {})
                     .get("providers") == 1)
            with pytest.raises(httpx.TimeoutException):
                c.post("/strato/v1/schedule", json=body, timeout=2.0)
        assert relay.held >= 1, "the request never reached the cell"
        root.kill()
        relay.release()
        procs["root"] = again = ServerProcess(pg_db_url, port=root.port, extra=slow,
                                              log_path=tmp_path / "root.log").start()
        with api.client(again.url) as c:
            began = time.monotonic()
            r = until_not_503(c, "POST", "/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            assert time.monotonic() - began < 8.0
        assert "left unanswered by an earlier process" in (tmp_path / "root.log").read_text()
    finally:
        stop_all(procs)
