"""Why providers were left out: a funnel of counts that add up.

Starting from every live provider, each stage removes the providers that
fail it and counts them under a reason key ("MEMORY_MB short", "trait
HW_CPU_X86_AVX2 missing", "anti_affinity web@rack"). The stages run in a
fixed order, so every provider is counted once, by the first stage it fails:
removed counts plus the providers that remain equal the providers seen.

This is per provider: for requests spread over nested or sharing providers
it tells which providers could not serve a group on their own, which is the
useful answer to "why is there nothing" even when the builder combines
providers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strato.engine import filters
from strato.engine.constraints import RuleMask
from strato.engine.index import BoolArray, ProviderIndex
from strato.engine.request import RequestGroup


@dataclass(slots=True)
class Funnel:
    seen: int
    stages: list[tuple[str, str, int]] = field(default_factory=list)
    remaining: int = 0
    # The rows that passed every stage (not reported: for the caller's cause).
    alive: BoolArray | None = None

    def cut(self, alive: BoolArray, ok: BoolArray, stage: str, reason: str) -> BoolArray:
        gone = int(np.count_nonzero(alive & ~ok))
        if gone:
            self.stages.append((stage, reason, gone))
        return alive & ok

    def as_dict(self) -> dict[str, Any]:
        return {"providers": self.seen, "remaining": self.remaining,
                "removed": [{"stage": s, "reason": r, "count": c} for s, r, c in self.stages]}


# The most names a reason lists: a request may name 40,000 aggregates, and
# its reason is repeated in the summary, per group and per zone.
LISTED = 5


def listed(names: Sequence[str]) -> str:
    """`a,b,c`, or the first LISTED of many and how many more."""
    if len(names) <= LISTED:
        return ",".join(names)
    return f"{','.join(names[:LISTED])} and {len(names) - LISTED} more"


def group_funnel(index: ProviderIndex, group: RequestGroup, excluded: Sequence[
        tuple[str, str, BoolArray]]) -> Funnel:
    """The funnel of one request group; `excluded` are zone-level cuts (stale, rules)."""
    alive = index.live().copy()
    funnel = Funnel(seen=int(np.count_nonzero(alive)))
    for stage, reason, ok in excluded:
        alive = funnel.cut(alive, ok, stage, reason)
    if group.in_tree is not None:
        p = index.pos.get(group.in_tree)
        root = int(index.root[p]) if p is not None else None
        ok = (filters.in_tree(index, root) if root is not None
              else np.zeros(index.size, dtype=bool))
        alive = funnel.cut(alive, ok, "in_tree", f"not in tree {group.in_tree}")
    for rc, amount in group.resources:
        col = index.rc_columns(rc)
        has = (col.has[: index.size] if col is not None
               else np.zeros(index.size, dtype=bool))
        alive = funnel.cut(alive, has, "resources", f"{rc}: no inventory")
        alive = funnel.cut(alive, filters.fits(index, rc, amount), "resources",
                           f"{rc}: short of {amount}")
    for anyof in group.required:
        ok = filters.has_traits(index, (anyof,))
        name = anyof[0] if len(anyof) == 1 else "any of " + listed(anyof)
        alive = funnel.cut(alive, ok, "traits", f"trait {name} missing")
    for t in group.forbidden:
        alive = funnel.cut(alive, filters.lacks_traits(index, (t,)), "traits",
                           f"trait {t} forbidden")
    for anyof in group.member_of:
        alive = funnel.cut(alive, filters.in_aggregates(index, (anyof,)), "aggregates",
                           f"not in aggregate {listed(anyof)}")
    if group.forbidden_aggs:
        alive = funnel.cut(alive, ~filters.in_any_aggregate(index, group.forbidden_aggs),
                           "aggregates", "in a forbidden aggregate")
    funnel.remaining = int(np.count_nonzero(alive))
    funnel.alive = alive
    return funnel


def zone_cuts(index: ProviderIndex, stale_rows: BoolArray, rules: Sequence[RuleMask]
              ) -> list[tuple[str, str, BoolArray]]:
    """The zone-level cuts, in order: staleness, then hard rules, then soft ones in force."""
    cuts: list[tuple[str, str, BoolArray]] = []
    if stale_rows.any():
        cuts.append(("stale", "stale: no recent report", ~stale_rows))
    for r in rules:
        kind = "constraint" if r.hard else "soft constraint"
        cuts.append((kind, r.reason, r.allowed))
    return cuts


NOTHING_FILTERED = "every provider passed the filters"
# Said when there was nothing to filter: a new zone, before any host was added.
NO_PROVIDERS = ("this zone has no providers: add some (strato providers add, strato agent, "
                "or POST /resource_providers)")


def summary(funnels: Sequence[tuple[str, Funnel]]) -> str:
    """One line an operator can read: the biggest reasons first."""
    totals: dict[str, int] = {}
    for _, f in funnels:
        for _, reason, count in f.stages:
            totals[reason] = totals.get(reason, 0) + count
    if not totals:
        return NO_PROVIDERS if all(f.seen == 0 for _, f in funnels) else NOTHING_FILTERED
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{reason}: {count} provider{'' if count == 1 else 's'}"
                     for reason, count in ranked[:6])
