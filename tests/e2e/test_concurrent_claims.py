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


def test_consumers_moved_between_providers_concurrently(db_url: str, tmp_path: Path) -> None:
    """16 clients moving the same few consumers from provider to provider, each
    with the generation it read: a write locks the providers of the consumer's
    old allocations as well as its new ones, and those may change under it.
    Every refusal is a 409 with a Placement code, never a deadlock's 500, and
    the usages are the sum of what the consumers hold."""
    with ServerProcess(db_url, log_path=tmp_path / "server.log") as server, \
            api.client(server.url) as setup:
        rps = [api.make_provider(setup, f"cn{i}", {
            "VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}}) for i in range(4)]
        consumers = [str(uuid.uuid4()) for _ in range(6)]
        lock = threading.Lock()
        statuses: Counter[int] = Counter()
        bad: list[str] = []

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            with api.client(server.url) as c:
                for _ in range(ATTEMPTS_PER_CLIENT):
                    consumer = rng.choice(consumers)
                    gen = c.get(f"/allocations/{consumer}").json().get("consumer_generation")
                    r = c.put(f"/allocations/{consumer}", json={
                        "allocations": {rng.choice(rps): {"resources": {
                            "VCPU": rng.randint(1, 4), "MEMORY_MB": 256}}},
                        "project_id": "p", "user_id": "u", "consumer_generation": gen,
                        "consumer_type": "INSTANCE"})
                    with lock:
                        statuses[r.status_code] += 1
                        if r.status_code not in (204, 409) or (
                                r.status_code == 409 and r.json()["errors"][0]["code"]
                                != "placement.concurrent_update"):
                            bad.append(r.text)

        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(worker, range(CLIENTS)))

        assert bad == [], (statuses, bad[:3])
        assert statuses[204] > 0
        held: dict[str, Counter[str]] = {rp: Counter() for rp in rps}
        for consumer in consumers:
            for rp, a in setup.get(f"/allocations/{consumer}").json()["allocations"].items():
                held[rp].update(a["resources"])
        for rp in rps:
            used = {rc: n for rc, n in api.usages(setup, rp).items() if n}
            assert used == dict(held[rp])


def _race_delete(url: str, rp: str, consumers: list[str]) -> list[int]:
    """DELETE `rp` while claiming on it for each consumer, all at once: the
    claims' statuses."""
    barrier = threading.Barrier(len(consumers) + 1)

    def claim(consumer: str) -> int:
        with api.client(url) as c:
            barrier.wait()
            r = c.put(f"/allocations/{consumer}", json={
                "allocations": {rp: {"resources": {"VCPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": None,
                "consumer_type": "INSTANCE"})
            assert r.status_code in (204, 400, 404, 409), r.text
            return r.status_code

    def delete() -> None:
        with api.client(url) as c:
            barrier.wait()
            r = c.delete(f"/resource_providers/{rp}")
            assert r.status_code in (204, 409), r.text
            if r.status_code == 409:
                assert r.json()["errors"][0]["code"] == "placement.resource_provider.inuse"

    with ThreadPoolExecutor(len(consumers) + 1) as pool:
        deleting = pool.submit(delete)
        claimed = list(pool.map(claim, consumers))
        deleting.result()
    return claimed


def test_delete_provider_while_allocating_against_it(db_url: str, tmp_path: Path) -> None:
    """A DELETE of a provider racing claims on it: either the delete wins (the
    claims get 4xx and leave nothing) or a claim does (the delete is a 409
    placement.resource_provider.inuse); never a 500."""
    with ServerProcess(db_url, log_path=tmp_path / "server.log") as server, \
            api.client(server.url) as setup:
        for round_ in range(5):
            rp = api.make_provider(setup, f"doomed{round_}", {"VCPU": {"total": 100}})
            consumers = [str(uuid.uuid4()) for _ in range(CLIENTS - 1)]
            claimed = _race_delete(server.url, rp, consumers)
            gone = setup.get(f"/resource_providers/{rp}").status_code == 404
            for consumer, status in zip(consumers, claimed, strict=True):
                held = setup.get(f"/allocations/{consumer}").json()["allocations"]
                assert bool(held) == (status == 204), (consumer, status, held)
                assert not (gone and held)


def test_children_created_while_their_parent_is_deleted(db_url: str, tmp_path: Path) -> None:
    """POST /resource_providers naming a parent that a DELETE removes at the same
    time: the child is created (and the delete is a 409 for the child) or is a
    400 for a parent that does not exist; never a foreign key's 500."""
    # Two processes on PostgreSQL: the child's read of its parent and its
    # insert have more room between them.
    extra = [] if db_url.startswith("sqlite") else ["--workers", "2"]
    with ServerProcess(db_url, extra=extra, log_path=tmp_path / "server.log") as server, \
            api.client(server.url) as setup:
        for round_ in range(20):
            parent = setup.post("/resource_providers", json={"name": f"parent{round_}"}).json()
            barrier = threading.Barrier(CLIENTS)

            def act(i: int, parent_uuid: str = parent["uuid"],
                    barrier: threading.Barrier = barrier) -> int:
                with api.client(server.url) as c:
                    barrier.wait()
                    if i == 0:
                        r = c.delete(f"/resource_providers/{parent_uuid}")
                        assert r.status_code in (204, 409), r.text
                    else:
                        r = c.post("/resource_providers", json={
                            "name": f"child-{uuid.uuid4()}", "parent_provider_uuid": parent_uuid})
                        assert r.status_code in (200, 400), r.text
                    return r.status_code

            with ThreadPoolExecutor(CLIENTS) as pool:
                statuses = list(pool.map(act, range(CLIENTS)))
            children = statuses[1:].count(200)
            assert (statuses[0] == 204) == (children == 0), statuses


def test_providers_of_one_name_or_uuid_created_at_once(db_url: str, tmp_path: Path) -> None:
    """16 POST /resource_providers of one name (and of one uuid) at once: one is
    created, the others are 409 placement.duplicate_name, never a unique
    constraint's 500."""
    extra = [] if db_url.startswith("sqlite") else ["--workers", "2"]
    with ServerProcess(db_url, extra=extra, log_path=tmp_path / "server.log") as server:
        for round_ in range(10):
            same_uuid = str(uuid.uuid4())
            bodies = [{"name": f"twin{round_}"}, {"name": f"twin{round_}-{{}}", "uuid": same_uuid}]
            for body in bodies:
                barrier = threading.Barrier(CLIENTS)

                def create(i: int, body: dict[str, str] = body,
                           barrier: threading.Barrier = barrier) -> int:
                    with api.client(server.url) as c:
                        barrier.wait()
                        r = c.post("/resource_providers",
                                   json={**body, "name": body["name"].format(i)})
                        assert r.status_code in (200, 409), r.text
                        if r.status_code == 409:
                            assert (r.json()["errors"][0]["code"]
                                    == "placement.duplicate_name"), r.text
                        return r.status_code

                with ThreadPoolExecutor(CLIENTS) as pool:
                    statuses = list(pool.map(create, range(CLIENTS)))
                assert statuses.count(200) == 1, statuses


def test_providers_renamed_to_one_name_at_once(db_url: str, tmp_path: Path) -> None:
    """16 providers renamed to one name at once: one is, the others are 409
    placement.duplicate_name, never a unique constraint's 500."""
    extra = [] if db_url.startswith("sqlite") else ["--workers", "2"]
    with ServerProcess(db_url, extra=extra, log_path=tmp_path / "server.log") as server, \
            api.client(server.url) as setup:
        for round_ in range(10):
            rps = [setup.post("/resource_providers", json={"name": f"r{round_}-{i}"}).json()["uuid"]
                   for i in range(CLIENTS)]
            barrier = threading.Barrier(CLIENTS)

            def rename(rp: str, name: str = f"same{round_}",
                       barrier: threading.Barrier = barrier) -> int:
                with api.client(server.url) as c:
                    barrier.wait()
                    r = c.put(f"/resource_providers/{rp}", json={"name": name})
                    assert r.status_code in (200, 409), r.text
                    return r.status_code

            with ThreadPoolExecutor(CLIENTS) as pool:
                statuses = list(pool.map(rename, rps))
            assert statuses.count(200) == 1, statuses
