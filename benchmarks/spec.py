"""A plain description of a benchmark cloud, shared by every loader.

The same list of `ProviderSpec` can be bulk-loaded into Strato's store and into
real OpenStack Placement's database (`benchmarks.peer.placement.bulk_load`), so
both servers answer the same requests over the same data.

`make_specs(n, seed)` builds the data set of issue 3: `n` compute hosts with
three resource classes (VCPU, MEMORY_MB, DISK_GB), 10% of them with a trait,
every host in one of ten aggregates, and a share of hosts nested: their VCPU and
MEMORY_MB live on two NUMA child providers, DISK_GB stays on the root.
Optionally, sharing providers (DISK_GB with `MISC_SHARES_VIA_AGGREGATE`) join
the aggregates. The output is deterministic for a given seed.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import TypedDict

TRAIT = "HW_CPU_X86_AVX2"
"""The trait carried by `trait_fraction` of the hosts (a standard os-traits name)."""

SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"
NUMA_TRAIT = "HW_NUMA_ROOT"
"""Placed on NUMA child providers, as Nova does."""


class Inventory(TypedDict):
    """One resource class's inventory, fields as in Placement's API."""

    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float


def inventory(total: int, *, reserved: int = 0, allocation_ratio: float = 1.0,
              min_unit: int = 1, max_unit: int | None = None, step_size: int = 1) -> Inventory:
    return Inventory(total=total, reserved=reserved, min_unit=min_unit,
                     max_unit=total if max_unit is None else max_unit, step_size=step_size,
                     allocation_ratio=allocation_ratio)


@dataclass(frozen=True)
class ProviderSpec:
    """One resource provider. Parents come before their children in a spec list."""

    uuid: str
    name: str
    parent_uuid: str | None = None
    inventories: dict[str, Inventory] = field(default_factory=dict)
    traits: list[str] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def aggregate_uuids(count: int = 10, seed: int = 1) -> list[str]:
    """The aggregate uuids `make_specs` uses for the same `count` and `seed`."""
    rng = random.Random(f"aggregates-{seed}")
    return [_uuid(rng) for _ in range(count)]


def make_specs(n: int, seed: int = 1, *, trait_fraction: float = 0.1,
               nested_fraction: float = 0.1, aggregates: int = 10,
               sharing: int = 0) -> list[ProviderSpec]:
    """`n` compute hosts (plus two NUMA children per nested host, plus `sharing` pools).

    Per host: VCPU 32 or 64 at ratio 4.0, MEMORY_MB 128 or 256 GiB with 512 MB
    reserved, DISK_GB 2,000 or 4,000. A nested host keeps DISK_GB and splits
    VCPU and MEMORY_MB evenly over two children named `<host>-numa0/1`.
    """
    rng = random.Random(seed)
    aggs = aggregate_uuids(aggregates, seed)
    specs: list[ProviderSpec] = []
    for i in range(n):
        host = _uuid(rng)
        name = f"host-{i:06d}"
        vcpu = rng.choice([32, 64])
        mem = rng.choice([131072, 262144])
        disk = rng.choice([2000, 4000])
        traits = [TRAIT] if rng.random() < trait_fraction else []
        member = [aggs[rng.randrange(aggregates)]] if aggregates else []
        if rng.random() < nested_fraction:
            specs.append(ProviderSpec(host, name, None, {"DISK_GB": inventory(disk)},
                                      traits, member))
            for k in range(2):
                specs.append(ProviderSpec(
                    _uuid(rng), f"{name}-numa{k}", host,
                    {"VCPU": inventory(vcpu // 2, allocation_ratio=4.0),
                     "MEMORY_MB": inventory(mem // 2, reserved=256)},
                    [NUMA_TRAIT], []))
        else:
            specs.append(ProviderSpec(
                host, name, None,
                {"VCPU": inventory(vcpu, allocation_ratio=4.0),
                 "MEMORY_MB": inventory(mem, reserved=512),
                 "DISK_GB": inventory(disk)},
                traits, member))
    for j in range(sharing):
        specs.append(ProviderSpec(_uuid(rng), f"shared-disk-{j:04d}", None,
                                  {"DISK_GB": inventory(100_000)}, [SHARING_TRAIT],
                                  [aggs[j % aggregates]] if aggregates else []))
    return specs
