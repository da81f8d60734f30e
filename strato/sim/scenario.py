"""Scenario files: the cluster and the workload, read from TOML.

A scenario is plain data. The cluster is a tree of zones (one zone for now;
the zone tree will give each zone its own store), each holding groups of
identical providers laid out in rooms and racks. The workload says how
requests arrive, how long they live and what they ask for. Everything random
is drawn later from the scenario plus a seed, so a file and a seed name one
run exactly.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from strato.model.location import canonical_tags

ArrivalProcess = Literal["poisson", "bursts"]
LifetimeKind = Literal["exponential", "lognormal", "pareto", "fixed", "mixture"]


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the field."""


@dataclass(frozen=True, slots=True)
class InventorySpec:
    total: int
    reserved: int = 0
    allocation_ratio: float = 1.0
    min_unit: int = 1
    max_unit: int | None = None
    step_size: int = 1

    @property
    def capacity(self) -> int:
        """What the store's claim() checks against: (total - reserved) * ratio."""
        return int((self.total - self.reserved) * self.allocation_ratio)


@dataclass(frozen=True, slots=True)
class ProviderGroupSpec:
    """`count` identical root providers (hosts)."""

    name: str
    count: int
    inventory: dict[str, InventorySpec]
    traits: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # Share of this group's hosts that get the trait or tag (drawn with the seed).
    trait_fractions: dict[str, float] = field(default_factory=dict)
    tag_fractions: dict[str, float] = field(default_factory=dict)
    hosts_per_rack: int = 20
    racks_per_room: int = 10


@dataclass(frozen=True, slots=True)
class ZoneSpec:
    """A zone: its own providers and its children (flattened by InProcessZone)."""

    name: str
    site: str
    tags: tuple[str, ...] = ()
    providers: tuple[ProviderGroupSpec, ...] = ()
    children: tuple[ZoneSpec, ...] = ()

    def walk(self, prefix: str = "") -> Iterator[tuple[str, ZoneSpec]]:
        """(zone path, zone) for this zone and every zone below, depth first."""
        path = f"{prefix}/{self.name}" if prefix else self.name
        yield path, self
        for child in self.children:
            yield from child.walk(path)


@dataclass(frozen=True, slots=True)
class ArrivalSpec:
    process: ArrivalProcess = "poisson"
    rate: float = 1.0  # mean requests per virtual second
    # Daily pattern: the rate swings by +-amplitude around its mean over `period`.
    daily_amplitude: float = 0.0
    period: float = 86_400.0
    # bursts: a share of arrivals come in clumps of geometric size.
    burst_fraction: float = 0.0
    burst_mean_size: float = 1.0


@dataclass(frozen=True, slots=True)
class LifetimeSpec:
    distribution: LifetimeKind = "exponential"
    mean: float = 3600.0  # exponential / fixed
    median: float = 3600.0  # lognormal
    sigma: float = 1.0  # lognormal
    alpha: float = 1.5  # pareto (heavy tail; alpha <= 2: infinite variance)
    minimum: float = 60.0  # pareto scale, and a floor for every distribution
    maximum: float | None = None  # cap, so a run ends
    # mixture: (weight, component) pairs, e.g. many short VMs and a long tail.
    components: tuple[tuple[float, LifetimeSpec], ...] = ()


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """A constraint as in ScheduleRequest.constraints, minus the group name."""

    type: Literal["location", "tags", "affinity", "anti_affinity"]
    hard: bool = True
    weight: float = 1.0
    pattern: str | None = None
    required: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    level: str = "host"


