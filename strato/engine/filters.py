"""Hard filters: boolean masks over every provider of the index at once.

Each function answers one question for all providers, vectorised. The
candidate builder combines them per request group (`group_masks`) once per
request, before any combinatorics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strato.engine.index import SHARING_TRAIT, BoolArray, ProviderIndex
from strato.engine.request import RequestGroup


def fits(index: ProviderIndex, rc: str, amount: int) -> BoolArray:
    """Providers that could take one more `amount` of `rc`: inventory exists,
    free capacity suffices, and min_unit / max_unit / step_size allow it."""
    col = index.rc_columns(rc)
    n = index.size
    if col is None:
        return np.zeros(n, dtype=bool)
    ok: BoolArray = col.has[:n] & (col.used[:n] + amount <= col.capacity[:n])
    ok &= col.min_unit[:n] <= amount
    ok &= col.max_unit[:n] >= amount
    ok &= (amount % col.step[:n]) == 0
    return ok


def has_traits(index: ProviderIndex, required: tuple[tuple[str, ...], ...]) -> BoolArray:
    """Providers that themselves satisfy every any-of set of traits."""
    ok = np.ones(index.size, dtype=bool)
    for anyof in required:
        ok &= any_of(index.trait_mask, anyof, index.size)
    return ok


def lacks_traits(index: ProviderIndex, forbidden: tuple[str, ...]) -> BoolArray:
    ok = np.ones(index.size, dtype=bool)
    for name in forbidden:
        ok &= ~index.trait_mask(name)
    return ok


def in_aggregates(index: ProviderIndex, member_of: tuple[tuple[str, ...], ...]) -> BoolArray:
    """Providers that are themselves in at least one aggregate of every set."""
    ok = np.ones(index.size, dtype=bool)
    for anyof in member_of:
        ok &= any_of(index.agg_mask, anyof, index.size)
    return ok


def in_any_aggregate(index: ProviderIndex, aggs: tuple[str, ...]) -> BoolArray:
    return any_of(index.agg_mask, aggs, index.size)


def any_of(lookup: object, names: tuple[str, ...], n: int) -> BoolArray:
    out = np.zeros(n, dtype=bool)
    for name in names:
        out |= lookup(name)  # type: ignore[operator]
    return out


def in_tree(index: ProviderIndex, root: int | None) -> BoolArray:
    n = index.size
    if root is None:
        return np.ones(n, dtype=bool)
    ok: BoolArray = index.root[:n] == root
    return ok


def of_root(index: ProviderIndex, per_provider: BoolArray) -> BoolArray:
    """The value of `per_provider` at each provider's root."""
    out: BoolArray = per_provider[index.root[: index.size]]
    return out


@dataclass(slots=True)
class GroupMasks:
    """Everything the candidate builder needs to know about one request group."""

    group: RequestGroup
    # Per requested class: providers that can take the amount (within in_tree).
    fit: dict[str, BoolArray]
    # The provider on its own passes the group's traits, aggregates, in_tree:
    # together with `fit` this makes a single-provider (granular) candidate.
    single: BoolArray
    # Unsuffixed group only, per class: providers that may serve that class
    # from within their own tree (aggregates may be on the provider or its root)...
    entry: dict[str, BoolArray]
    # ...and sharing providers that may serve it to the trees they are
    # associated with (never under in_tree).
    shared_entry: dict[str, BoolArray]
    # Roots that may not anchor a candidate of this group (forbidden aggregate
    # on the root of the tree being served), for shared entries.
    bad_anchor: BoolArray


def group_masks(index: ProviderIndex, group: RequestGroup, root: int | None) -> GroupMasks:
    """Masks for `group`; `root` is the position of the in_tree root, if any."""
    live = index.live()
    tree = in_tree(index, root) & live
    fit = {rc: fits(index, rc, amount) & tree for rc, amount in group.resources}
    member = in_aggregates(index, group.member_of)
    bad = (in_any_aggregate(index, group.forbidden_aggs) if group.forbidden_aggs
           else np.zeros(index.size, dtype=bool))
    no_forbidden = lacks_traits(index, group.forbidden)
    single = tree & has_traits(index, group.required) & no_forbidden & member & ~bad
    for mask in fit.values():
        single = single & mask
    entry: dict[str, BoolArray] = {}
    shared: dict[str, BoolArray] = {}
    if not group.granular:
        # In a tree an aggregate on the root spans the whole tree (Placement).
        tree_member = member | of_root(index, member)
        tree_ok = tree_member & ~bad & ~of_root(index, bad) & no_forbidden
        sharing = index.trait_mask(SHARING_TRAIT) & member & ~bad & no_forbidden
        for rc, mask in fit.items():
            entry[rc] = mask & tree_ok
            shared[rc] = (mask & sharing if root is None
                          else np.zeros(index.size, dtype=bool))
    return GroupMasks(group=group, fit=fit, single=single, entry=entry,
                      shared_entry=shared, bad_anchor=bad)


def anchor_roots(index: ProviderIndex, required: tuple[tuple[str, ...], ...],
                 forbidden: tuple[str, ...]) -> BoolArray:
    """Roots that may anchor a candidate under `root_required`."""
    ok = index.live() & (index.root[: index.size] == np.arange(index.size))
    if required:
        ok &= has_traits(index, required)
    if forbidden:
        ok &= lacks_traits(index, forbidden)
    return ok
