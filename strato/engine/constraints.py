"""Strato's constraints over the index: location, tags, staleness, spread rules.

Every rule becomes a boolean mask over index rows (vectorised: a location
pattern is evaluated once per distinct location, not per provider), plus
the explain count of what it removed. Spread rules (affinity and
anti-affinity) also become solver rules carrying the domains that earlier
members of the group occupy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from strato.engine.hosts import HostArrays
from strato.engine.index import SHARING_TRAIT, BoolArray, ProviderIndex
from strato.engine.solver import SpreadKind, SpreadRule
from strato.model.location import location_matches, location_pattern
from strato.model.schedule import Constraint, LocationRule, SpreadRuleSpec, TagsRule


@dataclass(frozen=True, slots=True)
class RuleMask:
    """What one constraint allows, by row; `spread` for affinity rules."""

    index: int  # position in the request's constraints
    rule: Constraint
    allowed: BoolArray
    reason: str
    spread: SpreadRule | None = None

    @property
    def hard(self) -> bool:
        return self.rule.hard

    @property
    def weight(self) -> float:
        return self.rule.weight


def _on_root(index: ProviderIndex, per_row: BoolArray) -> BoolArray:
    """A host-level fact holds for a whole tree: judge every row by its root."""
    out: BoolArray = per_row[index.root[: index.size]]
    return out


def location_mask(index: ProviderIndex, hosts: HostArrays, rule: LocationRule) -> BoolArray:
    pattern = location_pattern(rule.pattern)
    by_code = np.fromiter((location_matches(pattern, loc) for loc in hosts.locations),
                          dtype=bool, count=len(hosts.locations))
    return _on_root(index, by_code[hosts.loc_code])


def tags_mask(index: ProviderIndex, hosts: HostArrays, rule: TagsRule) -> BoolArray:
    n = index.size
    ok = np.ones(n, dtype=bool)
    for tag in rule.required:
        col = hosts.tags.get(tag)
        ok &= col if col is not None else np.zeros(n, dtype=bool)
    for tag in rule.forbidden:
        col = hosts.tags.get(tag)
        if col is not None:
            ok &= ~col
    # Tags on the host count for its nested providers too.
    return ok | _on_root(index, ok)


def spread_mask(index: ProviderIndex, hosts: HostArrays, rule: SpreadRuleSpec, group: str,
                members: Mapping[str, set[str]], levels: tuple[str, ...]
                ) -> tuple[BoolArray, SpreadRule]:
    """Rows allowed given where the group's members already are, and the solver rule."""
    if rule.level not in levels:
        raise ValueError(f"unknown level {rule.level!r}; this zone's levels: "
                         f"{', '.join(levels)}")
    dom = hosts.domains[rule.level]
    member_rows = sorted({index.pos[r] for roots in members.values() for r in roots
                          if r in index.pos})
    existing_codes = np.unique(dom[member_rows]) if member_rows else np.zeros(0, np.int32)
    names = hosts.domain_names[rule.level]
    existing = frozenset(names[int(c)] for c in existing_codes)
    row_dom = dom[index.root[: index.size]]
    if rule.type == "spread":
        counts: dict[str, int] = {}
        for roots in members.values():
            for d in {names[int(dom[index.pos[r]])] for r in roots if r in index.pos}:
                counts[d] = counts.get(d, 0) + 1
        allowed = np.ones(index.size, dtype=bool)
        if rule.hard and rule.max_per_domain is not None:
            full = [code for code, name in enumerate(names)
                    if counts.get(name, 0) >= rule.max_per_domain]
            if full:
                allowed = ~np.isin(row_dom, np.asarray(full, dtype=row_dom.dtype))
        return allowed, SpreadRule(kind=SpreadKind.SPREAD, level=rule.level, hard=rule.hard,
                                   weight=rule.weight, existing=frozenset(counts),
                                   name=group, counts=counts, max_skew=rule.max_skew,
                                   max_per_domain=rule.max_per_domain)
    if rule.type == "anti_affinity":
        allowed = ~np.isin(row_dom, existing_codes)
        kind = SpreadKind.ANTI_AFFINITY
    else:
        allowed = (np.isin(row_dom, existing_codes) if existing_codes.size
                   else np.ones(index.size, dtype=bool))
        kind = SpreadKind.AFFINITY
    spread = SpreadRule(kind=kind, level=rule.level, hard=rule.hard, weight=rule.weight,
                        existing=existing, name=group)
    return allowed, spread


# A feature (a trait, a tag or a resource class) is rare in a zone when at most
# this share of its hosts have it.
RARE_SHARE = 0.25
# Cap on the spare masks kept per host arrays (one per set of features asked).
_MAX_SPARE_MASKS = 256

