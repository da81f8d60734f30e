"""Safety invariants, checked from every zone's own store after the run.

The state is read from each zone's own Placement API (GET /resource_providers,
/resource_providers/{u}/inventories, /usages, /allocations, and
GET /allocations/{consumer} as a cross-check), never through the tree, after
every fault is healed, holds have expired and reconciliation went quiet.

How an answer is read (the client's view, which is what the system promised):

* 200: the request is acknowledged; its placements are a promise. Every
  acknowledged consumer must be held exactly as the answer said (same
  providers, same amounts) at the zones the answer named (`zone`, and
  `shared_zone` / the pool allocation's `zone` for a split part), and nowhere
  else, until the client releases it. Several 200s for one id must agree.
* 409 `strato.no_valid_placement`: a definite refusal.
* anything else (no answer, a timeout, 5xx, 503 `strato.zone_unavailable`,
  409 `strato.request_in_progress` or another 409): an unknown outcome; the
  client retries with the same id and body (during the run, and once more
  after healing, the resolution pass).

The rule for unknown outcomes is strict on purpose: after healing and
reconciliation, a request that never got a 200 must hold nothing anywhere,
whatever its other answers were (refusals, timeouts, 503s). A request that got
a 200 on any attempt (a later retry included) must be placed exactly once, as
that answer said. A server that placed something but could not say so must
undo it (hold expiry, cancel by request id), or answer the retry with it.

Invariants, each reported with the request id, consumer, zones and the
history lines that led to it:

* over_capacity: no provider holds more than (total - reserved) * ratio.
* acked_missing / acked_differs: an acknowledged consumer is not held (at
  the end, or when its release found nothing: 404), or held with other
  providers or amounts than answered.
* placed_twice: an acknowledged consumer's compute also held in a cell its
  answer did not name (e.g. a duplicate request id placed in two cells).
* extra_zone: any other part held in a zone its answer did not name.
* answers_disagree: two 200s for one request id that place a consumer
  differently (a duplicate id placed twice).
* refused_but_held: every answer was a definite refusal, yet it holds.
* unacknowledged_but_held: no 200 ever, yet it holds.
* partial_write: a Nova-style allocations write across zones (PUT at the
  root naming the root's pool and a cell's host; a 204 reads as a 200, a
  fresh consumer's 409 as a refusal) with no definite answer holds some of
  its parts but not all, or other amounts than written.
* unplaced_but_held: atomic=false, the answer listed it unplaced, yet it holds.
* released_but_held: the client released it (every DELETE 204/404), yet a
  zone its answer named still holds it (parts elsewhere: placed_twice).
* anti_affinity: two live members of a hard anti-affinity group share the
  failure domain at the group's level.
* spread: more live instances of one request in one domain than its hard
  topology spread rule's max_per_domain.
* cancelled_but_held: an admin cancelled the request by its id (the cancel
  answered 200, or an attempt was answered 409 request_cancelled), whatever
  its answers were before, yet it holds.
* placed_after_cancel: an attempt sent after a cancel was carried out got a
  200 (a cancelled id must be refused, never placed again).
* own_consumers_refused: a schedule request was answered 409
  placement.concurrent_update ("consumer exists") although no other request
  of the run names its consumers: only its own earlier tries could hold
  them, and what a lost try left is no answer (a 503 until it is cancelled).
* stray_allocation: a consumer no request of this run named.
* inconsistent_read: GET /allocations/{consumer} and the providers'
  allocations disagree.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.chaos.cluster import HEADERS, LEVELS, Cluster
from tests.chaos.history import History, Request
from tests.chaos.workload import zone_of

CONCURRENT_UPDATE = "placement.concurrent_update"

# zone -> consumer -> provider -> resource class -> amount
Holdings = dict[str, dict[str, dict[str, dict[str, int]]]]


@dataclass
class Violation:
    kind: str
    detail: str
    request_id: str | None = None
    consumer: str | None = None
    zones: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)

    def report(self) -> str:
        head = f"[{self.kind}] {self.detail}"
        if self.request_id:
            head += f"\n  request {self.request_id}"
        if self.consumer:
            head += f" consumer {self.consumer}"
        if self.zones:
            head += f" zones {','.join(self.zones)}"
        return "\n".join([head, *self.history])


@dataclass
class Snapshot:
    holdings: Holdings
    # (zone, provider, class) -> capacity, used (sum of allocations), usages endpoint
    capacity: dict[tuple[str, str, str], int]
    used: dict[tuple[str, str, str], int]
    usages: dict[tuple[str, str, str], int]

    def held(self, consumer: str) -> dict[str, dict[str, dict[str, int]]]:
        return {z: byc[consumer] for z, byc in self.holdings.items()
                if byc.get(consumer)}

    def fingerprint(self) -> tuple[Any, ...]:
        return tuple(sorted((z, c, p, rc, n) for z, byc in self.holdings.items()
                            for c, byp in byc.items() for p, res in byp.items()
                            for rc, n in res.items()))


def snapshot(cluster: Cluster) -> Snapshot:
    holdings: Holdings = {}
    capacity: dict[tuple[str, str, str], int] = {}
    used: dict[tuple[str, str, str], int] = defaultdict(int)
    usages: dict[tuple[str, str, str], int] = {}
    owner = cluster.owners()
    for name, z in cluster.zones.items():
        byc: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
        with httpx.Client(base_url=z.url, headers=HEADERS, timeout=10.0) as c:
            for rp in _get(c, "/resource_providers")["resource_providers"]:
                u = rp["uuid"]
                if owner.get(u, name) != name:
                    # Another zone's provider, seen through the tree (the root
                    # as one Placement): counted once, at its owner.
                    continue
                for rc, inv in _get(c, f"/resource_providers/{u}/inventories")[
                        "inventories"].items():
                    capacity[(name, u, rc)] = int(
                        (inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
                for rc, n in _get(c, f"/resource_providers/{u}/usages")["usages"].items():
                    usages[(name, u, rc)] = int(n)
                for consumer, a in _get(c, f"/resource_providers/{u}/allocations")[
                        "allocations"].items():
                    byc[consumer][u] = {rc: int(n) for rc, n in a["resources"].items()}
                    for rc, n in a["resources"].items():
                        used[(name, u, rc)] += int(n)
        holdings[name] = dict(byc)
    return Snapshot(holdings, capacity, dict(used), usages)


def _get(c: httpx.Client, path: str) -> dict[str, Any]:
    r = c.get(path)
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def expected_parts(placement: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """zone -> provider -> resources, as one answer's placement says."""
    owner = zone_of(str(placement["zone"]))
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for provider, alloc in placement["allocations"].items():
        zone = zone_of(str(alloc["zone"])) if alloc.get("zone") else owner
        out[zone][provider] = {rc: int(n) for rc, n in alloc["resources"].items()}
    return dict(out)