@dataclass(frozen=True, slots=True)
class ShapeSpec:
    """One kind of request, drawn with probability weight / sum(weights)."""

    name: str
    weight: float
    resources: dict[str, int]
    count: int = 1  # instances per request, placed all-or-nothing
    required_traits: tuple[str, ...] = ()
    rules: tuple[RuleSpec, ...] = ()
    # Requests of this shape join one of `group_pool` server groups (needed by
    # affinity rules); a small pool makes groups that outlive their requests.
    group_pool: int = 0
    lifetime: LifetimeSpec | None = None  # overrides the workload's


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    requests: int
    arrival: ArrivalSpec
    lifetime: LifetimeSpec
    shapes: tuple[ShapeSpec, ...]
    weigher: Literal["spread", "pack"] = "spread"
    spare: bool = True  # the weigher's `spare`: rare hosts kept for who asks
    samples: int = 200  # utilization samples over the run


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    zone: ZoneSpec
    workload: WorkloadSpec
    levels: tuple[str, ...] = ("site", "room", "rack", "host")
    exact: bool = False  # small enough for the exact solver by default

    def zones(self) -> list[tuple[str, ZoneSpec]]:
        return list(self.zone.walk())

    def provider_count(self) -> int:
        return sum(g.count for _, z in self.zones() for g in z.providers)

    def scaled(self, *, providers: float = 1.0, requests: float = 1.0) -> Scenario:
        """The same scenario with fewer (or more) hosts and requests; load kept
        proportional by scaling the arrival rate with the hosts, failure domains
        kept by scaling the racks' sizes."""
        def zone(z: ZoneSpec) -> ZoneSpec:
            # Racks shrink with the hosts, so the number of failure domains (what
            # anti-affinity rules spread over) stays that of the full scenario.
            groups = tuple(replace(g, count=max(1, round(g.count * providers)),
                                   hosts_per_rack=max(1, round(g.hosts_per_rack * providers)))
                           for g in z.providers)
            return replace(z, providers=groups, children=tuple(zone(c) for c in z.children))

        w = self.workload
        arrival = replace(w.arrival, rate=w.arrival.rate * providers)
        wl = replace(w, requests=max(1, round(w.requests * requests)), arrival=arrival)
        return replace(self, zone=zone(self.zone), workload=wl)


# -- parsing ------------------------------------------------------------------------

def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{p}: {exc}") from None
    try:
        return parse(data, default_name=p.stem)
    except KeyError as exc:
        # A setting the format needs, missing (or misspelt: unknown keys are ignored).
        raise ScenarioError(f"{p}: a required setting is missing: {exc} (see "
                            "docs/simulator.md and scenarios/small.toml)") from None


def parse(data: Mapping[str, Any], default_name: str = "scenario") -> Scenario:
    meta = _table(data, "scenario", required=False)
    cluster = _table(data, "cluster")
    levels = tuple(cluster.get("levels", ("site", "room", "rack", "host")))
    return Scenario(
        name=str(meta.get("name", default_name)),
        description=str(meta.get("description", "")),
        zone=_zone(_table(cluster, "zone"), "cluster.zone"),
        workload=_workload(_table(data, "workload")),
        levels=levels,
        exact=bool(meta.get("exact", False)),
    )


def _table(data: Mapping[str, Any], key: str, *, required: bool = True) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"[{key}] is required and must be a table")
    return value


def _zone(d: Mapping[str, Any], where: str) -> ZoneSpec:
    name = str(d.get("name", "zone"))
    groups = tuple(_group(g, f"{where}.providers[{i}]")
                   for i, g in enumerate(d.get("providers", [])))
    children: list[ZoneSpec] = []
    for i, c in enumerate(d.get("children", [])):
        child = _zone(c, f"{where}.children[{i}]")
        copies = int(c.get("copies", 1))
        if copies == 1:
            children.append(child)
            continue
        # `copies = N`: N sibling zones alike but for name and site (a 100-cell tree
        # in a few lines).
        children += [replace(child, name=f"{child.name}-{k:03d}", site=f"{child.site}-{k:03d}")
                     for k in range(copies)]
    return ZoneSpec(name=name, site=str(d.get("site", name)),
                    tags=tuple(canonical_tags(d.get("tags", []))),
                    providers=groups, children=tuple(children))


def _inventory(v: Any, where: str) -> InventorySpec:
    if isinstance(v, int):
        return InventorySpec(total=v)
    if not isinstance(v, Mapping) or "total" not in v:
        raise ScenarioError(f"{where}: an inventory is a total or a table with `total`")
    return InventorySpec(total=int(v["total"]), reserved=int(v.get("reserved", 0)),
                         allocation_ratio=float(v.get("allocation_ratio", 1.0)),
                         min_unit=int(v.get("min_unit", 1)),
                         max_unit=None if v.get("max_unit") is None else int(v["max_unit"]),
                         step_size=int(v.get("step_size", 1)))


