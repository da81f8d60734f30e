"""A running Strato server as a simulation target, over HTTP, in (scaled) real time.

The cluster is registered through the public API (providers, inventories,
traits, location and tags) unless `register=False` says the server already
has it; requests go to POST /strato/v1/schedule and departures to
DELETE /allocations/{consumer}, as any client would. The invariant snapshot
is read through the API too (inventories and allocations per provider), so
it checks what the server stores, not what the simulator believes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from strato.sim.cluster import HostSpec
from strato.sim.inprocess import outcome_from_answer, schedule_body
from strato.sim.invariants import StoreSnapshot
from strato.sim.target import Outcome, normalise_reason, reason_from_explain
from strato.sim.workload import SimRequest

MICROVERSION = "placement 1.39"


class LiveRefused(RuntimeError):
    """The live zone answered a call with an error (a wrong token, a name taken)."""

    def __init__(self, r: httpx.Response) -> None:
        super().__init__(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
        self.response = r


class LiveTarget:
    def __init__(self, url: str, hosts: Sequence[HostSpec], *, token: str = "admin",
                 register: bool = True, name: str = "strato-live",
                 timeout: float = 60.0) -> None:
        """`timeout`: seconds to wait for each answer (`strato sim --timeout`;
        more than a zone's own 30 s budget for a schedule request, so that
        its answer, 503 when it ran out, is heard)."""
        self.name = name
        self.hosts = list(hosts)
        # Consumers placed and not yet released: released at close(), so that
        # the zone is left as it was found (a run again, --no-register and
        # the same seed, found the last one's consumers holding room).
        self.held: set[str] = set()
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, headers={
            "X-Auth-Token": token, "OpenStack-API-Version": MICROVERSION})
        if register:
            for h in self.hosts:
                self._register(h)

    def _ok(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            raise LiveRefused(r)
        return r.json() if r.content else None

    def _register(self, h: HostSpec) -> None:
        self._ok(self.http.post("/resource_providers", json={"name": h.name, "uuid": h.uuid}))
        invs = {rc: {"total": i.total, "reserved": i.reserved,
                     "allocation_ratio": i.allocation_ratio, "min_unit": i.min_unit,
                     "max_unit": i.max_unit or i.total, "step_size": i.step_size}
                for rc, i in h.inventory.items()}
        got = self._ok(self.http.put(f"/resource_providers/{h.uuid}/inventories", json={
            "resource_provider_generation": 0, "inventories": invs}))
        if h.traits:
            for t in h.traits:
                if t.startswith("CUSTOM_"):
                    self.http.put(f"/traits/{t}")
            self._ok(self.http.put(f"/resource_providers/{h.uuid}/traits", json={
                "traits": list(h.traits),
                "resource_provider_generation": got["resource_provider_generation"]}))
        self._ok(self.http.put(f"/strato/v1/providers/{h.uuid}/meta", json={
            "location": "/".join(h.location), "tags": list(h.tags)}))

    def schedule(self, request: SimRequest) -> Outcome:
        r = self.http.post("/strato/v1/schedule", json=schedule_body(request))
        if r.status_code == 200:
            outcome = outcome_from_answer(r.json())
            self.held.update(p.consumer for p in outcome.placements)
            return outcome
        body = r.json() if r.content else {}
        if r.status_code == 409 and "explain" in body:
            return Outcome(reason=reason_from_explain(body["explain"]),
                           detail=body["errors"][0]["detail"])
        code = (body.get("errors") or [{}])[0].get("code", str(r.status_code))
        return Outcome(reason=normalise_reason(f"error: {code}"), detail=r.text[:500])

    def release(self, consumers: Sequence[str]) -> None:
        for c in consumers:
            r = self.http.delete(f"/allocations/{c}")
            if r.status_code not in (204, 404):
                raise RuntimeError(f"DELETE /allocations/{c}: {r.status_code} {r.text}")
            self.held.discard(c)

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        snap = StoreSnapshot(zone=self.name)
        for h in self.hosts:
            invs = self._ok(self.http.get(f"/resource_providers/{h.uuid}/inventories"))
            snap.capacity[h.uuid] = {
                rc: int((i["total"] - i["reserved"]) * i["allocation_ratio"])
                for rc, i in invs["inventories"].items()}
            allocs = self._ok(self.http.get(f"/resource_providers/{h.uuid}/allocations"))
            for consumer, a in allocs["allocations"].items():
                per = snap.allocations.setdefault(consumer, {}).setdefault(h.uuid, {})
                for rc, amount in a["resources"].items():
                    per[rc] = per.get(rc, 0) + int(amount)
        return [snap]

    def close(self) -> None:
        """Release what the run still holds (best effort: a zone that stopped
        answering keeps it), then close the connection."""
        try:
            for c in sorted(self.held):
                self.http.delete(f"/allocations/{c}")
        except httpx.HTTPError:
            pass
        self.held.clear()
        self.http.close()
