"""32 concurrent clients scheduling against one real server until capacity runs out.

Issue 4, "What it must show": no provider over capacity, every 200 really
claimed (GET /allocations/{consumer} shows exactly the placement), every
failure a clean 409 `strato.no_valid_placement` (or a counted
`placement.concurrent_update` when the scheduler gives up on lost races),
retries counted, and final usages equal to the sum of the successful
placements. SQLite and PostgreSQL, each against one `strato serve` process.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

CLIENTS = 32
NO_VALID = "strato.no_valid_placement"
GAVE_UP = "placement.concurrent_update"
# A bound on each client's requests, so a scheduler that never says "full"
# fails the test instead of hanging it.
MAX_REQUESTS_PER_CLIENT = 120


@dataclass
class Outcome:
    """What the clients saw, gathered under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    placed: dict[str, dict[str, Any]] = field(default_factory=dict)  # consumer -> placement
    group_of: dict[str, str] = field(default_factory=dict)  # consumer -> server group
    statuses: Counter[int] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    unexpected: list[str] = field(default_factory=list)

    def record(self, body: dict[str, Any], r: httpx.Response, group: str | None) -> str | None:
        """Count one answer; the error code of a 409, None for a 200."""
        with self.lock:
            self.statuses[r.status_code] += 1
            if r.status_code == 200:
                ans = r.json()
                self.retries += int(ans["retries"])
                if [p["consumer_uuid"] for p in ans["placements"]] != body["consumers"]:
                    self.unexpected.append(f"placements do not match consumers: {r.text[:300]}")
                for p in ans["placements"]:
                    self.placed[p["consumer_uuid"]] = p
                    if group:
                        self.group_of[p["consumer_uuid"]] = group
                return None
            if r.status_code == 409:
                err = r.json()
                code = str(err["errors"][0]["code"])
                self.codes[code] += 1
                if code == NO_VALID and "explain" not in err:
                    self.unexpected.append(f"409 without explain: {r.text[:300]}")
                if code not in (NO_VALID, GAVE_UP):
                    self.unexpected.append(f"409 {code}: {r.text[:300]}")
                return code
            self.unexpected.append(f"{r.status_code}: {r.text[:300]}")
            return "unexpected"


def _hosts(c: httpx.Client, n: int, vcpu: int) -> dict[str, str]:
    """`n` hosts at site/room/rack/host (2 hosts a rack, 2 racks a room, 2 rooms a site)."""
    out = {}
    for i in range(n):
        rp = api.make_provider(c, f"h{i:02d}", {
            "VCPU": {"total": vcpu},
            "MEMORY_MB": {"total": 65536, "reserved": 512}})
        location = f"site{i // 8}/room{i // 4}/rack{i // 2}/h{i:02d}"
        r = c.put(f"/strato/v1/providers/{rp}/meta", json={"location": location, "tags": []})
        assert r.status_code == 200, r.text
        out[rp] = location
    return out


def _request(n: int, vcpu: int, **extra: Any) -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4()) for _ in range(n)], "project_id": "p",
            "user_id": "u", "groups": [{"resources": {"VCPU": vcpu, "MEMORY_MB": 256}}],
            **extra}


def _run_clients(url: str, worker: Any) -> None:
    start = threading.Barrier(CLIENTS)

    def run(seed: int) -> None:
        with api.client(url, timeout=120) as c:
            start.wait()  # all 32 at once: the first requests collide on purpose
            worker(c, random.Random(seed))

    with ThreadPoolExecutor(CLIENTS) as pool:
        for f in [pool.submit(run, i) for i in range(CLIENTS)]:
            f.result()


