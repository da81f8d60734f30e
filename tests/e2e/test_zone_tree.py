"""A zone tree of real server processes on loopback: registration, both modes,
a frozen child (SIGSTOP) that times out, a killed child, and their recovery."""

from __future__ import annotations

import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from strato.process import ServerProcess
from tests.helpers import api

pytestmark = pytest.mark.slow

TIMING = ["--summary-interval", "0.3", "--child-timeout", "1.0"]


def zone(tmp: Path, name: str, parent: ServerProcess | None = None,
         extra: list[str] | None = None, port: int | None = None) -> ServerProcess:
    args = ["--zone", name, *TIMING, *(extra or [])]
    if parent is not None:
        args += ["--parent", parent.url]
    return ServerProcess(f"sqlite:///{tmp / (name + '.db')}", port=port, extra=args,
                         log_path=tmp / f"{name}.log")


def wait_for(pred: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def hosts(proc: ServerProcess, zone_name: str, locations: list[str]) -> None:
    """An 8-VCPU host at each of `locations` in the zone, named `{zone}-h{i}`."""
    with api.client(proc.url) as c:
        for i, location in enumerate(locations):
            rp = api.make_provider(c, f"{zone_name}-h{i}", {"VCPU": {"total": 8}})
            r = c.put(f"/strato/v1/providers/{rp}/meta",
                      json={"location": location, "tags": []})
            assert r.status_code == 200, r.text


def stop_all(procs: dict[str, ServerProcess]) -> None:
    """Stop every zone process, resuming any a test left frozen (SIGSTOP)."""
    for p in procs.values():
        if p.proc and p.proc.poll() is None:
            p.proc.send_signal(signal.SIGCONT)
        p.stop()


def children(c: httpx.Client) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in c.get("/strato/v1/children").json()["children"]}


def req(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"consumers": [str(uuid.uuid4())], "project_id": "p",
                            "user_id": "u", "groups": [{"resources": {"VCPU": 1}}]}
    body.update(kw)
    return body


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict[str, ServerProcess]]:
    root = zone(tmp_path, "global").start()
    procs = {"global": root}
    try:
        procs["dfw"] = zone(tmp_path, "dfw", root, ["--location-prefix", "dfw"]).start()
        procs["dfw-r1"] = zone(tmp_path, "dfw-r1", procs["dfw"],
                               ["--location-prefix", "dfw/room1"]).start()
        procs["ord"] = zone(tmp_path, "ord", root, ["--location-prefix", "ord",
                                                    "--tag", "hipaa"]).start()
        for leaf, prefix in (("dfw-r1", "dfw/room1"), ("ord", "ord/room1")):
            hosts(procs[leaf], leaf, [f"{prefix}/rack{i}/h{i}" for i in range(2)])
        with api.client(root.url) as c:
            wait_for(lambda: set(children(c)) == {"dfw", "ord"})
        with api.client(procs["dfw"].url) as c:
            wait_for(lambda: set(children(c)) == {"dfw-r1"})
        yield procs
    finally:
        stop_all(procs)


def test_three_levels_both_modes(tree: dict[str, ServerProcess]) -> None:
    with api.client(tree["global"].url) as c:
        r = c.post("/strato/v1/schedule", json=req(constraints=[
            {"type": "location", "pattern": "dfw/*"}]))
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"] == "global/dfw/dfw-r1"
        r = c.post("/strato/v1/schedule", json=req(mode="best", constraints=[
            {"type": "tags", "required": ["hipaa"]}]))
        assert r.status_code == 200, r.text
        p = r.json()["placements"][0]
        assert p["zone"] == "global/ord"
    with api.client(tree["ord"].url) as c:
        got = c.get(f"/allocations/{p['consumer_uuid']}").json()
        assert got["allocations"][p["provider"]]["resources"] == {"VCPU": 1}


