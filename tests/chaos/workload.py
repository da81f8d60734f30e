"""Concurrent clients against the root: the request mix, retries and releases.

Every client is a thread with its own httpx client and its own seeded random
source, so a seed gives the same mix (not the same interleaving: the servers
and the nemesis decide that). A client that gets no definite answer (no
answer at all, 5xx, 503 zone_unavailable, 409 request_in_progress, or any
other 409 but no_valid_placement) retries with the same request id and the
same body, as a real client must.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tests.chaos.cluster import HEADERS, Cluster
from tests.chaos.history import (
    NO_VALID,
    Attempt,
    Cancel,
    History,
    Release,
    Request,
    RoomSample,
)

PATIENT_TIMEOUT = 8.0
# Above this many live consumers a client releases instead of placing: the
# tree stays mostly between half and three quarters full, so both placements
# and refusals keep happening (12 hosts x 16 VCPU, ~1.2 VCPU a consumer).
HIGH_WATER = 110
RETRIES = 3
# Relative weights of the operations a client picks from.
MIX: dict[str, int] = {"plain": 20, "multi": 12, "anti": 12, "gang": 6, "spread": 6,
                       "pool_disk": 10, "pool_ip": 8, "duplicate": 8, "impatient": 8,
                       "nova": 8, "cancel": 6, "release": 22}


def zone_of(path: str) -> str:
    """`root/mid1/cell1` -> `cell1`; a bare name stays as it is."""
    return path.rsplit("/", 1)[-1]


def placement_zones(placement: dict[str, Any]) -> set[str]:
    """Zones holding a part of one placement: its owner and its pool's zone."""
    zones = {zone_of(str(placement["zone"]))}
    if placement.get("shared_zone"):
        zones.add(zone_of(str(placement["shared_zone"])))
    for alloc in placement.get("allocations", {}).values():
        if isinstance(alloc, dict) and alloc.get("zone"):
            zones.add(zone_of(str(alloc["zone"])))
    return zones


@dataclass
class Live:
    consumer: str
    request_id: str
    zones: set[str]