def _check_claims(c: httpx.Client, hosts: dict[str, str], out: Outcome) -> None:
    """Usages within capacity and equal to the successes; each success really claimed."""
    expected: dict[str, Counter[str]] = {rp: Counter() for rp in hosts}
    for consumer, p in out.placed.items():
        got = c.get(f"/allocations/{consumer}")
        assert got.status_code == 200, got.text
        claimed = {rp: a["resources"] for rp, a in got.json()["allocations"].items()}
        assert claimed == {rp: a["resources"] for rp, a in p["allocations"].items()}, consumer
        assert got.json()["project_id"] == "p"
        for rp, a in p["allocations"].items():
            expected[rp].update(a["resources"])
    for rp in hosts:
        used = api.usages(c, rp)
        cap = api.capacity(c, rp)
        for rc, total in cap.items():
            assert used.get(rc, 0) <= total, f"{rp} {rc} over capacity: {used} > {cap}"
            assert used.get(rc, 0) == expected[rp][rc], f"{rp} {rc}: {used} != {expected[rp]}"


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(db_url, log_path=tmp_path / "server.log") as s:
        yield s


def test_concurrent_schedules_fill_capacity_exactly(server: ServerProcess) -> None:
    with api.client(server.url) as setup:
        hosts = _hosts(setup, 24, vcpu=16)
    out = Outcome()

    def worker(c: httpx.Client, rng: random.Random) -> None:
        # Mixed sizes (atomic multi-instance too) until a one-VCPU request is
        # refused: then every host is full.
        smallest = False
        for _ in range(MAX_REQUESTS_PER_CLIENT):
            n, vcpu = (1, 1) if smallest else (rng.choice([1, 1, 2, 3]), rng.choice([1, 2, 3]))
            body = _request(n, vcpu)
            code = out.record(body, c.post("/strato/v1/schedule", json=body), None)
            if code == NO_VALID:
                if smallest:
                    return
                smallest = True
            elif code == "unexpected":
                return
        out.unexpected.append("a client never saw the zone full")

    _run_clients(server.url, worker)
    assert out.unexpected == []
    assert out.statuses[500] == 0
    assert out.codes[NO_VALID] >= CLIENTS  # every client ended on a clean refusal
    with api.client(server.url) as c:
        _check_claims(c, hosts, out)
        # Capacity really ran out: a one-VCPU request fails only when all is used.
        used = sum(api.usages(c, rp).get("VCPU", 0) for rp in hosts)
    assert used == 24 * 16
    print(f"\n{len(out.placed)} placed, statuses {dict(out.statuses)}, codes "
          f"{dict(out.codes)}, retries {out.retries}")


@pytest.mark.postgres
def test_two_worker_processes_share_one_postgresql_zone(pg_db_url: str, tmp_path: Path
                                                       ) -> None:
    """`--workers 2`: each process has its own index (own claims applied in
    memory, the other's read from the change log); together they fill the zone
    exactly, with no overcommit and every success really claimed."""
    with ServerProcess(pg_db_url, log_path=tmp_path / "server.log",
                       extra=["--workers", "2"]) as server:
        with api.client(server.url) as setup:
            hosts = _hosts(setup, 12, vcpu=8)
        out = Outcome()

        def worker(c: httpx.Client, rng: random.Random) -> None:
            for _ in range(MAX_REQUESTS_PER_CLIENT):
                body = _request(1, rng.choice([1, 1, 2]))
                code = out.record(body, c.post("/strato/v1/schedule", json=body), None)
                if code == NO_VALID and body["groups"][0]["resources"]["VCPU"] == 1:
                    return
                if code == "unexpected":
                    return
            out.unexpected.append("a client never saw the zone full")

        _run_clients(server.url, worker)
        assert out.unexpected == []
        assert out.statuses[500] == 0
        with api.client(server.url) as c:
            _check_claims(c, hosts, out)
            used = sum(api.usages(c, rp).get("VCPU", 0) for rp in hosts)
        assert used == 12 * 8


GROUPS = ("web0", "web1", "web2", "web3")