def test_frozen_child_times_out_is_skipped_and_recovers(tree: dict[str, ServerProcess]
                                                        ) -> None:
    ord_proc = tree["ord"]
    assert ord_proc.proc is not None
    ord_proc.proc.send_signal(signal.SIGSTOP)
    try:
        with api.client(tree["global"].url) as c:
            started = time.monotonic()
            r = c.post("/strato/v1/schedule", json=req(mode="best"))
            assert r.status_code == 200, r.text
            assert r.json()["placements"][0]["zone"].startswith("global/dfw")
            # Bounded by the child timeout, not by the frozen child.
            assert time.monotonic() - started < 5
            wait_for(lambda: children(c)["ord"]["health"]["healthy"] is False)
            # Only ord has hipaa hosts: an outage, not "nothing fits".
            r = c.post("/strato/v1/schedule", json=req(constraints=[
                {"type": "tags", "required": ["hipaa"]}]))
            assert r.status_code == 503, r.text
            assert r.json()["errors"][0]["code"] == "strato.zone_unavailable"
    finally:
        ord_proc.proc.send_signal(signal.SIGCONT)
    with api.client(tree["global"].url) as c:
        # Probed back within seconds (backoff is capped at 4 s).
        resumed = time.monotonic()
        wait_for(lambda: children(c)["ord"]["health"]["healthy"] is True, timeout=15)
        assert time.monotonic() - resumed < 10
        r = c.post("/strato/v1/schedule", json=req(constraints=[
            {"type": "tags", "required": ["hipaa"]}]))
        assert r.status_code == 200, r.text


def test_killed_child_and_restart(tmp_path: Path, tree: dict[str, ServerProcess]) -> None:
    leaf = tree["dfw-r1"]
    leaf.kill()
    with api.client(tree["global"].url) as c:
        r = c.post("/strato/v1/schedule", json=req())
        assert r.status_code == 200, r.text
        assert r.json()["placements"][0]["zone"] == "global/ord"
        r = c.post("/strato/v1/schedule", json=req(explain=True, constraints=[
            {"type": "location", "pattern": "dfw/*"}]))
        # dfw's only cell is down: dfw says so, and the root passes it on.
        assert r.status_code == 503, r.text
        detail = r.json()["errors"][0]["detail"]
        assert "dfw" in detail
    # Same database, same port: the zone comes back with its claims and rejoins.
    again = zone(tmp_path, "dfw-r1", tree["dfw"], ["--location-prefix", "dfw/room1"],
                 port=leaf.port).start()
    tree["dfw-r1"] = again
    with api.client(tree["global"].url) as c:
        def placed_in_dfw() -> bool:
            r = c.post("/strato/v1/schedule", json=req(constraints=[
                {"type": "location", "pattern": "dfw/*"}]))
            return r.status_code == 200
        wait_for(placed_in_dfw, timeout=15)


def in_doubt(c: httpx.Client) -> dict[str, int]:
    return {k: v["in_doubt"] for k, v in children(c).items()}