class Workload:
    def __init__(self, cluster: Cluster, history: History, *, seed: int, clients: int = 16,
                 duration: float = 60.0) -> None:
        self.cluster = cluster
        self.history = history
        self.seed = seed
        self.clients = clients
        self.duration = duration
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._live: list[Live] = []  # acknowledged and not released yet
        self._acked: set[str] = set()  # every consumer ever acknowledged
        self._cancelled: set[str] = set()  # request ids an admin cancelled (200)
        self._groups: list[tuple[str, str]] = []  # (group name, anti-affinity level)
        self._counter = 0
        self.errors: list[str] = []  # exceptions in the clients themselves

    # -- running ---------------------------------------------------------------------

    def run(self) -> None:
        """Clients and the room monitor for `duration` seconds; returns when all end."""
        threads = [threading.Thread(target=self._client, args=(i,), name=f"client-{i}",
                                    daemon=True) for i in range(self.clients)]
        threads.append(threading.Thread(target=self._monitor, name="monitor", daemon=True))
        for t in threads:
            t.start()
        self._stop.wait(self.duration)
        self.history.stop_at = self.history.now()
        self._stop.set()
        for t in threads:
            t.join(PATIENT_TIMEOUT * (RETRIES + 1))
        self.history.end = self.history.now()

    def stop(self) -> None:
        self._stop.set()

    def _client(self, index: int) -> None:
        rng = random.Random(f"{self.seed}-client-{index}")
        ops: dict[str, Callable[[httpx.Client, random.Random, str], None]] = {
            "plain": self._plain, "multi": self._multi, "anti": self._anti,
            "gang": self._gang, "spread": self._spread,
            "pool_disk": self._pool_disk, "pool_ip": self._pool_ip,
            "duplicate": self._duplicate, "impatient": self._impatient,
            "nova": self._nova, "cancel": self._cancel, "release": self._release}
        names, weights = list(MIX), list(MIX.values())
        with httpx.Client(base_url=self.cluster.root.url, headers=HEADERS) as c:
            while not self._stop.is_set():
                op = rng.choices(names, weights)[0]
                if len(self._live) > HIGH_WATER:
                    op = "release"
                try:
                    ops[op](c, rng, f"c{index}")
                except Exception as exc:  # a client bug must not end the client silently
                    with self._lock:
                        self.errors.append(f"c{index} {op}: {exc!r}")
                # Think time: enough load to race, not so much that our own load
                # (the machine is shared) makes every child time out.
                time.sleep(rng.uniform(0.05, 0.3))

    # -- requests --------------------------------------------------------------------

    def _new_id(self, rng: random.Random) -> str:
        with self._lock:
            self._counter += 1
            n = self._counter
        return f"s{self.seed}-{n}-{rng.getrandbits(32):08x}"

    @staticmethod
    def _body(rng: random.Random, count: int, resources: dict[str, int],
              **extra: Any) -> dict[str, Any]:
        return {"consumers": [str(uuid.UUID(int=rng.getrandbits(128), version=4))
                              for _ in range(count)],
                "project_id": "chaos", "user_id": "chaos",
                "groups": [{"resources": resources}], **extra}

    def _plain(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        body = self._body(rng, 1, {"VCPU": rng.choice([1, 2]), "MEMORY_MB": 512})
        self.schedule(c, "plain", body, self._new_id(rng), who)

    def _multi(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        body = self._body(rng, rng.randint(2, 4), {"VCPU": 1, "MEMORY_MB": 256},
                          atomic=rng.random() < 0.5)
        self.schedule(c, "multi", body, self._new_id(rng), who)

    def _anti(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        with self._lock:
            reuse = self._groups and rng.random() < 0.3
            if reuse:
                group, level = rng.choice(self._groups)
            else:
                group = f"g{self.seed}-{rng.getrandbits(32):08x}"
                level = rng.choice(["host", "host", "rack", "site"])
                self._groups.append((group, level))
        # Two sites in the tree: a site-level group has room for two members.
        most = 2 if level == "site" else 3
        body = self._body(rng, rng.randint(1, most) if reuse else rng.randint(2, most),
                          {"VCPU": 1, "MEMORY_MB": 256}, group=group,
                          constraints=[{"type": "anti_affinity", "level": level}])
        self.schedule(c, "anti", body, self._new_id(rng), who)

    def _gang(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """More than one cell holds (three 16-VCPU hosts): divided among cells,
        all or nothing (atomic) or what fits."""
        body = self._body(rng, rng.randint(3, 6), {"VCPU": 8, "MEMORY_MB": 256},
                          atomic=rng.random() < 0.7)
        self.schedule(c, "gang", body, self._new_id(rng), who)

    def _spread(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """Anti-affinity at level zone: one instance per mid zone (two), hard or
        soft; a soft one at level rack over several cells; or a topology
        spread (max skew 1, at most two per domain)."""
        if rng.random() < 0.4:
            level = rng.choice(["zone", "rack"])
            body = self._body(rng, rng.randint(3, 4), {"VCPU": 1, "MEMORY_MB": 256},
                              constraints=[{"type": "spread", "level": level, "max_skew": 1,
                                            "max_per_domain": 2,
                                            "hard": rng.random() < 0.7}])
            self.schedule(c, "spread", body, self._new_id(rng), who)
            return
        group = f"z{self.seed}-{rng.getrandbits(32):08x}"
        if rng.random() < 0.25:
            # Soft, below the cells (each has two racks): more instances than
            # racks with room are divided among the cells as their racks are.
            body = self._body(rng, rng.randint(3, 9), {"VCPU": 1, "MEMORY_MB": 256},
                              group=group, atomic=rng.random() < 0.7,
                              constraints=[{"type": "anti_affinity", "level": "rack",
                                            "hard": False}])
            self.schedule(c, "spread", body, self._new_id(rng), who)
            return
        hard = rng.random() < 0.6
        body = self._body(rng, 2 if hard else rng.randint(2, 3),
                          {"VCPU": 1, "MEMORY_MB": 256}, group=group,
                          constraints=[{"type": "anti_affinity", "level": "zone",
                                        "hard": hard}])
        self.schedule(c, "spread", body, self._new_id(rng), who)

    def _pool_disk(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        if rng.random() < 0.3:
            # Whole hosts with the root's disk: divided among cells, the pool's
            # part held at the root (all or nothing, or what fits).
            body = self._body(rng, rng.randint(3, 5), {"VCPU": 8, "DISK_GB": 20},
                              atomic=rng.random() < 0.5)
            self.schedule(c, "pool_disk", body, self._new_id(rng), who)
            return
        body = self._body(rng, rng.choice([1, 1, 2]),
                          {"VCPU": 1, "DISK_GB": rng.choice([10, 20, 40])})
        self.schedule(c, "pool_disk", body, self._new_id(rng), who)

    def _pool_ip(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        body = self._body(rng, 1, {"VCPU": 1, "IPV4_ADDRESS": 1})
        self.schedule(c, "pool_ip", body, self._new_id(rng), who)

    def _duplicate(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """Two clients, same id, same body, at the same moment."""
        body = self._body(rng, rng.choice([1, 2]), {"VCPU": 1, "MEMORY_MB": 256})
        if rng.random() < 0.3:
            body["groups"][0]["resources"]["DISK_GB"] = 10
        rid = self._new_id(rng)
        barrier = threading.Barrier(2)

        def twin() -> None:
            with httpx.Client(base_url=self.cluster.root.url, headers=HEADERS) as c2:
                barrier.wait(5)
                self.schedule(c2, "duplicate", body, rid, who + "b")
        t = threading.Thread(target=twin, daemon=True)
        t.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(5)
        self.schedule(c, "duplicate", body, rid, who + "a")
        t.join(PATIENT_TIMEOUT * (RETRIES + 1))

    def _impatient(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """Gives up on the first attempt early, while it may still run, and retries."""
        body = self._body(rng, rng.choice([1, 2]), {"VCPU": 1, "MEMORY_MB": 256})
        if rng.random() < 0.3:
            body["groups"][0]["resources"]["DISK_GB"] = 10
        self.schedule(c, "impatient", body, self._new_id(rng), who,
                      first_timeout=rng.uniform(0.05, 0.6))

    def _nova(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """Nova's way, at the root: allocation candidates that take disk from the
        root's pool and the rest from a cell's host, then one PUT
        /allocations/{consumer} for the one picked: a write across two zones,
        all or nothing. No request id: a write without a definite answer is
        not retried, and the checker holds it to all or nothing."""
        consumer = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        try:
            r = c.get("/allocation_candidates", timeout=PATIENT_TIMEOUT, params={
                "resources": f"VCPU:1,DISK_GB:{rng.choice([10, 20])}", "limit": "5"})
            cands = r.json().get("allocation_requests") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return
        if not cands:
            return
        allocations = rng.choice(cands)["allocations"]
        body = {"allocations": allocations, "project_id": "chaos", "user_id": "chaos",
                "consumer_generation": None, "consumer_type": "INSTANCE"}
        req = self.history.request(f"nova-{consumer}", "nova",
                                   {**body, "consumers": [consumer]})
        att = Attempt(who, 1, self.history.now(), PATIENT_TIMEOUT)
        try:
            r = c.put(f"/allocations/{consumer}", json=body, timeout=PATIENT_TIMEOUT)
            att.status = r.status_code
            if r.status_code == 204:
                att.status = 200  # the write's 204, read as a schedule answer's 200
                att.answer = self._written(consumer, allocations)
            else:
                err = r.json()["errors"][0]
                # A fresh consumer's 409 is a definite no: nothing was written.
                att.code = NO_VALID if r.status_code == 409 else err.get("code")
                att.error = str(err.get("detail", ""))[:300]
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            att.error = f"{type(exc).__name__}: {exc}"[:300]
        att.done = self.history.now()
        self.history.add_attempt(req, att)
        if att.answer is not None:
            self._acknowledged(req.request_id, att.answer)

    def _cancel(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        """An admin cancels a request by its id at the root, racing it: before
        it arrives, while it works (a split among cells, a pool part at the root
        or at a mid zone), or just after its answer. Whatever it placed must end
        undone, and no attempt after the cancel may place it."""
        shape = rng.random()
        if shape < 0.35:
            body = self._body(rng, rng.choice([1, 2]), {"VCPU": 1, "MEMORY_MB": 256})
            if rng.random() < 0.4:
                body["groups"][0]["resources"]["DISK_GB"] = 10
        elif shape < 0.7:
            body = self._body(rng, rng.randint(3, 5), {"VCPU": 8, "MEMORY_MB": 256},
                              atomic=rng.random() < 0.6)
            if rng.random() < 0.4:
                body["groups"][0]["resources"]["DISK_GB"] = 20
        else:
            body = self._body(rng, 1, {"VCPU": 1, "IPV4_ADDRESS": 1})
        rid = self._new_id(rng)
        req = self.history.request(rid, "cancel", {**body, "request_id": rid})
        delay = rng.choice([rng.uniform(0.0, 0.03), rng.uniform(0.03, 0.3),
                            rng.uniform(0.3, 1.2)])
        t = threading.Thread(target=self._cancel_later, args=(req, delay, who + "x"),
                             daemon=True)
        t.start()
        self.schedule(c, "cancel", body, rid, who)
        t.join(PATIENT_TIMEOUT * (RETRIES + 2))

    def _cancel_later(self, req: Request, delay: float, who: str) -> None:
        time.sleep(delay)
        with httpx.Client(base_url=self.cluster.root.url, headers=HEADERS) as c:
            for n in range(RETRIES + 2):
                if self.send_cancel(c, req):
                    return
                if self._stop.is_set():
                    return  # the resolution pass settles it
                time.sleep(0.3 + 0.3 * n)

    def send_cancel(self, c: httpx.Client, req: Request) -> bool:
        """One cancel call; True when it was carried out (200)."""
        can = Cancel(req.request_id, self.history.now())
        try:
            r = c.post("/strato/v1/requests/cancel", json={"request_id": req.request_id},
                       timeout=PATIENT_TIMEOUT)
            can.status = r.status_code
            if r.status_code != 200:
                can.error = r.text[:300]
        except httpx.HTTPError as exc:
            can.error = f"{type(exc).__name__}: {exc}"[:300]
        can.done = self.history.now()
        self.history.add_cancel(req, can)
        if can.status == 200:
            with self._lock:
                self._cancelled.add(req.request_id)
                gone = set(req.consumers)
                self._live = [lv for lv in self._live if lv.consumer not in gone]
            return True
        return False

    def _written(self, consumer: str, allocations: dict[str, Any]) -> dict[str, Any]:
        """A written consumer as a schedule answer places it: the host's zone,
        and each provider's own zone (the pool's: the root)."""
        owners = self.cluster.owners()
        host = next((rp for rp in allocations if rp in self.cluster.hosts),
                    next(iter(allocations)))
        return {"placements": [{
            "consumer_uuid": consumer, "zone": owners.get(host, "?"), "provider": host,
            "allocations": {rp: {"resources": a["resources"], "zone": owners.get(rp, "?")}
                            for rp, a in allocations.items()}}]}

    def schedule(self, c: httpx.Client, kind: str, body: dict[str, Any], rid: str, who: str,
                 *, first_timeout: float | None = None, retries: int = RETRIES) -> Request:
        req = self.history.request(rid, kind, {**body, "request_id": rid})
        for n in range(1, retries + 1):
            timeout = first_timeout if (n == 1 and first_timeout) else PATIENT_TIMEOUT
            att = self.send(c, req, who, n, timeout)
            if att.outcome != "unknown":
                break
            if self._stop.is_set() and who != "final":
                break  # the resolution pass after the run settles it
            time.sleep(0.2 + 0.3 * n)
        return req

    def send(self, c: httpx.Client, req: Request, who: str, number: int,
             timeout: float) -> Attempt:
        att = Attempt(who, number, self.history.now(), timeout)
        try:
            r = c.post("/strato/v1/schedule", json=req.body, timeout=timeout)
            att.status = r.status_code
            try:
                data = r.json()
            except ValueError:
                data = None
            if r.status_code == 200 and isinstance(data, dict):
                att.answer = data
            elif isinstance(data, dict) and data.get("errors"):
                att.code = data["errors"][0].get("code")
                att.error = str(data["errors"][0].get("detail", ""))[:300]
        except httpx.HTTPError as exc:
            att.error = f"{type(exc).__name__}: {exc}"[:300]
        att.done = self.history.now()
        self.history.add_attempt(req, att)
        if att.answer is not None:
            self._acknowledged(req.request_id, att.answer)
        return att

    def _acknowledged(self, rid: str, answer: dict[str, Any]) -> None:
        with self._lock:
            if rid in self._cancelled:
                return  # undone by the cancel: nothing of it to release
            for p in answer.get("placements", []):
                # Once: a duplicate's or a retry's 200 may come after the
                # consumer was released already.
                if p["consumer_uuid"] not in self._acked:
                    self._acked.add(p["consumer_uuid"])
                    self._live.append(Live(p["consumer_uuid"], rid, placement_zones(p)))

    # -- releases --------------------------------------------------------------------

    def _release(self, c: httpx.Client, rng: random.Random, who: str) -> None:
        for _ in range(rng.randint(1, 3)):
            with self._lock:
                if not self._live:
                    return
                live = self._live.pop(rng.randrange(len(self._live)))
            self.release(live, through_root=rng.random() < 0.4)

    def release(self, live: Live, *, through_root: bool = False) -> Release:
        """DELETE /allocations/{consumer} at each zone holding a part, or once at
        the root (the tree as one Placement: the root finds the zone below
        that holds it, and deletes its own pool's part too)."""
        rel = Release(live.consumer, live.request_id, self.history.now())
        if through_root:
            got = self._delete("root", live.consumer)
            rel.zones = {zone: got for zone in sorted(live.zones)}
        else:
            for zone in sorted(live.zones):
                rel.zones[zone] = self._delete(zone, live.consumer)
        rel.done = self.history.now()
        self.history.add_release(rel)
        return rel

    def _delete(self, zone: str, consumer: str) -> str:
        url = self.cluster.zones[zone].url
        why = ""
        for n in range(RETRIES):
            try:
                r = httpx.delete(f"{url}/allocations/{consumer}", headers=HEADERS, timeout=3.0)
                if r.status_code == 204:
                    return "deleted"
                if r.status_code == 404:
                    # After an attempt without an answer (a paused zone runs
                    # it when resumed), a 404 may be that attempt's doing.
                    return "absent" if n == 0 else "deleted (404 on a retry)"
                why = f"{r.status_code}"
            except httpx.HTTPError as exc:
                why = type(exc).__name__
            time.sleep(0.5)
        return f"failed ({why})"

    # -- after the run ---------------------------------------------------------------

    def resolve(self) -> int:
        """Resend, with the same id and body, every request that never got a
        definite answer, as its client would once the tree is back. Returns
        how many were resent."""
        # A write without a request id (kind nova) is not resent: the checker
        # holds it to all or nothing.
        todo = [r for r in self.history.requests.values()
                if not r.resolved() and r.kind != "nova"]
        uncancelled = [r for r in self.history.requests.values()
                       if r.cancels and r.cancelled_at() is None]
        with httpx.Client(base_url=self.cluster.root.url, headers=HEADERS) as c:
            # A cancel that got no answer is sent again first, as its admin
            # would: the request's own resend then finds it cancelled.
            for req in uncancelled:
                for _ in range(RETRIES):
                    if self.send_cancel(c, req):
                        break
                    time.sleep(1.0)
            for req in todo:
                for n in range(1, RETRIES + 1):
                    if self.send(c, req, "final", 100 + n, PATIENT_TIMEOUT).outcome != "unknown":
                        break
                    time.sleep(1.0)
        return len(todo)

    # -- room monitor (for liveness) ---------------------------------------------------

    def _monitor(self) -> None:
        cells = self.cluster.cells
        while not self._stop.wait(1.0):
            for cell in cells:
                self.history.add_room(RoomSample(self.history.now(), cell, self._room(cell)))

    def _room(self, cell: str) -> bool | None:
        try:
            r = httpx.get(self.cluster.zones[cell].url + "/strato/v1/summary",
                          headers=HEADERS, timeout=0.5)
            classes = r.json()["classes"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        return bool(classes["VCPU"]["largest_free"] >= 2
                    and classes["MEMORY_MB"]["largest_free"] >= 512)
