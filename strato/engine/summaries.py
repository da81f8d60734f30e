"""Provider summaries: capacity, usage, traits and tree of the providers in
the trees that the chosen candidates use (Placement's `provider_summaries`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from strato.engine.candidates import Candidate
from strato.engine.index import ProviderIndex


# Not frozen: a frozen dataclass sets each field through object.__setattr__,
# and an answer makes one of these per provider and class. Kept summaries are
# shared by answers: nothing changes one once made.
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


# Summaries kept per provider row, until the row or the index's structure
# changes (ProviderIndex.row_version, structure_version): between two answers
# only the rows claims touched change, and building one costs ten times a
# lookup. At most this many rows, least recently used dropped first.
KEPT_ROWS = 4096
# A larger answer (no limit) is built without them.
KEPT_ANSWER = 1024
_KEY = "provider-summaries"
_Kept = OrderedDict[int, tuple[int, "ProviderSummary"]]  # row -> (its version, summary)


def summarize(index: ProviderIndex, candidates: Sequence[Candidate], *,
              nested_aware: bool = True) -> list[ProviderSummary]:
    """Every provider of every tree a candidate takes resources from.

    Before microversion 1.29 (`nested_aware=False`) only the providers the
    candidates actually use are listed. Callers hold the engine's lock.
    """
    used = {p for c in candidates for p, _, _ in c.items}
    if not used:
        return []
    if nested_aware:
        lay = index.layout()
        roots = np.unique(index.root[list(used)])
        starts, ends = lay.offsets[roots], lay.offsets[roots + 1]
        if bool((ends - starts == 1).all()):
            positions = lay.members[starts]
        else:
            positions = np.concatenate([lay.members[a:b] for a, b
                                        in zip(starts.tolist(), ends.tolist(), strict=True)])
    else:
        positions = np.asarray(sorted(used), dtype=np.int64)
    if len(positions) > KEPT_ANSWER:
        # A large answer (no limit) is built as it is: kept, it would only
        # push out the rows the limited answers share, and the table once
        # grown to its size stays that big.
        return _build(index, positions)
    kept: tuple[int, _Kept] | None = index.derived.get(_KEY)
    if kept is None or kept[0] != index.structure_version:
        kept = index.derived[_KEY] = (index.structure_version, OrderedDict())
    rows: _Kept = kept[1]
    plist = positions.tolist()
    versions = index.row_version[positions].tolist()
    out: list[ProviderSummary | None] = []
    missing: list[int] = []
    for j, p in enumerate(plist):
        hit = rows.get(p)
        if hit is not None and hit[0] == versions[j]:
            rows.move_to_end(p)
            out.append(hit[1])
        else:
            out.append(None)
            missing.append(j)
    if missing:
        made = _build(index, positions[missing])
        for j, summary in zip(missing, made, strict=True):
            out[j] = summary
            rows[plist[j]] = (versions[j], summary)
        while len(rows) > KEPT_ROWS:
            rows.popitem(last=False)
    return out  # type: ignore[return-value]  # every None was filled


def _build(index: ProviderIndex, positions: npt.NDArray[np.integer[Any]]) -> list[ProviderSummary]:
    """The summaries of `positions`, from the index's columns."""
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
