"""The agent's loop: register, report what changed, heartbeat, back off when the zone is away.

One cycle (``report``):

1. on start, and after any failure: make sure the provider exists under our
   UUID and name, put location and tags if configured, and re-read the
   zone's inventories and usages (a full resync: the zone may have restarted
   on a new database, or an operator may have changed things);
2. measure the host and heartbeat; the heartbeat's answer carries the
   provider generation, so a steady host re-reads nothing;
3. if the inventory the zone should hold differs from what it holds, PUT it
   with the generation read; on 409 re-read and plan again.

A steady-state cycle is one small POST.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Any

from strato.agent.client import (
    GenerationConflict,
    ProviderGone,
    ZoneClient,
    ZoneRefused,
    ZoneUnavailable,
)
from strato.agent.config import AgentConfig
from strato.agent.facts import FactsCollector
from strato.agent.inventory import plan

log = logging.getLogger("strato.agent")

_PUT_ATTEMPTS = 5


@dataclass
class Stats:
    cycles: int = 0
    heartbeats: int = 0
    inventory_writes: int = 0
    conflicts: int = 0
    failures: int = 0


class Agent:
    def __init__(self, config: AgentConfig, client: ZoneClient | None = None,
                 collector: FactsCollector | None = None) -> None:
        assert config.uuid is not None and config.name is not None, "validate the config"
        self.config = config
        self.uuid: str = config.uuid
        self.name: str = config.name
        self.client = client or ZoneClient(config.zone_url, config.token or "admin",
                                           config.timeout)
        self.collector = collector or FactsCollector(config.disk_paths, config.facts_file)
        self.stats = Stats()
        self._synced = False
        self._generation = -1
        self._inventories: dict[str, dict[str, Any]] = {}
        self._placed: dict[str, int] = {}
        self._over: dict[str, tuple[int, int]] = {}

    # --- one cycle -------------------------------------------------------------

    def report(self) -> None:
        """One report; raises ZoneUnavailable / ZoneRefused for the loop to back off."""
        self.stats.cycles += 1
        if not self._synced:
            self._register()
            self._sync_meta()
            self._reread()
            self._synced = True
        facts = self.collector.collect()
        try:
            generation = self.client.heartbeat(self.uuid)
        except ProviderGone:
            self._synced = False
            raise
        self.stats.heartbeats += 1
        if generation != self._generation:
            self._reread()
        for _ in range(_PUT_ATTEMPTS):
            p = plan(facts, self.config, self._inventories, self._placed)
            self._warn_over_capacity(p.over_capacity)
            if not p.changed:
                log.debug("report %d: heartbeat only", self.stats.cycles)
                return
            try:
                self._generation = self.client.put_inventories(
                    self.uuid, self._generation, p.inventories)
            except GenerationConflict:
                self.stats.conflicts += 1
                self._reread()
                continue
            self._inventories = p.inventories
            self.stats.inventory_writes += 1
            log.info("reported inventory %s (external usage reserved: %s)",
                     _brief(p.inventories), p.external)
            return
        raise ZoneRefused(409, "placement.concurrent_update",
                          f"inventory still conflicting after {_PUT_ATTEMPTS} attempts")

    def _register(self) -> None:
        found = self.client.get_provider(self.uuid)
        if found is None:
            try:
                self.client.create_provider(self.uuid, self.name)
                log.info("registered provider %s (%s)", self.name, self.uuid)
                return
            except ZoneRefused as exc:
                if exc.status != 409:
                    raise
                # Another start raced us to it, or the name belongs to another uuid.
                found = self.client.get_provider(self.uuid)
                if found is None:
                    raise ZoneRefused(409, exc.code, f"cannot register {self.uuid}: "
                                      f"{exc.detail} (pass --name or --uuid)") from None
        if found["name"] != self.name:
            self.client.rename_provider(self.uuid, self.name)
            log.info("renamed provider %s to %s", self.uuid, self.name)

    def _sync_meta(self) -> None:
        if self.config.location is None and self.config.tags is None:
            return
        have = self.client.get_meta(self.uuid)
        location = self.config.location if self.config.location is not None \
            else have["own_location"]
        tags = list(self.config.tags) if self.config.tags is not None else have["tags"]
        if (location, sorted(tags)) != (have["own_location"], have["tags"]):
            self.client.put_meta(self.uuid, location, tags)
            log.info("set location %s, tags %s", location, tags)

    def _reread(self) -> None:
        self._generation, self._inventories = self.client.get_inventories(self.uuid)
        _, self._placed = self.client.get_usages(self.uuid)

    def _warn_over_capacity(self, over: dict[str, tuple[int, int]]) -> None:
        if over == self._over:
            return
        for rc, (cap, used) in sorted(over.items()):
            log.warning(
                "%s shrank below current usage: capacity %d < allocated %d. Existing "
                "allocations are kept; the provider takes no new %s until usage drops",
                rc, cap, used, rc)
        for rc in sorted(self._over.keys() - over.keys()):
            log.info("%s is no longer over capacity", rc)
        self._over = dict(over)

    # --- the loop --------------------------------------------------------------

    def backoff(self, failures: int) -> float:
        """Exponential from the interval, capped, with jitter so hosts do not stampede."""
        base = min(self.config.max_backoff, self.config.interval * 2 ** min(failures - 1, 30))
        return base * random.uniform(0.5, 1.0)

    def run(self, stop: threading.Event, *, once: bool = False) -> int:
        """Report every interval until `stop` is set; 0 when the last report succeeded."""
        failures = 0
        while not stop.is_set():
            try:
                self.report()
                if failures:
                    log.info("zone reachable again after %d failed attempt(s)", failures)
                failures = 0
                delay = self.config.interval
            except Exception as exc:  # never crash: whatever it was, try again later
                failures += 1
                self.stats.failures += 1
                self._synced = False  # catch up with a full resync when it answers
                delay = self.backoff(failures)
                # --once does not retry: it must not say it will.
                then = "" if once else f"; retrying in {delay:.1f}s"
                if isinstance(exc, ZoneUnavailable | ZoneRefused):
                    log.warning("report failed (%s)%s", exc, then)
                else:
                    log.exception("report failed unexpectedly%s", then)
            if once:
                return 0 if failures == 0 else 1
            stop.wait(delay)
        return 0 if failures == 0 else 1

    def close(self) -> None:
        self.client.close()


def _brief(invs: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{rc}={r['total']}(reserved {r['reserved']})"
                     for rc, r in sorted(invs.items()))
