"""Hypothesis strategies: small random provider worlds and requests."""

from __future__ import annotations

import uuid
from dataclasses import replace

from hypothesis import strategies as st

from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.engine.request import CandidateRequest, GroupPolicy, RequestGroup

CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
TRAITS = ("CUSTOM_A", "CUSTOM_B")
AGGS = ("00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000a2")
SHARING = "MISC_SHARES_VIA_AGGREGATE"


@st.composite
def inventories(draw: st.DrawFn) -> tuple[dict[str, InventoryRecord], dict[str, int]]:
    invs: dict[str, InventoryRecord] = {}
    used: dict[str, int] = {}
    for rc in draw(st.lists(st.sampled_from(CLASSES), unique=True, max_size=3)):
        odd = draw(st.integers(0, 5)) == 0  # now and then, awkward unit rules
        inv = InventoryRecord(
            total=draw(st.integers(1, 10)), reserved=draw(st.sampled_from((0, 0, 0, 1))),
            min_unit=draw(st.integers(1, 2)) if odd else 1,
            max_unit=draw(st.integers(1, 4)) if odd else 10,
            step_size=draw(st.sampled_from((1, 2))) if odd else 1,
            allocation_ratio=draw(st.sampled_from((1.0, 1.0, 1.5))))
        invs[rc] = inv
        if inv.capacity > 0:
            used[rc] = draw(st.integers(0, inv.capacity // 2 + 1))
    return invs, used


@st.composite
def worlds(draw: st.DrawFn) -> list[ProviderRecord]:
    n = draw(st.integers(1, 7))
    uuids = [str(uuid.UUID(int=draw(st.integers(1, 2**63)) * 2**64 + i)) for i in range(n)]
    parents: list[int | None] = [None]
    for i in range(1, n):
        parents.append(draw(st.one_of(st.none(), st.integers(0, i - 1))))
    roots: list[int] = []
    for i, par in enumerate(parents):
        roots.append(i if par is None else roots[par])
    out = []
    for i in range(n):
        invs, used = draw(inventories())
        traits = set(draw(st.lists(st.sampled_from(TRAITS), unique=True)))
        if parents[i] is None and draw(st.integers(0, 3)) == 0:
            traits.add(SHARING)
        aggs = frozenset(draw(st.lists(st.sampled_from(AGGS), unique=True)))
        par = parents[i]
        out.append(ProviderRecord(
            uuid=uuids[i], parent_uuid=uuids[par] if par is not None else None,
            root_uuid=uuids[roots[i]], inventories=invs, used=used,
            traits=frozenset(traits), aggregates=aggs))
    return out


@st.composite
def groups(draw: st.DrawFn, suffix: str, allow_resourceless: bool) -> RequestGroup:
    min_size = 0 if allow_resourceless else 1
    rcs = draw(st.lists(st.sampled_from(CLASSES), unique=True, min_size=min_size, max_size=2))
    resources = tuple((rc, draw(st.integers(1, 2))) for rc in rcs)
    traits = (draw(st.lists(st.sampled_from(TRAITS), unique=True, max_size=2))
              if draw(st.integers(0, 2)) == 0 else [])
    required: list[tuple[str, ...]] = []
    forbidden: list[str] = []
    for t in traits:
        kind = draw(st.integers(0, 2))
        if kind == 0:
            required.append((t,))
        elif kind == 1:
            forbidden.append(t)
        else:
            required.append(TRAITS)
    member_of: tuple[tuple[str, ...], ...] = ()
    forbidden_aggs: tuple[str, ...] = ()
    agg_kind = draw(st.integers(0, 7))
    if agg_kind == 1:
        member_of = ((AGGS[0],),)
    elif agg_kind == 2:
        member_of = (AGGS,)
    elif agg_kind == 3:
        forbidden_aggs = (AGGS[1],)
    return RequestGroup(suffix=suffix, resources=resources, required=tuple(required),
                        forbidden=tuple(forbidden), member_of=member_of,
                        forbidden_aggs=forbidden_aggs)


@st.composite
def requests(draw: st.DrawFn, world: list[ProviderRecord]) -> CandidateRequest:
    suffixes = draw(st.sampled_from(((""), ("1",), ("", "1"), ("1", "2"), ("", "1", "2"),
                                     ("_A", "_B"))))
    if isinstance(suffixes, str):
        suffixes = (suffixes,)
    same_subtree: tuple[tuple[str, ...], ...] = ()
    granular = [s for s in suffixes if s]
    if len(granular) >= 2 and draw(st.booleans()):
        same_subtree = (tuple(granular),)
    gs = []
    for s in suffixes:
        g = draw(groups(s, allow_resourceless=bool(same_subtree) and s == granular[-1]))
        if draw(st.integers(0, 7)) == 0:
            g = RequestGroup(suffix=g.suffix, resources=g.resources, required=g.required,
                             forbidden=g.forbidden, member_of=g.member_of,
                             forbidden_aggs=g.forbidden_aggs,
                             in_tree=draw(st.sampled_from([r.uuid for r in world])))
        gs.append(g)
    if not any(g.resources for g in gs):
        first = gs[0]
        gs[0] = RequestGroup(suffix=first.suffix, resources=(("VCPU", 1),),
                             required=first.required, forbidden=first.forbidden)
    root_required: tuple[tuple[str, ...], ...] = ()
    root_forbidden: tuple[str, ...] = ()
    rr = draw(st.integers(0, 6))
    if rr == 1:
        root_required = (("CUSTOM_A",),)
    elif rr == 2:
        root_forbidden = ("CUSTOM_B",)
    return CandidateRequest(
        groups=tuple(gs),
        group_policy=draw(st.sampled_from((GroupPolicy.NONE, GroupPolicy.ISOLATE))),
        limit=draw(st.one_of(st.none(), st.integers(1, 4))),
        root_required=root_required, root_forbidden=root_forbidden,
        same_subtree=same_subtree, nested_aware=draw(st.integers(0, 4)) > 0)


def move_usage(data: st.DataObject, index: ProviderIndex, rec: ProviderRecord,
               action: str) -> None:
    """`action` "set": every class of `rec` to a drawn usage (up to a little
    over capacity); "add": one class by a drawn step (either way)."""
    if not rec.inventories:
        return
    if action == "set":
        index.set_usage(rec.uuid, {rc: data.draw(st.integers(0, inv.capacity + 2))
                                   for rc, inv in rec.inventories.items()})
    elif action == "add":
        rc = data.draw(st.sampled_from(sorted(rec.inventories)))
        index.add_usage(rec.uuid, {rc: data.draw(st.integers(-2, 4))})


def current(index: ProviderIndex, rec: ProviderRecord) -> ProviderRecord:
    """`rec` with the usage the index holds now."""
    p = index.pos[rec.uuid]
    return replace(rec, used={rc: int(col.used[p]) for rc, col in index.rc.items()
                              if rc in rec.inventories})


def change_one(data: st.DataObject, index: ProviderIndex,
               records: dict[str, ProviderRecord]) -> None:
    """One drawn provider's usage, an inventory or its traits changed in
    `index` (and in `records`), or nothing."""
    u = data.draw(st.sampled_from(sorted(records)))
    rec = records[u]
    action = data.draw(st.sampled_from(("set", "add", "inventory", "traits", "none")))
    if action in ("set", "add"):
        move_usage(data, index, rec, action)
    elif action == "inventory" and rec.inventories:
        rc = data.draw(st.sampled_from(sorted(rec.inventories)))
        inv = rec.inventories[rc]
        invs = {**rec.inventories,
                rc: InventoryRecord(total=data.draw(st.integers(1, 10)),
                                    reserved=inv.reserved, min_unit=inv.min_unit,
                                    max_unit=inv.max_unit, step_size=inv.step_size,
                                    allocation_ratio=inv.allocation_ratio)}
        records[u] = replace(current(index, rec), inventories=invs)
        index.apply([records[u]], ())
    elif action == "traits":
        records[u] = replace(current(index, rec), traits=rec.traits ^ {TRAITS[0]})
        index.apply([records[u]], ())
