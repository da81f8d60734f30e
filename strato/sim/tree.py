"""Strato as a tree of zones, in this process: the scenario's zone tree, for real.

Every zone of the scenario becomes a real Strato app with its own SQLite
store (`strato.zone.inprocess`), wired to its parent through the in-process
transport; each zone's own hosts are bulk-loaded into its store. Requests go
to the root's POST /strato/v1/schedule (`delegate` or `best` mode), so they
travel down the tree as they would over HTTP; departures go to DELETE
/allocations at the zone that owns the consumer (the answer names its zone
path). The invariant snapshot is one per zone store.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strato.sim.cluster import HostSpec
from strato.sim.inprocess import outcome_from_answer, schedule_body
from strato.sim.invariants import StoreSnapshot, snapshot
from strato.sim.load import load_hosts
from strato.sim.scenario import Scenario
from strato.sim.target import Outcome, normalise_reason, reason_from_explain
from strato.sim.workload import SimRequest


def zone_prefix(site: str, hosts: Sequence[HostSpec]) -> str | None:
    """The zone's location prefix: its site, if every host below it is there."""
    return site if hosts and all(h.location[0] == site for h in hosts) else None


class InProcessTreeTarget:
    def __init__(self, hosts: Sequence[HostSpec], scenario: Scenario, *,
                 mode: str = "delegate") -> None:
        from strato.zone.inprocess import ZoneSpec, build

        self.name = f"strato-tree-{mode}"
        self.mode = mode
        self._tmp = tempfile.mkdtemp(prefix="strato-sim-tree-")
        self.loop = asyncio.new_event_loop()
        zones = scenario.zones()
        parent_of: dict[str, str | None] = {}
        for path, _ in zones:
            parts = path.split("/")
            parent_of[path] = parts[-2] if len(parts) > 1 else None
        specs = []
        for path, z in zones:
            below = [h for h in hosts if h.zone == path or h.zone.startswith(path + "/")]
            specs.append(ZoneSpec(name=z.name, parent=parent_of[path],
                                  location_prefix=zone_prefix(z.site, below), tags=z.tags))
        self.root = zones[0][1].name
        self.tree = build(Path(self._tmp), specs)
        for path, z in zones:
            own = [h for h in hosts if h.zone == path]
            if own:
                load_hosts(self.tree.dbs[z.name], own)
        self.loop.run_until_complete(self.tree.link())
        self.owner: dict[str, str] = {}  # consumer -> zone name

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def schedule(self, request: SimRequest) -> Outcome:
        body = {**schedule_body(request), "mode": self.mode}
        r = self._run(self.tree.client(self.root).post("/strato/v1/schedule", json=body))
        if r.status_code == 200:
            answer = r.json()
            for p in answer["placements"]:
                self.owner[p["consumer_uuid"]] = str(p["zone"]).split("/")[-1]
            return outcome_from_answer(answer)
        err = r.json() if r.content else {}
        if r.status_code == 409 and "explain" in err:
            return Outcome(reason=reason_from_explain(err["explain"]),
                           detail=err["errors"][0]["detail"])
        code = (err.get("errors") or [{}])[0].get("code", str(r.status_code))
        return Outcome(reason=normalise_reason(f"error: {code}"), detail=r.text[:500])

    def release(self, consumers: Sequence[str]) -> None:
        for c in consumers:
            zone = self.owner.pop(c, self.root)
            r = self._run(self.tree.client(zone).delete(f"/allocations/{c}"))
            if r.status_code not in (204, 404):
                raise RuntimeError(f"DELETE /allocations/{c} at {zone}: {r.status_code}")

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        return [snapshot(db, name) for name, db in self.tree.dbs.items()]

    def close(self) -> None:
        self._run(self.tree.aclose())
        self.loop.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
