"""16+ concurrent clients claiming over HTTP from a real server until it is full.

No provider may ever exceed capacity, stale writes must get 409, and the final
usages must equal the sum of the claims that succeeded. SQLite and PostgreSQL.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import api
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

CLIENTS = 16
ATTEMPTS_PER_CLIENT = 30


def test_concurrent_claims_never_overcommit(db_url: str, tmp_path: Path) -> None:
    with ServerProcess(db_url, log_path=tmp_path / "server.log") as server, \
            api.client(server.url) as setup:
        rps = [api.make_provider(setup, f"cn{i}", {
            "VCPU": {"total": 16, "allocation_ratio": 2.0},
            "MEMORY_MB": {"total": 65536, "reserved": 1024},
        }) for i in range(3)]
        caps = {rp: api.capacity(setup, rp) for rp in rps}
        contested = str(uuid.uuid4())  # every client tries to create this one consumer
        lock = threading.Lock()
        won: dict[str, tuple[str, dict[str, int]]] = {}
        statuses: Counter[int] = Counter()
        codes: Counter[str] = Counter()
        stale_rejected = 0

        def worker(seed: int) -> None:
            nonlocal stale_rejected
            rng = random.Random(seed)
            with api.client(server.url) as c:
                r = c.put(f"/allocations/{contested}", json={
                    "allocations": {rps[0]: {"resources": {"VCPU": 1}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"})
                with lock:
                    statuses[r.status_code] += 1
                    if r.status_code == 204:
                        won[contested] = (rps[0], {"VCPU": 1})
                    else:
                        codes[r.json()["errors"][0]["code"]] += 1
                for _ in range(ATTEMPTS_PER_CLIENT):
                    consumer = str(uuid.uuid4())
                    rp = rng.choice(rps)
                    res = {"VCPU": rng.choice([1, 2, 3]),
                           "MEMORY_MB": rng.choice([512, 1024, 2048])}
                    r = c.put(f"/allocations/{consumer}", json={
                        "allocations": {rp: {"resources": res}},
                        "project_id": "p", "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"})
                    with lock:
                        statuses[r.status_code] += 1
                    if r.status_code == 204:
                        with lock:
                            won[consumer] = (rp, res)
                        # A second create of the same consumer is a stale write.
                        r2 = c.put(f"/allocations/{consumer}", json={
                            "allocations": {rp: {"resources": {"VCPU": 1}}},
                            "project_id": "p", "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"})
                        assert r2.status_code == 409, r2.text
                        assert r2.json()["errors"][0]["code"] == "placement.concurrent_update"
                        with lock:
                            stale_rejected += 1
                    else:
                        assert r.status_code == 409, r.text

        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(worker, range(CLIENTS)))

        assert statuses[500] == 0
        # exactly one client created the contested consumer
        assert codes["placement.concurrent_update"] == CLIENTS - 1
        assert stale_rejected == len(won) - 1
        expected: dict[str, Counter[str]] = {rp: Counter() for rp in rps}
        for rp, res in won.values():
            expected[rp].update(res)
        for rp in rps:
            used = api.usages(setup, rp)
            for rc, cap in caps[rp].items():
                assert used.get(rc, 0) <= cap, f"{rp} {rc} overcommitted: {used} > {cap}"
                assert used.get(rc, 0) == expected[rp][rc]
        # the providers really filled up: the last attempts were refused for capacity
        assert statuses[409] > 0
        # every success is really claimed, with exactly what was asked
        for consumer, (rp, res) in list(won.items())[:50]:
            got = setup.get(f"/allocations/{consumer}").json()
            assert got["allocations"][rp]["resources"] == res
