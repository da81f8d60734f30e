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
from strato.engine.index import BoolArray, ProviderIndex
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
        out.append(RuleMask(index=i, rule=rule, allowed=allowed,
                            reason=describe(rule, group), spread=spread))
    return out
