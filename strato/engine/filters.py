"""Hard filters: boolean masks over every provider of the index at once.

Each function answers one question for all providers, vectorised. The
candidate builder combines them per request group (`group_masks`) once per
request, before any combinatorics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from strato.engine.index import MAX_HELD, SHARING_TRAIT, BoolArray, ProviderIndex, RcColumns
from strato.engine.request import RequestGroup


def fits(index: ProviderIndex, rc: str, amount: int) -> BoolArray:
    """Providers that could take one more `amount` of `rc`: inventory exists,
    free capacity suffices, and min_unit / max_unit / step_size allow it."""
    return fits_rows(index, rc, amount, slice(0, index.size))


def fits_rows(index: ProviderIndex, rc: str, amount: int,
              rows: slice | npt.NDArray[np.int64]) -> BoolArray:
    """`fits` for some rows only (a slice or positions), in their order."""
    col = index.rc_columns(rc)
    if col is None:
        return np.zeros(len(range(index.size)[rows]) if isinstance(rows, slice)
                        else len(rows), dtype=bool)
    ok: BoolArray = col.used[rows] + _bounded(amount) <= col.capacity[rows]
    ok &= _units_allow(index, rc, amount)[rows]
    return ok


def takes(col: RcColumns, rows: slice | npt.NDArray[np.int64], total: int) -> BoolArray:
    """Which of `rows` could take `total` of `col`'s class at once (the sum of
    several groups): free capacity and max_unit allow it."""
    total = _bounded(total)
    ok: BoolArray = (col.used[rows] + total <= col.capacity[rows]) & (col.max_unit[rows] >= total)
    return ok


def _bounded(amount: int) -> int:
    """`amount` (a query may ask up to 2**63 - 1, several groups more) as
    compared with the columns: beyond what a row holds, it fits none, and
    used + amount stays within int64."""
    return min(amount, MAX_HELD + 1)


# Kept masks of `_units_allow` per index, before the oldest are dropped.
_MAX_UNIT_MASKS = 256
_UNITS_KEY = "units-allow"


def _units_allow(index: ProviderIndex, rc: str, amount: int) -> BoolArray:
    """Providers whose `rc` inventory exists and whose min_unit, max_unit and
    step_size allow taking `amount`, over all the index's rows. It depends on
    inventories alone, so it is kept until they change (or the rows grow)."""
    col = index.rc[rc]
    rows = len(col.has)
    kept = index.derived.get(_UNITS_KEY)
    if kept is None or kept[0] != index.inventory_version or kept[1] != rows:
        kept = index.derived[_UNITS_KEY] = (index.inventory_version, rows, {})
    masks: dict[tuple[str, int], BoolArray] = kept[2]
    got = masks.get((rc, amount))
    if got is None:
        if len(masks) >= _MAX_UNIT_MASKS:
            masks.clear()
        got = col.has & (col.min_unit <= amount) & (col.max_unit >= amount)
        got &= (amount % col.step) == 0
        masks[(rc, amount)] = got
    return got


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


@dataclass(slots=True)
class GroupStatic:
    """The part of a group's masks that only a change of structure (tree,
    traits, aggregates, liveness) moves; usage and inventory do not."""

    tree: BoolArray  # live, and within in_tree
    # tree, the group's traits and aggregates on the provider itself
    single: BoolArray
    # Unsuffixed group only: may serve from within its tree / as a sharing provider.
    tree_ok: BoolArray | None
    sharing: BoolArray | None
    bad: BoolArray


def group_static(index: ProviderIndex, group: RequestGroup, root: int | None) -> GroupStatic:
    tree = in_tree(index, root) & index.live()
    member = in_aggregates(index, group.member_of)
    bad = (in_any_aggregate(index, group.forbidden_aggs) if group.forbidden_aggs
           else np.zeros(index.size, dtype=bool))
    no_forbidden = lacks_traits(index, group.forbidden)
    single = tree & has_traits(index, group.required) & no_forbidden & member & ~bad
    tree_ok = sharing = None
    if not group.granular:
        # In a tree an aggregate on the root spans the whole tree (Placement).
        tree_member = member | of_root(index, member)
        tree_ok = tree_member & ~bad & ~of_root(index, bad) & no_forbidden
        sharing = (index.trait_mask(SHARING_TRAIT) & member & ~bad & no_forbidden
                   if root is None else np.zeros(index.size, dtype=bool))
    return GroupStatic(tree=tree, single=single, tree_ok=tree_ok, sharing=sharing, bad=bad)


def group_masks(index: ProviderIndex, group: RequestGroup, root: int | None,
                static: GroupStatic | None = None) -> GroupMasks:
    """Masks for `group`; `root` is the position of the in_tree root, if any."""
    st = static if static is not None else group_static(index, group, root)
    fit = {rc: fits(index, rc, amount) & st.tree for rc, amount in group.resources}
    single = st.single
    for mask in fit.values():
        single = single & mask
    if not fit:
        single = single.copy()
    entry: dict[str, BoolArray] = {}
    shared: dict[str, BoolArray] = {}
    if st.tree_ok is not None and st.sharing is not None:
        for rc, mask in fit.items():
            entry[rc] = mask & st.tree_ok
            shared[rc] = mask & st.sharing
    return GroupMasks(group=group, fit=fit, single=single, entry=entry,
                      shared_entry=shared, bad_anchor=st.bad)


def anchor_roots(index: ProviderIndex, required: tuple[tuple[str, ...], ...],
                 forbidden: tuple[str, ...]) -> BoolArray:
    """Roots that may anchor a candidate under `root_required`."""
    ok = index.live() & (index.root[: index.size] == np.arange(index.size))
    if required:
        ok &= has_traits(index, required)
    if forbidden:
        ok &= lacks_traits(index, forbidden)
    return ok
