"""Scenario files: the cluster and the workload, read from TOML.

A scenario is plain data. The cluster is a tree of zones (one zone for now;
the zone tree will give each zone its own store), each holding groups of
identical providers laid out in rooms and racks. The workload says how
requests arrive, how long they live and what they ask for. Everything random
is drawn later from the scenario plus a seed, so a file and a seed name one
run exactly.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from strato.model.location import LocationError, canonical_tags

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
#
# Every value is checked where it is read, and named in the error with its
# place in the file (`workload.shapes[2].count must be an integer >= 1, got 0`):
# a run must not end in a traceback half way, nor run on a misspelt setting
# (an unknown key is refused, with the closest known one).

def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ScenarioError(f"{p}: not UTF-8 text (a scenario is a TOML file)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{p}: {exc}") from None
    try:
        return parse(data, default_name=p.stem)
    except KeyError as exc:
        # A setting the format needs, missing (or misspelt).
        raise ScenarioError(f"{p}: a required setting is missing: {exc} (see "
                            "docs/simulator.md and scenarios/small.toml)") from None
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None


_SCENARIO_KEYS = frozenset({"name", "description", "exact"})
_CLUSTER_KEYS = frozenset({"levels", "zone"})
_ZONE_KEYS = frozenset({"name", "site", "tags", "providers", "children"})
_GROUP_KEYS = frozenset({"name", "count", "inventory", "traits", "tags", "trait_fractions",
                         "tag_fractions", "hosts_per_rack", "racks_per_room"})
_INVENTORY_KEYS = frozenset({"total", "reserved", "allocation_ratio", "min_unit", "max_unit",
                             "step_size"})
_WORKLOAD_KEYS = frozenset({"requests", "arrival", "lifetime", "shapes", "weigher", "spare",
                            "samples"})
_SHAPE_KEYS = frozenset({"name", "weight", "resources", "count", "required_traits", "rules",
                         "group_pool", "lifetime"})
_RULE_KEYS = frozenset({"type", "hard", "weight", "pattern", "required", "forbidden", "level"})


def _known(d: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        close = difflib.get_close_matches(extra[0], sorted(allowed), 1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScenarioError(f"{where}: unknown setting(s) {', '.join(map(repr, extra))}"
                            f"{hint}; the settings are in docs/simulator.md")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _int(d: Mapping[str, Any], key: str, default: int, where: str, low: int) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ScenarioError(f"{_at(where, key)} must be an integer >= {low}, got {v!r}")
    return v


def _float(d: Mapping[str, Any], key: str, default: float | None, where: str, *,
           low: float = 0.0, above: bool = False, high: float | None = None) -> float:
    """A number >= low (> low when `above`), <= high when given."""
    v = d.get(key, default)
    ok = (not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
          and (v > low if above else v >= low) and (high is None or v <= high))
    if not ok:
        span = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None
                                                     else "")
        raise ScenarioError(f"{_at(where, key)} must be a number {span}, got {v!r}")
    return float(v)


def _str(d: Mapping[str, Any], key: str, default: str, where: str) -> str:
    v = d.get(key, default)
    if not isinstance(v, str):
        raise ScenarioError(f"{_at(where, key)} must be a string, got {v!r}")
    return v


def _strs(d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    v = d.get(key, ())
    if not isinstance(v, list | tuple) or not all(isinstance(s, str) for s in v):
        raise ScenarioError(f"{_at(where, key)} must be a list of strings, got {v!r}")
    return tuple(v)


def _tables(d: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(t, Mapping) for t in v):
        raise ScenarioError(f"{_at(where, key)} must be a list of tables ([[{_at(where, key)}]])"
                            f", got {v!r}")
    return v


def _tags(d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(canonical_tags(list(_strs(d, key, where))))
    except LocationError as exc:
        raise ScenarioError(f"{_at(where, key)}: {exc}") from None


def _fractions(d: Mapping[str, Any], key: str, where: str) -> dict[str, float]:
    v = d.get(key, {})
    if not isinstance(v, Mapping):
        raise ScenarioError(f"{_at(where, key)} must be a table of NAME = share, got {v!r}")
    return {str(k): _float(v, k, None, _at(where, key), high=1.0) for k in v}


def parse(data: Mapping[str, Any], default_name: str = "scenario") -> Scenario:
    _known(data, frozenset({"scenario", "cluster", "workload"}), "the file")
    meta = _table(data, "scenario", required=False)
    _known(meta, _SCENARIO_KEYS, "[scenario]")
    cluster = _table(data, "cluster")
    _known(cluster, _CLUSTER_KEYS, "[cluster]")
    levels = _strs(cluster, "levels", "cluster") if "levels" in cluster \
        else ("site", "room", "rack", "host")
    if not levels:
        raise ScenarioError("cluster.levels: at least one level")
    exact = meta.get("exact", False)
    if not isinstance(exact, bool):
        raise ScenarioError(f"scenario.exact must be true or false, got {exact!r}")
    return Scenario(
        name=_str(meta, "name", default_name, "scenario"),
        description=_str(meta, "description", "", "scenario"),
        zone=_zone(_table(cluster, "zone"), "cluster.zone"),
        workload=_workload(_table(data, "workload")),
        levels=levels,
        exact=exact,
    )


def _table(data: Mapping[str, Any], key: str, *, required: bool = True) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"[{key}] is required and must be a table")
    return value


def _zone(d: Mapping[str, Any], where: str, extra: frozenset[str] = frozenset()) -> ZoneSpec:
    _known(d, _ZONE_KEYS | extra, where)
    name = _str(d, "name", "zone", where)
    groups = tuple(_group(g, f"{where}.providers[{i}]")
                   for i, g in enumerate(_tables(d, "providers", where)))
    children: list[ZoneSpec] = []
    for i, c in enumerate(_tables(d, "children", where)):
        child = _zone(c, f"{where}.children[{i}]", frozenset({"copies"}))
        copies = _int(c, "copies", 1, f"{where}.children[{i}]", 1)
        if copies == 1:
            children.append(child)
            continue
        # `copies = N`: N sibling zones alike but for name and site (a 100-cell tree
        # in a few lines).
        children += [replace(child, name=f"{child.name}-{k:03d}", site=f"{child.site}-{k:03d}")
                     for k in range(copies)]
    return ZoneSpec(name=name, site=_str(d, "site", name, where), tags=_tags(d, "tags", where),
                    providers=groups, children=tuple(children))


def _inventory(v: Any, where: str) -> InventorySpec:
    if isinstance(v, int) and not isinstance(v, bool):
        v = {"total": v}
    if not isinstance(v, Mapping) or "total" not in v:
        raise ScenarioError(f"{where}: an inventory is a total or a table with `total`")
    _known(v, _INVENTORY_KEYS, where)
    max_unit = None if v.get("max_unit") is None else _int(v, "max_unit", 1, where, 1)
    return InventorySpec(total=_int(v, "total", 0, where, 1),
                         reserved=_int(v, "reserved", 0, where, 0),
                         allocation_ratio=_float(v, "allocation_ratio", 1.0, where, above=True),
                         min_unit=_int(v, "min_unit", 1, where, 1), max_unit=max_unit,
                         step_size=_int(v, "step_size", 1, where, 1))


def _group(d: Mapping[str, Any], where: str) -> ProviderGroupSpec:
    _known(d, _GROUP_KEYS, where)
    inv = d.get("inventory")
    if not isinstance(inv, Mapping) or not inv:
        raise ScenarioError(f"{where}.inventory: at least one resource class")
    return ProviderGroupSpec(
        name=_str(d, "name", where.rsplit(".", 1)[-1], where),
        count=_int(d, "count", 0, where, 1),
        inventory={rc: _inventory(v, f"{where}.inventory.{rc}") for rc, v in inv.items()},
        traits=_strs(d, "traits", where), tags=_tags(d, "tags", where),
        trait_fractions=_fractions(d, "trait_fractions", where),
        tag_fractions=_fractions(d, "tag_fractions", where),
        hosts_per_rack=_int(d, "hosts_per_rack", 20, where, 1),
        racks_per_room=_int(d, "racks_per_room", 10, where, 1))


def _lifetime(d: Mapping[str, Any], where: str = "workload.lifetime") -> LifetimeSpec:
    allowed = frozenset(LifetimeSpec.__dataclass_fields__) | {"weight"}
    _known(d, allowed, where)
    kinds = ("exponential", "lognormal", "pareto", "fixed", "mixture")
    kind = d.get("distribution", "exponential")
    if kind not in kinds:
        raise ScenarioError(f"{where}.distribution {kind!r} is not one of {', '.join(kinds)}")
    parts = tuple((_float(c, "weight", 1.0, f"{where}.components[{i}]", above=True),
                   _lifetime(c, f"{where}.components[{i}]"))
                  for i, c in enumerate(_tables(d, "components", where)))
    if kind == "mixture" and not parts:
        raise ScenarioError(f"{where}: a mixture needs components")
    maximum = None if d.get("maximum") is None else _float(d, "maximum", None, where,
                                                           above=True)
    return LifetimeSpec(
        distribution=kind, mean=_float(d, "mean", 3600.0, where, above=True),
        median=_float(d, "median", 3600.0, where, above=True),
        sigma=_float(d, "sigma", 1.0, where), alpha=_float(d, "alpha", 1.5, where, above=True),
        minimum=_float(d, "minimum", 60.0, where), maximum=maximum, components=parts)


def _rule(d: Mapping[str, Any], where: str) -> RuleSpec:
    kind = d.get("type")
    if kind not in ("location", "tags", "affinity", "anti_affinity"):
        raise ScenarioError(f"{where}.type must be location, tags, affinity or anti_affinity")
    _known(d, _RULE_KEYS, where)
    hard = d.get("hard", True)
    if not isinstance(hard, bool):
        raise ScenarioError(f"{where}.hard must be true or false, got {hard!r}")
    pattern = d.get("pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise ScenarioError(f"{where}.pattern must be a string, got {pattern!r}")
    return RuleSpec(type=kind, hard=hard, weight=_float(d, "weight", 1.0, where, above=True),
                    pattern=pattern, required=_strs(d, "required", where),
                    forbidden=_strs(d, "forbidden", where),
                    level=_str(d, "level", "host", where))


def _shape(d: Mapping[str, Any], where: str) -> ShapeSpec:
    _known(d, _SHAPE_KEYS, where)
    res = d.get("resources")
    if not isinstance(res, Mapping) or not res:
        raise ScenarioError(f"{where}.resources: at least one resource class")
    rules = tuple(_rule(r, f"{where}.rules[{i}]")
                  for i, r in enumerate(_tables(d, "rules", where)))
    pool = _int(d, "group_pool", 0, where, 0)
    if any(r.type in ("affinity", "anti_affinity") for r in rules) and pool < 1:
        raise ScenarioError(f"{where}: affinity rules need group_pool >= 1")
    lifetime = d.get("lifetime")
    if lifetime is not None and not isinstance(lifetime, Mapping):
        raise ScenarioError(f"{where}.lifetime must be a table, got {lifetime!r}")
    return ShapeSpec(
        name=_str(d, "name", d["name"], where), weight=_float(d, "weight", 1.0, where),
        resources={k: _int(res, k, 0, f"{where}.resources", 1) for k in res},
        count=_int(d, "count", 1, where, 1), required_traits=_strs(d, "required_traits", where),
        rules=rules, group_pool=pool,
        lifetime=None if lifetime is None else _lifetime(lifetime, f"{where}.lifetime"))


def _arrival(d: Mapping[str, Any]) -> ArrivalSpec:
    where = "workload.arrival"
    _known(d, frozenset(ArrivalSpec.__dataclass_fields__), where)
    process = d.get("process", "poisson")
    if process not in ("poisson", "bursts"):
        raise ScenarioError(f"{where}.process must be poisson or bursts")
    return ArrivalSpec(
        process=process, rate=_float(d, "rate", 1.0, where, above=True),
        daily_amplitude=_float(d, "daily_amplitude", 0.0, where, high=1.0),
        period=_float(d, "period", 86_400.0, where, above=True),
        burst_fraction=_float(d, "burst_fraction", 0.0, where, high=1.0),
        burst_mean_size=_float(d, "burst_mean_size", 1.0, where, low=1.0))


def _workload(d: Mapping[str, Any]) -> WorkloadSpec:
    _known(d, _WORKLOAD_KEYS, "[workload]")
    shapes = tuple(_shape(s, f"workload.shapes[{i}]")
                   for i, s in enumerate(_tables(d, "shapes", "workload")))
    if not shapes:
        raise ScenarioError("workload.shapes: at least one shape")
    if not sum(s.weight for s in shapes) > 0:
        raise ScenarioError("workload.shapes: at least one shape of weight above 0")
    arrival = _arrival(_table(d, "arrival", required=False))
    weigher = d.get("weigher", "spread")
    if weigher not in ("spread", "pack"):
        raise ScenarioError("workload.weigher must be spread or pack")
    spare = d.get("spare", True)
    if not isinstance(spare, bool):
        raise ScenarioError("workload.spare must be true or false")
    return WorkloadSpec(requests=_int(d, "requests", 100, "workload", 1), arrival=arrival,
                        lifetime=_lifetime(_table(d, "lifetime", required=False)),
                        shapes=shapes, weigher=weigher, spare=spare,
                        samples=_int(d, "samples", 200, "workload", 1))