class Checker:
    def __init__(self, cluster: Cluster, history: History, snap: Snapshot) -> None:
        self.cluster = cluster
        self.history = history
        self.snap = snap
        self.violations: list[Violation] = []

    def run(self, *, cross_check: bool = True) -> list[Violation]:
        self._capacity()
        self._requests()
        self._own_consumers()
        self._strays()
        self._anti_affinity()
        self._spread_caps()
        if cross_check:
            self._cross_check()
        return self.violations

    def _add(self, kind: str, detail: str, req: Request | None = None,
             consumer: str | None = None, zones: list[str] | None = None) -> None:
        lines = req.lines() if req else []
        if consumer:
            lines += [r.line() for r in self.history.releases_of(consumer)]
        self.violations.append(Violation(kind, detail, req.request_id if req else None,
                                         consumer, sorted(zones or []), lines))

    def _capacity(self) -> None:
        for key, cap in self.snap.capacity.items():
            for what, n in (("allocations", self.snap.used.get(key, 0)),
                            ("usages", self.snap.usages.get(key, 0))):
                if n > cap:
                    zone, provider, rc = key
                    holders = sorted(c for c, byp in self.snap.holdings[zone].items()
                                     if rc in byp.get(provider, {}))
                    self._add("over_capacity", f"{rc} on {provider} in {zone}: {what} "
                              f"{n} > capacity {cap}; held by {holders}", zones=[zone])

    def _requests(self) -> None:
        for req in self.history.requests.values():
            if req.cancels:
                self._cancelled(req)
                continue
            oks = req.oks()
            if oks:
                self._acknowledged(req, oks)
                continue
            refused_only = bool(req.attempts) and all(a.outcome == "refused"
                                                      for a in req.attempts)
            if req.kind == "nova" and not refused_only:
                self._write_unknown(req)
                continue
            for consumer in req.consumers:
                held = self.snap.held(consumer)
                if held:
                    kind = "refused_but_held" if refused_only else "unacknowledged_but_held"
                    self._add(kind, f"no 200 for this request, yet held: {held}", req,
                              consumer, list(held))

    def _own_consumers(self) -> None:
        named: dict[str, int] = defaultdict(int)
        for req in self.history.requests.values():
            for consumer in req.consumers:
                named[consumer] += 1
        for req in self.history.requests.values():
            if req.kind == "nova" or any(named[c] > 1 for c in req.consumers):
                continue
            for a in req.attempts:
                if a.status == 409 and a.code == CONCURRENT_UPDATE:
                    self._add("own_consumers_refused", f"attempt #{a.number} was answered "
                              f"409 {CONCURRENT_UPDATE}: {a.error}", req)

    def _cancelled(self, req: Request) -> None:
        """A request an admin cancelled by its id, racing its attempts: once
        the cancel is carried out, nothing of it may stay held, and no attempt
        sent after may be placed. A cancel that never got an answer may or may
        not have been carried out: each consumer then holds nothing, or what
        a 200 said."""
        at = req.cancelled_at()
        done = at is not None or any(a.outcome == "cancelled" for a in req.attempts)
        if at is not None:
            for a in req.oks():
                if a.sent > at:
                    self._add("placed_after_cancel", f"attempt #{a.number} sent at "
                              f"{a.sent:.3f}, after the cancel carried out at {at:.3f}, "
                              "was placed", req)
        oks = req.oks()
        placed = {p["consumer_uuid"]: p for p in oks[0].answer["placements"]} if oks else {}
        for consumer in req.consumers:
            held = self.snap.held(consumer)
            if not held:
                continue
            if done:
                self._add("cancelled_but_held", f"cancelled, yet held: {held}", req,
                          consumer, list(held))
                continue
            p = placed.get(consumer)
            if p is None:
                self._add("unacknowledged_but_held", f"no 200 for this request, yet "
                          f"held: {held}", req, consumer, list(held))
            elif held != expected_parts(p):
                self._add("acked_differs", f"answered {expected_parts(p)}, held {held}",
                          req, consumer, list(held))

    def _write_unknown(self, req: Request) -> None:
        """An allocations write across zones with no definite answer: made
        whole (every zone's part, as written) or not at all."""
        owners = self.cluster.owners()
        want: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
        for rp, a in req.body["allocations"].items():
            want[owners.get(rp, "?")][rp] = {rc: int(n) for rc, n in a["resources"].items()}
        for consumer in req.consumers:
            held = self.snap.held(consumer)
            if held and held != dict(want):
                self._add("partial_write", f"a write with no definite answer holds {held}, "
                          f"not all or nothing of {dict(want)}", req, consumer, list(held))

    def _acknowledged(self, req: Request, oks: list[Any]) -> None:
        first = oks[0].answer
        placed = {p["consumer_uuid"]: p for p in first["placements"]}
        for other in oks[1:]:
            mine = {p["consumer_uuid"]: (p["zone"], p["provider"], p["allocations"])
                    for p in other.answer["placements"]}
            theirs = {c: (p["zone"], p["provider"], p["allocations"])
                      for c, p in placed.items()}
            if mine != theirs:
                self._add("answers_disagree", "two 200 answers for one request id place "
                          "its consumers differently", req)
        for consumer in req.consumers:
            held = self.snap.held(consumer)
            p = placed.get(consumer)
            if p is None:
                if held:
                    self._add("unplaced_but_held", f"answered unplaced, yet held: {held}",
                              req, consumer, list(held))
                continue
            want = expected_parts(p)
            released = self.history.releases_of(consumer)
            if released:
                # A part whose DELETE got no definite answer may remain.
                unsure = {z for rel in released for z, r in rel.zones.items()
                          if r.startswith("failed")}
                # A 404 from a zone the answer named: the placement was lost
                # before the client let it go.
                gone = sorted({z for rel in released for z, r in rel.zones.items()
                               if r == "absent" and z in want})
                if gone:
                    self._add("acked_missing", f"answered at {gone}, but the release "
                              "found nothing there (404)", req, consumer, gone)
                left = {z: h for z, h in held.items() if z not in unsure}
                named = {z: h for z, h in left.items() if z in want}
                if named:
                    self._add("released_but_held", f"released, yet held: {named}", req,
                              consumer, list(named))
                self._extra(req, consumer, want, {z: h for z, h in left.items()
                                                  if z not in want})
                continue
            for zone, parts in want.items():
                got = held.get(zone)
                if not got:
                    self._add("acked_missing", f"answered at {zone} with {parts}, but "
                              f"{zone} holds nothing (held: {held})", req, consumer,
                              [zone])
                elif got != parts:
                    self._add("acked_differs", f"answered {parts} at {zone}, held {got}",
                              req, consumer, [zone])
            self._extra(req, consumer, want, {z: h for z, h in held.items()
                                              if z not in want})

    def _extra(self, req: Request, consumer: str, want: dict[str, Any],
               extra: dict[str, dict[str, dict[str, int]]]) -> None:
        """Parts held in zones the answer did not name. Compute in a second
        cell is a double placement (a duplicate id or a retry run twice);
        anything else a stray part."""
        if not extra:
            return
        twice = any(p in self.cluster.hosts for h in extra.values() for p in h)
        self._add("placed_twice" if twice else "extra_zone",
                  f"answered at {sorted(want)}, also held at {extra}", req, consumer,
                  list(extra) + list(want))

    def _strays(self) -> None:
        known = self.history.consumer_index()
        for zone, byc in self.snap.holdings.items():
            for consumer, held in byc.items():
                if consumer not in known:
                    self._add("stray_allocation", f"no request named it: {held}",
                              consumer=consumer, zones=[zone])

    def _anti_affinity(self) -> None:
        groups: dict[tuple[str, str], list[Request]] = defaultdict(list)
        for req in self.history.requests.values():
            for rule in req.body.get("constraints", []):
                if rule.get("type") == "anti_affinity" and rule.get("hard", True):
                    groups[(req.body["group"], rule.get("level", "host"))].append(req)
        for (group, level), reqs in groups.items():
            depth = LEVELS.index(level) + 1 if level in LEVELS else 0
            seen: dict[str, tuple[str, Request]] = {}
            for req in reqs:
                for consumer in req.consumers:
                    for zone, held in self.snap.held(consumer).items():
                        for provider in held:
                            host = self.cluster.hosts.get(provider)
                            if host is None:
                                continue  # a pool, not a host
                            # Level `zone`: each child zone of the root is a domain.
                            domain = ("/".join(host.location.split("/")[:depth]) if depth
                                      else self.cluster.zones[zone].path.split("/")[1])
                            if domain in seen and seen[domain][0] != consumer:
                                other, oreq = seen[domain]
                                self._add("anti_affinity", f"group {group} ({level}): "
                                          f"{consumer} and {other} both in {domain}", req,
                                          consumer, [zone])
                                if oreq is not req:
                                    self.violations[-1].history += oreq.lines()
                            seen.setdefault(domain, (consumer, req))

    def _domain(self, zone: str, provider: str, level: str) -> str | None:
        """The domain of a host at `level` (level `zone`: the root's child zone
        it is under); None for a pool."""
        host = self.cluster.hosts.get(provider)
        if host is None:
            return None
        depth = LEVELS.index(level) + 1 if level in LEVELS else 0
        return ("/".join(host.location.split("/")[:depth]) if depth
                else self.cluster.zones[zone].path.split("/")[1])

    def _spread_caps(self) -> None:
        """A hard topology spread rule's max_per_domain: never more of one
        request's live instances in one domain."""
        for req in self.history.requests.values():
            for rule in req.body.get("constraints", []):
                most = rule.get("max_per_domain")
                if rule.get("type") != "spread" or not rule.get("hard", True) or not most:
                    continue
                level = rule.get("level", "host")
                count: dict[str, set[str]] = defaultdict(set)
                for consumer in req.consumers:
                    for zone, held in self.snap.held(consumer).items():
                        for provider in held:
                            d = self._domain(zone, provider, level)
                            if d is not None:
                                count[d].add(consumer)
                for d, cs in count.items():
                    if len(cs) > most:
                        self._add("spread", f"{len(cs)} instances in {level} {d}, at most "
                                  f"{most}", req, sorted(cs)[0], [])

    def _cross_check(self) -> None:
        """GET /allocations/{consumer} at each zone that should hold an
        acknowledged, live consumer agrees with the providers' view."""
        released = {r.consumer for r in self.history.releases}
        index = self.history.consumer_index()
        owner = self.cluster.owners()
        clients = {n: httpx.Client(base_url=z.url, headers=HEADERS, timeout=10.0)
                   for n, z in self.cluster.zones.items()}
        try:
            for zone, byc in self.snap.holdings.items():
                for consumer, held in byc.items():
                    if consumer in released or consumer not in index:
                        continue
                    got = _get(clients[zone], f"/allocations/{consumer}")["allocations"]
                    view = {p: {rc: int(n) for rc, n in a["resources"].items()}
                            for p, a in got.items() if owner.get(p, zone) == zone}
                    if view != held:
                        self._add("inconsistent_read", f"GET /allocations/{consumer} at "
                                  f"{zone} says {view}, providers say {held}",
                                  index[consumer], consumer, [zone])
        finally:
            for c in clients.values():
                c.close()