def test_stuck_leaf_commits_late_and_its_claim_is_cancelled(
        tmp_path: Path, tree: dict[str, ServerProcess]) -> None:
    """A leaf's database is locked (a slow disk, a long transaction): the claim
    waits, its parent times out and the tree places the request elsewhere. The
    leaf then commits it late; the zone that lost the answer cancels it there:
    the consumer ends up placed once."""
    lock = sqlite3.connect(tmp_path / "dfw-r1.db", isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    body = req()
    consumer = body["consumers"][0]
    try:
        with api.client(tree["global"].url) as c, api.client(tree["dfw"].url) as d:
            r = c.post("/strato/v1/schedule", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["placements"][0]["zone"] == "global/ord"
            assert sum(in_doubt(c).values()) + sum(in_doubt(d).values()) >= 1
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    with api.client(tree["global"].url) as c, api.client(tree["dfw"].url) as d:
        wait_for(lambda: sum(in_doubt(c).values()) + sum(in_doubt(d).values()) == 0,
                 timeout=30)
    with api.client(tree["dfw-r1"].url) as lc:
        wait_for(lambda: lc.get(f"/allocations/{consumer}").json()["allocations"] == {})
    with api.client(tree["ord"].url) as oc:
        assert oc.get(f"/allocations/{consumer}").json()["allocations"]
    # The leaf knows the request as cancelled: should it arrive again, it is refused.
    db = sqlite3.connect(tmp_path / "dfw-r1.db")
    try:
        rows = db.execute("SELECT status, response FROM strato_schedule_requests "
                          "WHERE request_id LIKE '%@dfw#%'").fetchall()
    finally:
        db.close()
    assert rows and all(status == 410 for status, _ in rows), rows


def test_a_second_zone_with_a_live_zones_name_is_refused(
        tmp_path: Path, tree: dict[str, ServerProcess]) -> None:
    """Another `strato serve --zone ord --parent ...` (its own database, so its
    own identity) cannot take over the live `ord`; the real one, restarted, can
    register again (its identity is in its database)."""
    (tmp_path / "other").mkdir()
    log = tmp_path / "other" / "ord.log"
    with zone(tmp_path / "other", "ord", tree["global"], ["--location-prefix", "x"]):
        wait_for(lambda: log.exists() and "live zone" in log.read_text())
        with api.client(tree["global"].url) as c:
            assert children(c)["ord"]["url"] == tree["ord"].url
    ord_proc = tree["ord"]
    ord_proc.stop()
    again = zone(tmp_path, "ord", tree["global"], ["--location-prefix", "ord", "--tag", "hipaa",
                                                   "--advertise-url",
                                                   f"http://localhost:{ord_proc.port}"],
                 port=ord_proc.port).start()
    tree["ord"] = again
    with api.client(tree["global"].url) as c:
        wait_for(lambda: children(c)["ord"]["url"] == f"http://localhost:{ord_proc.port}")


def test_no_zone_is_its_own_child_and_a_cycle_does_not_storm(tmp_path: Path) -> None:
    """Real processes: a zone refuses its own address (as advertised, or
    another spelling that reaches it); two zones registered as each other's
    child answer a read over the subtree at once (508 strato.zone_loop),
    without calling each other until their connections run out."""
    a = zone(tmp_path, "a", extra=["--max-connections", "64"]).start()
    b = zone(tmp_path, "b").start()
    try:
        with api.client(a.url, timeout=10) as ca, api.client(b.url, timeout=10) as cb:
            for url in (a.url, a.url.replace("127.0.0.1", "localhost") + "/"):
                r = ca.post("/strato/v1/children", json={"name": "selfloop", "url": url})
                assert r.status_code == 400, r.text
                assert "url" in r.json()["errors"][0]["detail"]
            assert children(ca) == {}
            r = ca.post("/strato/v1/children", json={"name": "b", "url": b.url})
            assert r.status_code == 201, r.text
            # a's summary counts b: registering a under b is refused at once.
            r = cb.post("/strato/v1/children", json={"name": "a", "url": a.url})
            assert r.status_code == 409, r.text
            assert r.json()["errors"][0]["code"] == "strato.zone_loop", r.text
            # A cycle it cannot see (a frozen while b registers it) is
            # registered, and refused at its first read.
            a.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
            try:
                r = cb.post("/strato/v1/children", json={"name": "a", "url": a.url})
            finally:
                a.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            assert r.status_code == 201, r.text
            # Until b's probe of a, a is only a child that timed out (a read
            # through b is a 503 naming it); once probed, its summary shows
            # the cycle. On a slow day the probe comes after the first read.
            wait_for(lambda: (children(cb)["a"]["health"]["last_error"] or "")
                     .startswith("loop") or children(cb)["a"]["health"]["healthy"])
            for path in ("/usages?project_id=p", f"/allocations/{uuid.uuid4()}"):
                start = time.monotonic()
                r = ca.get(path)
                assert time.monotonic() - start < 5, path
                assert r.status_code == 508, r.text
                assert r.json()["errors"][0]["code"] == "strato.zone_loop", r.text
            assert ca.get("/strato/v1/children").status_code == 200
    finally:
        a.stop()
        b.stop()


def held_in(tree: dict[str, ServerProcess], consumer: str) -> list[str]:
    """The zones whose own store holds allocations of `consumer` (each asked
    for its own providers' allocations: routing zones have none here)."""
    out = []
    for name in ("dfw-r1", "ord"):
        with api.client(tree[name].url) as c:
            for rp in c.get("/resource_providers").json()["resource_providers"]:
                got = c.get(f"/resource_providers/{rp['uuid']}/allocations").json()
                if consumer in got["allocations"]:
                    out.append(name)
    return out


@pytest.mark.parametrize("cancel_after", [None, 0.0, 0.15])
def test_duplicates_of_a_divided_request_and_a_racing_cancel(
        tree: dict[str, ServerProcess], cancel_after: float | None) -> None:
    """Six copies of one request id at once at the root of three levels, the
    request divided between dfw (through its cell) and ord (one instance per
    site), and the client's cancel racing them: each consumer is held once at
    most, and nothing at all once the cancel answered."""
    body = req(request_id=f"dup-{uuid.uuid4()}", group=f"g-{uuid.uuid4().hex[:8]}",
               consumers=[str(uuid.uuid4()) for _ in range(2)],
               constraints=[{"type": "anti_affinity", "level": "site"}])
    url = tree["global"].url

    def send() -> httpx.Response:
        with api.client(url) as c:
            return c.post("/strato/v1/schedule", json=body)

    def cancel() -> httpx.Response:
        assert cancel_after is not None
        time.sleep(cancel_after)
        with api.client(url) as c:
            return c.post("/strato/v1/requests/cancel",
                          json={"request_id": body["request_id"]})
    with ThreadPoolExecutor(7) as pool:
        sent = [pool.submit(send) for _ in range(6)]
        cancelled = pool.submit(cancel) if cancel_after is not None else None
        answers = [f.result() for f in sent]
    for r in answers:
        assert r.status_code in (200, 409, 503), r.text
    placed = [r.json() for r in answers if r.status_code == 200]
    # Every 200 says the same (the first's answer, replayed).
    assert len({str(sorted((p["consumer_uuid"], p["zone"]) for p in a["placements"]))
                for a in placed}) <= 1
    if cancelled is not None:
        assert cancelled.result().status_code == 200, cancelled.result().text
        wait_for(lambda: all(held_in(tree, c) == [] for c in body["consumers"]))
        return
    assert placed, [r.text for r in answers]
    for p in placed[0]["placements"]:
        assert held_in(tree, p["consumer_uuid"]) == [p["zone"].split("/")[-1]]


def test_a_mid_zone_killed_under_load_and_restarted_places_each_request_once(
        tmp_path: Path, tree: dict[str, ServerProcess]) -> None:
    """kill -9 of dfw (between the root and its cell) while requests pass
    through it, then a restart on the same database: every request id its
    client retries is placed once, where its answer says, and none is
    refused (the tree has room: an outage is not an answer)."""
    bodies = [req(request_id=f"kill-{i}-{uuid.uuid4()}",
                  constraints=[{"type": "location", "pattern": "dfw/*"}] if i % 2 else [])
              for i in range(16)]

    def send(body: dict[str, Any]) -> int:
        try:
            with api.client(tree["global"].url, timeout=10) as c:
                return c.post("/strato/v1/schedule", json=body).status_code
        except httpx.HTTPError:
            return 0
    with ThreadPoolExecutor(4) as pool:
        first = pool.map(send, bodies)
        time.sleep(0.2)
        tree["dfw"].kill()
        statuses = list(first)
    tree["dfw"] = zone(tmp_path, "dfw", tree["global"], ["--location-prefix", "dfw"],
                       port=tree["dfw"].port).start()
    answers: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    with api.client(tree["global"].url) as c:
        for body, status in zip(bodies, statuses, strict=True):
            while True:
                r = c.post("/strato/v1/schedule", json=body)
                assert r.status_code != 409, (status, r.text)
                if r.status_code == 200:
                    answers[body["request_id"]] = r.json()
                    break
                assert r.status_code == 503, r.text
                assert time.monotonic() < deadline, r.text
                time.sleep(0.3)
    for body in bodies:
        (p,) = answers[body["request_id"]]["placements"]
        wait_for(lambda p=p: held_in(tree, p["consumer_uuid"])  # type: ignore[misc]
                 == [p["zone"].split("/")[-1]])
