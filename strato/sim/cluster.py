"""The scenario's cluster made concrete: hosts with uuids, and an array model of them.

`build_hosts` expands provider groups into hosts (deterministic for a seed).
`ClusterModel` holds them as numpy arrays (capacity per class, traits, tags,
failure domains): the baselines schedule on it, and the runner uses it to
measure utilization, stranded capacity and rule satisfaction the same way
for every policy.
"""

from __future__ import annotations

import random
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strato.model.location import location_matches, location_pattern
from strato.sim.scenario import InventorySpec, Scenario

IntMatrix = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class HostSpec:
    uuid: str
    name: str
    zone: str  # zone path, e.g. "global/dfw"
    inventory: dict[str, InventorySpec]
    traits: tuple[str, ...]
    tags: tuple[str, ...]
    location: tuple[str, ...]


def build_hosts(scenario: Scenario, seed: int) -> list[HostSpec]:
    rng = random.Random(f"cluster-{seed}")
    hosts: list[HostSpec] = []
    for path, zone in scenario.zones():
        for group in zone.providers:
            for i in range(group.count):
                rack = i // group.hosts_per_rack
                room = rack // group.racks_per_room
                name = f"{zone.name}-{group.name}-{i:06d}"
                traits = set(group.traits)
                traits.update(t for t, f in sorted(group.trait_fractions.items())
                              if rng.random() < f)
                tags = set(group.tags) | set(zone.tags)
                tags.update(t for t, f in sorted(group.tag_fractions.items())
                            if rng.random() < f)
                hosts.append(HostSpec(
                    uuid=str(uuidlib.UUID(int=rng.getrandbits(128), version=4)),
                    name=name, zone=path, inventory=dict(group.inventory),
                    traits=tuple(sorted(traits)), tags=tuple(sorted(tags)),
                    location=(zone.site, f"room{room}", f"{group.name}-r{rack:03d}", name)))
    return hosts


class ClusterModel:
    """Hosts as arrays: row i is hosts[i], column j is classes[j]."""

    def __init__(self, hosts: Sequence[HostSpec], levels: Sequence[str]) -> None:
        self.hosts = list(hosts)
        self.uuids = [h.uuid for h in hosts]
        self.pos = {u: i for i, u in enumerate(self.uuids)}
        self.classes = sorted({rc for h in hosts for rc in h.inventory})
        self.col = {rc: j for j, rc in enumerate(self.classes)}
        n, k = len(hosts), len(self.classes)
        self.capacity: IntMatrix = np.zeros((n, k), dtype=np.int64)
        self.max_unit: IntMatrix = np.zeros((n, k), dtype=np.int64)
        for i, h in enumerate(hosts):
            for rc, inv in h.inventory.items():
                self.capacity[i, self.col[rc]] = inv.capacity
                self.max_unit[i, self.col[rc]] = inv.max_unit or inv.total
        self.total = self.capacity.sum(axis=0)
        self.traits = _flags([h.traits for h in hosts])
        self.tags = _flags([h.tags for h in hosts])
        self.levels = tuple(levels)
        self._locations: dict[str, BoolArray] = {}
        # Domain code per level: hosts sharing a code are in one failure domain.
        self.domains: dict[str, npt.NDArray[np.int64]] = {}
        for depth, level in enumerate(self.levels, start=1):
            keys = [h.location[:depth] if depth < len(self.levels) else (h.uuid,)
                    for h in hosts]
            codes: dict[tuple[str, ...], int] = {}
            self.domains[level] = np.array([codes.setdefault(key, len(codes)) for key in keys],
                                           dtype=np.int64)

    @property
    def size(self) -> int:
        return len(self.hosts)

    def demand(self, resources: dict[str, int]) -> IntMatrix:
        """A request's resources as a row over this model's classes (unknown: -1 marker)."""
        row = np.zeros(len(self.classes), dtype=np.int64)
        for rc, amount in resources.items():
            j = self.col.get(rc)
            if j is None:
                return np.full(len(self.classes), -1, dtype=np.int64)
            row[j] = amount
        return row

    def trait_mask(self, names: Sequence[str]) -> BoolArray:
        ok = np.ones(self.size, dtype=bool)
        for t in names:
            if t.startswith("!"):
                col = self.traits.get(t[1:])
                if col is not None:
                    ok &= ~col
            else:
                ok &= self.traits.get(t, np.zeros(self.size, dtype=bool))
        return ok

    def tags_mask(self, required: Sequence[str], forbidden: Sequence[str]) -> BoolArray:
        ok = np.ones(self.size, dtype=bool)
        for t in required:
            ok &= self.tags.get(t, np.zeros(self.size, dtype=bool))
        for t in forbidden:
            col = self.tags.get(t)
            if col is not None:
                ok &= ~col
        return ok

    def location_mask(self, pattern: str) -> BoolArray:
        # Cached: a scenario has a handful of patterns and matching is per host.
        found = self._locations.get(pattern)
        if found is None:
            pat = location_pattern(pattern)
            found = np.fromiter((location_matches(pat, h.location) for h in self.hosts),
                                dtype=bool, count=self.size)
            self._locations[pattern] = found
        return found


def _flags(per_host: Sequence[Sequence[str]]) -> dict[str, BoolArray]:
    out: dict[str, BoolArray] = {}
    for i, names in enumerate(per_host):
        for name in names:
            if name not in out:
                out[name] = np.zeros(len(per_host), dtype=bool)
            out[name][i] = True
    return out