Feature = tuple[str, str]  # ("trait" | "tag" | "class", name)


def rare_features(index: ProviderIndex, hosts: HostArrays) -> dict[Feature, BoolArray]:
    """Every rare feature of the zone, with the rows whose host has it (a
    feature of any provider in a tree belongs to its host: a GPU child makes
    its host a GPU host). Kept on `hosts` (rebuilt when the index structure or
    the tags change) while the index's inventories stay put."""
    _current(index, hosts)
    got: dict[Feature, BoolArray] | None = hosts.derived.get("rare")
    if got is not None:
        return got
    n = index.size
    live = index.live()
    roots = index.root[:n]
    is_host = live & (roots == np.arange(n))
    hosts_n = int(is_host.sum())
    out: dict[Feature, BoolArray] = {}

    def note(feature: Feature, rows: BoolArray) -> None:
        tree_has = np.zeros(n, dtype=bool)
        tree_has[roots[rows & live]] = True
        count = int((tree_has & is_host).sum())
        if 0 < count <= RARE_SHARE * hosts_n:
            out[feature] = tree_has[roots]

    for name, col in index.trait_cols.items():
        if name != SHARING_TRAIT:
            note(("trait", name), col[:n])
    for name, rc in index.rc.items():
        note(("class", name), rc.has[:n])
    for name, tags in hosts.tags.items():
        note(("tag", name), tags)
    hosts.derived["rare"] = out
    return out


def spare_mask(index: ProviderIndex, hosts: HostArrays, asked: frozenset[Feature]
               ) -> BoolArray | None:
    """Rows whose host has no rare feature outside `asked`: where a request that
    asks for `asked` goes first, so that the rare hosts stay free for the
    requests that need them. None when that leaves out nothing or everything
    (no preference)."""
    _current(index, hosts)
    key = ("spare", asked)
    if key in hosts.derived:
        cached: BoolArray | None = hosts.derived[key]
        return cached
    avoid = [rows for feature, rows in rare_features(index, hosts).items()
             if feature not in asked]
    mask: BoolArray | None = None
    if avoid:
        keep = ~np.logical_or.reduce(avoid)
        mask = keep if keep.any() else None
    if len(hosts.derived) > _MAX_SPARE_MASKS:
        keep = {k: hosts.derived[k] for k in ("rare", "inventory_version")}
        hosts.derived.clear()
        hosts.derived.update(keep)
    hosts.derived[key] = mask
    return mask


def _current(index: ProviderIndex, hosts: HostArrays) -> None:
    """Forget what `hosts` keep if inventories changed since (a class added to
    or removed from a host moves the rare features)."""
    if hosts.derived.get("inventory_version") != index.inventory_version:
        hosts.derived.clear()
        hosts.derived["inventory_version"] = index.inventory_version


def describe(rule: Constraint, group: str | None = None) -> str:
    if isinstance(rule, LocationRule):
        return f"location {rule.pattern}"
    if isinstance(rule, TagsRule):
        parts = [*rule.required, *(f"!{t}" for t in rule.forbidden)]
        return f"tags {','.join(parts)}"
    return f"{rule.type} {rule.group or group}@{rule.level}"


def rule_masks(index: ProviderIndex, hosts: HostArrays, rules: list[Constraint],
               default_group: str | None, members: Mapping[str, Mapping[str, set[str]]],
               levels: tuple[str, ...]) -> list[RuleMask]:
    """One mask per constraint, in request order. `members`: group -> consumer -> roots."""
    out: list[RuleMask] = []
    for i, rule in enumerate(rules):
        spread: SpreadRule | None = None
        group = ""
        if isinstance(rule, LocationRule):
            allowed = location_mask(index, hosts, rule)
        elif isinstance(rule, TagsRule):
            allowed = tags_mask(index, hosts, rule)
        else:
            group = rule.group or default_group or ""
            allowed, spread = spread_mask(index, hosts, rule, group, members.get(group, {}),
                                          levels)
        reason = describe(rule, group)
        if (spread is not None and spread.kind is SpreadKind.AFFINITY and group
                and group == default_group and len(spread.existing) > 1):
            # The request joins a group already in several domains: every
            # member in one domain cannot hold, wherever the new ones go.
            allowed = np.zeros(index.size, dtype=bool)
            if rule.hard:
                # A soft rule is dropped, and named in `relaxed` as written.
                reason += (f" (members already in {len(spread.existing)} {spread.level}s: "
                           f"{', '.join(sorted(spread.existing))})")
        out.append(RuleMask(index=i, rule=rule, allowed=allowed, reason=reason,
                            spread=spread))
    return out