def quiesce(cluster: Cluster, *, settle: float, limit: float,
            log: Callable[[str], None] = print) -> tuple[Snapshot, float]:
    """After `settle` seconds (for holds to expire), wait until reconciliation
    went quiet: no request in doubt at any zone with children, and two
    snapshots 2 s apart equal.
    Bounded by `limit` seconds; returns the last snapshot and the time taken."""
    began = time.monotonic()
    time.sleep(settle)
    last: Snapshot | None = None
    while True:
        doubt = _in_doubt(cluster)
        snap = snapshot(cluster)
        waited = time.monotonic() - began
        if last is not None and doubt == 0 and snap.fingerprint() == last.fingerprint():
            return snap, waited
        if waited > limit:
            log(f"quiesce: not quiet after {waited:.0f}s ({doubt} in doubt); checking anyway")
            return snap, waited
        last = snap
        time.sleep(2.0)


def _in_doubt(cluster: Cluster) -> int:
    total = 0
    for name in ("root", "mid1", "mid2"):
        try:
            r = httpx.get(cluster.zones[name].url + "/strato/v1/children", headers=HEADERS,
                          timeout=5.0)
            total += sum(int(k.get("in_doubt", 0)) for k in r.json()["children"])
        except (httpx.HTTPError, ValueError, KeyError):
            total += 1  # not answering is not quiet
    return total
