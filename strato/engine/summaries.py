"""Provider summaries: capacity, usage, traits and tree of the providers in
the trees that the chosen candidates use (Placement's `provider_summaries`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strato.engine.candidates import Candidate
from strato.engine.index import ProviderIndex


# Not frozen: a frozen dataclass sets each field through object.__setattr__,
# and an answer makes one of these per provider and class.
@dataclass(slots=True)
class ResourceSummary:
    capacity: int
    used: int


@dataclass(slots=True)
class ProviderSummary:
    uuid: str
    parent_uuid: str | None
    root_uuid: str
    resources: dict[str, ResourceSummary]
    traits: tuple[str, ...]


def summarize(index: ProviderIndex, candidates: Sequence[Candidate], *,
              nested_aware: bool = True) -> list[ProviderSummary]:
    """Every provider of every tree a candidate takes resources from.

    Before microversion 1.29 (`nested_aware=False`) only the providers the
    candidates actually use are listed.
    """
    used = {p for c in candidates for p, _, _ in c.items}
    if not used:
        return []
    if nested_aware:
        roots = sorted({int(index.root[p]) for p in used})
        positions = np.concatenate([index.tree_members(r) for r in roots])
    else:
        positions = np.asarray(sorted(used), dtype=np.int64)
    # Columns gathered once and turned into Python lists: element by element,
    # numpy's scalars cost more than the summaries themselves.
    per_rc = []
    for name, col in sorted(index.rc.items()):
        has = col.has[positions]
        if has.any():
            per_rc.append((name, has.tolist(), col.capacity[positions].tolist(),
                           col.used[positions].tolist()))
    uuids, traits = index.uuids, index.traits
    parents = index.parent[positions].tolist()
    roots_of = index.root[positions].tolist()
    out: list[ProviderSummary] = []
    for j, p in enumerate(positions.tolist()):
        resources = {name: ResourceSummary(cap[j], usd[j])
                     for name, has, cap, usd in per_rc if has[j]}
        parent = parents[j]
        out.append(ProviderSummary(
            uuid=uuids[p],
            parent_uuid=uuids[parent] if parent >= 0 else None,
            root_uuid=uuids[roots_of[j]],
            resources=resources,
            traits=tuple(sorted(traits[p], key=_trait_order)),
        ))
    return out


def _trait_order(name: str) -> tuple[bool, str]:
    """Standard traits before custom ones, as Placement lists them (by trait id: the
    standard ones are created first); by name within each."""
    return name.startswith("CUSTOM_"), name