def _group(d: Mapping[str, Any], where: str) -> ProviderGroupSpec:
    inv = d.get("inventory")
    if not isinstance(inv, Mapping) or not inv:
        raise ScenarioError(f"{where}.inventory: at least one resource class")
    count = int(d.get("count", 0))
    if count < 1:
        raise ScenarioError(f"{where}.count must be >= 1")
    return ProviderGroupSpec(
        name=str(d.get("name", where.rsplit(".", 1)[-1])), count=count,
        inventory={rc: _inventory(v, f"{where}.inventory.{rc}") for rc, v in inv.items()},
        traits=tuple(d.get("traits", ())), tags=tuple(canonical_tags(d.get("tags", ()))),
        trait_fractions={k: float(v) for k, v in d.get("trait_fractions", {}).items()},
        tag_fractions={k: float(v) for k, v in d.get("tag_fractions", {}).items()},
        hosts_per_rack=int(d.get("hosts_per_rack", 20)),
        racks_per_room=int(d.get("racks_per_room", 10)))


def _lifetime(d: Mapping[str, Any]) -> LifetimeSpec:
    allowed = set(LifetimeSpec.__dataclass_fields__) | {"weight"}
    extra = set(d) - allowed
    if extra:
        raise ScenarioError(f"lifetime: unknown field(s) {', '.join(sorted(extra))}")
    fields = {k: v for k, v in d.items() if k not in ("components", "weight")}
    parts = tuple((float(c.get("weight", 1.0)), _lifetime(c)) for c in d.get("components", []))
    spec = LifetimeSpec(**fields, components=parts)
    if spec.distribution not in ("exponential", "lognormal", "pareto", "fixed", "mixture"):
        raise ScenarioError(f"lifetime.distribution {spec.distribution!r} is not one of "
                            "exponential, lognormal, pareto, fixed, mixture")
    if spec.distribution == "mixture" and not parts:
        raise ScenarioError("lifetime: a mixture needs components")
    return spec


def _rule(d: Mapping[str, Any], where: str) -> RuleSpec:
    kind = d.get("type")
    if kind not in ("location", "tags", "affinity", "anti_affinity"):
        raise ScenarioError(f"{where}.type must be location, tags, affinity or anti_affinity")
    return RuleSpec(type=kind, hard=bool(d.get("hard", True)),
                    weight=float(d.get("weight", 1.0)), pattern=d.get("pattern"),
                    required=tuple(d.get("required", ())),
                    forbidden=tuple(d.get("forbidden", ())), level=str(d.get("level", "host")))


def _shape(d: Mapping[str, Any], where: str) -> ShapeSpec:
    res = d.get("resources")
    if not isinstance(res, Mapping) or not res:
        raise ScenarioError(f"{where}.resources: at least one resource class")
    rules = tuple(_rule(r, f"{where}.rules[{i}]") for i, r in enumerate(d.get("rules", [])))
    pool = int(d.get("group_pool", 0))
    if any(r.type in ("affinity", "anti_affinity") for r in rules) and pool < 1:
        raise ScenarioError(f"{where}: affinity rules need group_pool >= 1")
    return ShapeSpec(
        name=str(d["name"]), weight=float(d.get("weight", 1.0)),
        resources={k: int(v) for k, v in res.items()}, count=int(d.get("count", 1)),
        required_traits=tuple(d.get("required_traits", ())), rules=rules, group_pool=pool,
        lifetime=_lifetime(d["lifetime"]) if "lifetime" in d else None)


def _workload(d: Mapping[str, Any]) -> WorkloadSpec:
    shapes = tuple(_shape(s, f"workload.shapes[{i}]") for i, s in enumerate(d.get("shapes", [])))
    if not shapes:
        raise ScenarioError("workload.shapes: at least one shape")
    arrival = ArrivalSpec(**_table(d, "arrival", required=False))
    if arrival.process not in ("poisson", "bursts"):
        raise ScenarioError("workload.arrival.process must be poisson or bursts")
    weigher = d.get("weigher", "spread")
    if weigher not in ("spread", "pack"):
        raise ScenarioError("workload.weigher must be spread or pack")
    spare = d.get("spare", True)
    if not isinstance(spare, bool):
        raise ScenarioError("workload.spare must be true or false")
    return WorkloadSpec(requests=int(d.get("requests", 100)), arrival=arrival,
                        lifetime=_lifetime(_table(d, "lifetime", required=False)),
                        shapes=shapes, weigher=weigher, spare=spare,
                        samples=int(d.get("samples", 200)))