def _anti_affinity_run(server: ServerProcess
                       ) -> tuple[dict[str, str], Outcome, dict[str, Counter[str]]]:
    """32 clients join four groups, each with a hard host-level anti-affinity rule,
    until every group is refused; capacity is ample, so only the rule ends a group."""
    with api.client(server.url) as setup:
        hosts = _hosts(setup, 16, vcpu=64)
    out = Outcome()
    rule = [{"type": "anti_affinity", "level": "host"}]

    def worker(c: httpx.Client, rng: random.Random) -> None:
        open_groups = list(GROUPS)
        rng.shuffle(open_groups)
        for _ in range(MAX_REQUESTS_PER_CLIENT):
            if not open_groups:
                return
            group = open_groups[0]
            body = _request(1, 1, group=group, constraints=rule)
            code = out.record(body, c.post("/strato/v1/schedule", json=body), group)
            if code == NO_VALID:
                open_groups.pop(0)
            elif code == "unexpected":
                return
            else:
                open_groups.append(open_groups.pop(0))
        out.unexpected.append("a client never saw its groups full")

    _run_clients(server.url, worker)
    per_group: dict[str, Counter[str]] = {g: Counter() for g in GROUPS}
    for consumer, p in out.placed.items():
        per_group[out.group_of[consumer]][p["provider"]] += 1
    print(f"\n{len(out.placed)} placed, statuses {dict(out.statuses)}, codes "
          f"{dict(out.codes)}, retries {out.retries}, (members, hosts) per group "
          f"{ {g: (sum(h.values()), len(h)) for g, h in per_group.items()} }")
    return hosts, out, per_group


def test_concurrent_anti_affinity_claims_are_sound(server: ServerProcess) -> None:
    """With a hard rule in every request: still no overcommit, every 200 claimed,
    every failure a clean no_valid_placement."""
    hosts, out, per_group = _anti_affinity_run(server)
    assert out.unexpected == []
    assert out.statuses[500] == 0
    with api.client(server.url) as c:
        _check_claims(c, hosts, out)
    # Every host ends up with at least one member of every group.
    assert {g: len(h) for g, h in per_group.items()} == dict.fromkeys(GROUPS, len(hosts))


def test_concurrent_hard_anti_affinity_holds(server: ServerProcess) -> None:
    """No host holds two members of one group: exactly one member per host per group."""
    _, out, per_group = _anti_affinity_run(server)
    assert out.unexpected == []
    for g, on_host in per_group.items():
        doubled = {h: n for h, n in on_host.items() if n > 1}
        assert doubled == {}, f"group {g}: hosts with more than one member: {doubled}"
    assert len(out.placed) == len(GROUPS) * 16


@pytest.mark.postgres
def test_duplicates_across_two_worker_processes_are_placed_once(pg_db_url: str,
                                                               tmp_path: Path) -> None:
    """The same request id sent eight times at once to a zone of two worker
    processes on one PostgreSQL database: nothing in memory is shared, so only
    the database's reservation keeps it to one claim. Every 200 is the same
    placement (a duplicate that waits past its time gets a 409 in progress)."""
    with ServerProcess(pg_db_url, log_path=tmp_path / "server.log",
                       extra=["--workers", "2"]) as server:
        with api.client(server.url) as setup:
            _hosts(setup, 4, vcpu=8)
        bodies = [{**_request(2, 1), "request_id": f"w2-dup-{k}"} for k in range(4)]
        sends = [b for b in bodies for _ in range(8)]

        def one(body: dict[str, Any]) -> httpx.Response:
            with api.client(server.url) as c:
                return c.post("/strato/v1/schedule", json=body, timeout=60)
        with ThreadPoolExecutor(len(sends)) as pool:
            answers = list(pool.map(one, sends))
        with api.client(server.url) as c:
            for b in bodies:
                got = [r for s, r in zip(sends, answers, strict=True) if s is b]
                assert all(r.status_code in (200, 409) for r in got), [r.text for r in got]
                placed = [sorted((p["consumer_uuid"], p["provider"])
                                 for p in r.json()["placements"])
                          for r in got if r.status_code == 200]
                assert placed and all(p == placed[0] for p in placed), placed
                for consumer, provider in placed[0]:
                    allocs = c.get(f"/allocations/{consumer}").json()["allocations"]
                    assert list(allocs) == [provider], allocs
            # 4 requests of 2 one-VCPU instances on 32 VCPUs: 8 used, once each.
            used = sum(c.get(f"/resource_providers/{rp}/usages").json()["usages"]
                       .get("VCPU", 0)
                       for rp in [p["uuid"] for p in
                                  c.get("/resource_providers").json()["resource_providers"]])
            assert used == 8
