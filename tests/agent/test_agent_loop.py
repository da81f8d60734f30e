"""The agent's cycle against a scripted zone: steady state, 409 retry, lost provider, backoff."""

from __future__ import annotations

import threading
from typing import Any

from strato.agent.agent import Agent
from strato.agent.client import GenerationConflict, ProviderGone, ZoneUnavailable
from strato.agent.config import AgentConfig
from strato.agent.facts import HostFacts

UUID = "0c1b4b4e-7f8a-4d7e-9b7c-3a2f0e4d5c6b"


class FakeZone:
    """Just enough of the zone for the agent, counting calls."""

    def __init__(self) -> None:
        self.providers: dict[str, str] = {}
        self.generation = 0
        self.inventories: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.conflicts = 0  # how many PUTs to refuse with 409
        self.down = False

    def _call(self, name: str) -> None:
        if self.down:
            raise ZoneUnavailable("connection refused")
        self.calls.append(name)

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        self._call("get_provider")
        return {"name": self.providers[uuid]} if uuid in self.providers else None

    def create_provider(self, uuid: str, name: str) -> dict[str, Any]:
        self._call("create_provider")
        self.providers[uuid] = name
        self.generation, self.inventories = 0, {}
        return {}

    def get_inventories(self, uuid: str) -> tuple[int, dict[str, dict[str, Any]]]:
        self._call("get_inventories")
        return self.generation, dict(self.inventories)

    def get_usages(self, uuid: str) -> tuple[int, dict[str, int]]:
        self._call("get_usages")
        return self.generation, {}

    def put_inventories(self, uuid: str, gen: int, invs: dict[str, dict[str, Any]]) -> int:
        self._call("put_inventories")
        if self.conflicts:
            self.conflicts -= 1
            self.generation += 1  # someone else wrote
            raise GenerationConflict(409, "placement.concurrent_update", "stale")
        assert gen == self.generation
        self.inventories, self.generation = invs, gen + 1
        return self.generation

    def heartbeat(self, uuid: str) -> int:
        self._call("heartbeat")
        if uuid not in self.providers:
            raise ProviderGone(404, "placement.resource_provider.not_found", "gone")
        return self.generation

    def close(self) -> None:
        pass


class FixedFacts:
    def collect(self) -> HostFacts:
        return HostFacts(vcpu=4, memory_mb=8192, disk_gb=10)


def make_agent(zone: FakeZone) -> Agent:
    cfg = AgentConfig(zone_url="http://z", uuid=UUID, name="h", interval=0.01,
                      max_backoff=0.05)
    return Agent(cfg, client=zone, collector=FixedFacts())  # type: ignore[arg-type]


def test_steady_state_is_one_heartbeat() -> None:
    zone = FakeZone()
    agent = make_agent(zone)
    agent.report()
    assert zone.inventories["VCPU"]["total"] == 4
    zone.calls.clear()
    agent.report()
    agent.report()
    assert zone.calls == ["heartbeat", "heartbeat"]


def test_conflict_rereads_and_retries() -> None:
    zone = FakeZone()
    zone.conflicts = 2
    agent = make_agent(zone)
    agent.report()
    assert agent.stats.conflicts == 2 and zone.inventories["MEMORY_MB"]["total"] == 8192


def test_lost_provider_is_registered_again_and_outage_is_survived() -> None:
    zone = FakeZone()
    agent = make_agent(zone)
    agent.report()
    zone.providers.clear()  # the zone came back on a new database
    zone.down = True
    stop = threading.Event()
    assert agent.run(stop, once=True) == 1
    zone.down = False
    assert agent.run(stop, once=True) == 0  # after an outage: full resync, registers again
    assert zone.providers == {UUID: "h"} and zone.inventories["VCPU"]["total"] == 4
    zone.providers.clear()  # deleted while the zone stayed up
    assert agent.run(stop, once=True) == 1  # the heartbeat's 404 ...
    assert agent.run(stop, once=True) == 0  # ... makes the next cycle register
    assert zone.providers == {UUID: "h"}
    assert all(0 < agent.backoff(n) <= 0.05 for n in range(1, 40))
