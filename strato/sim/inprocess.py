"""Strato itself as a simulation target: one zone, in this process, no HTTP.

A fresh store (SQLite file in a temporary directory, or an empty PostgreSQL
database by URL) is loaded with the scenario's hosts in bulk; requests go
through the real `LocalScheduler` (engine, solver, claim in a store
transaction) and departures through the store's `claim()` with empty
allocations, exactly the path DELETE /allocations takes.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strato.engine.service import Engine, EngineConfig
from strato.model import errors
from strato.model.schedule import ScheduleRequest
from strato.sim.cluster import HostSpec
from strato.sim.invariants import StoreSnapshot, snapshot
from strato.sim.load import load_hosts
from strato.sim.target import Outcome, Placed, normalise_reason, reason_from_explain
from strato.sim.workload import SimRequest
from strato.store.allocations import ConsumerClaim, claim
from strato.store.db import Database
from strato.zone.scheduler import LocalScheduler, NoValidPlacement

PROJECT = "sim"


def schedule_body(request: SimRequest) -> dict[str, Any]:
    """The POST /strato/v1/schedule body for a simulated request."""
    constraints: list[dict[str, Any]] = []
    for r in request.rules:
        rule: dict[str, Any] = {"type": r.type, "hard": r.hard, "weight": r.weight}
        if r.type == "location":
            rule["pattern"] = r.pattern
        elif r.type == "tags":
            rule["required"] = list(r.required)
            rule["forbidden"] = list(r.forbidden)
        else:
            rule["level"] = r.level
        constraints.append(rule)
    group: dict[str, Any] = {"resources": dict(request.resources)}
    if request.required_traits:
        group["required"] = list(request.required_traits)
    body: dict[str, Any] = {"consumers": list(request.consumers), "project_id": PROJECT,
                            "user_id": PROJECT, "groups": [group],
                            "constraints": constraints,
                            "weigher": {"name": request.weigher, "spare": request.spare}}
    if request.group:
        body["group"] = request.group
    return body


def outcome_from_answer(answer: dict[str, Any]) -> Outcome:
    placed = tuple(
        Placed(consumer=p["consumer_uuid"], host=p["provider"],
               allocations={rp: dict(a["resources"]) for rp, a in p["allocations"].items()})
        for p in answer["placements"])
    return Outcome(placements=placed, retries=int(answer.get("retries", 0)),
                   relaxed=len(answer.get("relaxed", [])))


class InProcessZone:
    """One Strato zone in this process: store + engine + LocalScheduler."""

    def __init__(self, hosts: Sequence[HostSpec], *, levels: tuple[str, ...],
                 url: str | None = None, zone: str = "sim", name: str = "strato",
                 sqlite_synchronous: str = "NORMAL") -> None:
        self.name = name
        self.zone = zone
        self._tmp: str | None = None
        if url is None:
            self._tmp = tempfile.mkdtemp(prefix="strato-sim-")
            url = f"sqlite:///{Path(self._tmp) / 'zone.db'}"
        # NORMAL: WAL commits without an fsync each; a simulated zone needs
        # speed, not durability across power loss.
        self.db = Database(url, sqlite_synchronous=sqlite_synchronous)
        load_hosts(self.db, hosts)
        self.engine = Engine(self.db, EngineConfig())
        # Bulk-loaded hosts have no agent, so they are never stale.
        self.scheduler = LocalScheduler(self.engine, zone=zone, levels=levels)
        self.engine.refresh()

    def schedule(self, request: SimRequest) -> Outcome:
        req = ScheduleRequest.model_validate(schedule_body(request))
        try:
            return outcome_from_answer(self.scheduler.schedule(req))
        except NoValidPlacement as exc:
            return Outcome(reason=reason_from_explain(exc.explain), detail=exc.detail)
        except errors.StratoError as exc:
            # A refusal that is not "nothing fits" (e.g. gave up after retries).
            return Outcome(reason=normalise_reason(f"error: {exc.code}"), detail=exc.detail)

    def release(self, consumers: Sequence[str]) -> None:
        with self.db.write() as conn:
            claim(conn, [ConsumerClaim(consumer_uuid=c) for c in consumers])

    def snapshot_for_invariants(self) -> list[StoreSnapshot]:
        return [snapshot(self.db, self.zone)]

    def databases(self) -> list[Database]:
        return [self.db]

    def close(self) -> None:
        self.engine.close()
        self.db.dispose()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
