"""Reads provider records from the store for the index: all of them, or some.

A handful of set-oriented queries (providers, inventories, usage, traits,
aggregates), never one query per provider.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.engine.index import EMPTY
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.store.schema import (
    allocations,
    inventories,
    placement_aggregates,
    resource_classes,
    resource_provider_aggregates,
    resource_provider_traits,
    resource_providers,
    traits,
)

_T = TypeVar("_T")
rp = resource_providers
_parent = rp.alias("parent")
_root = rp.alias("root")
# Bound parameters per IN list (SQLite's default limit is far above; keeps plans small).
CHUNK = 900


def _chunks(values: Sequence[_T], size: int = CHUNK) -> Iterator[Sequence[_T]]:
    for i in range(0, len(values), size):
        yield values[i: i + size]


def load_records(conn: Connection, uuids: Iterable[str] | None = None) -> list[ProviderRecord]:
    """Records of the providers named by `uuids` (all providers if None).

    Providers that no longer exist are simply absent from the result.
    """
    q = sa.select(rp.c.id, rp.c.uuid, _parent.c.uuid, _root.c.uuid).select_from(
        rp.outerjoin(_parent, rp.c.parent_provider_id == _parent.c.id)
        .outerjoin(_root, rp.c.root_provider_id == _root.c.id))
    if uuids is None:
        rows = conn.execute(q.order_by(rp.c.id)).all()
        ids: list[int] | None = None
    else:
        wanted = sorted(set(uuids))
        rows = []
        for part in _chunks(wanted):
            rows += conn.execute(q.where(rp.c.uuid.in_(part))).all()
        rows.sort(key=lambda r: r[0])
        ids = [int(r[0]) for r in rows]
    if not rows:
        return []
    rc_names = {int(i): str(name) for i, name in conn.execute(
        sa.select(resource_classes.c.id, resource_classes.c.name))}
    invs = _inventories(conn, ids, rc_names)
    usage = _usage(conn, ids, rc_names)
    rpt = resource_provider_traits
    trait_map = _names(conn, ids, rpt.c.resource_provider_id, traits.c.name,
                       rpt.join(traits, traits.c.id == rpt.c.trait_id))
    rpa, agg = resource_provider_aggregates, placement_aggregates
    agg_map = _names(conn, ids, rpa.c.resource_provider_id, agg.c.uuid,
                     rpa.join(agg, agg.c.id == rpa.c.aggregate_id))
    # Providers mostly share a few sets of traits and aggregates: one object
    # per distinct set (about 200 bytes a provider each, otherwise).
    sets: dict[frozenset[str], frozenset[str]] = {EMPTY: EMPTY}

    def shared(names: Iterable[str]) -> frozenset[str]:
        s = frozenset(names)
        return sets.setdefault(s, s)
    out: list[ProviderRecord] = []
    for pid, uuid, parent_uuid, root_uuid in rows:
        out.append(ProviderRecord(
            uuid=uuid, parent_uuid=parent_uuid, root_uuid=root_uuid or uuid,
            inventories=invs.get(pid, {}), used=usage.get(pid, {}),
            traits=shared(trait_map.get(pid, ())),
            aggregates=shared(agg_map.get(pid, ()))))
    return out


def _where_ids(q: sa.Select, col: sa.ColumnElement[int], ids: list[int] | None
               ) -> Iterator[sa.Select]:
    if ids is None:
        yield q
        return
    for part in _chunks(ids):
        yield q.where(col.in_(part))


def _inventories(conn: Connection, ids: list[int] | None, rc_names: dict[int, str]
                 ) -> dict[int, dict[str, InventoryRecord]]:
    inv = inventories
    q = sa.select(inv.c.resource_provider_id, inv.c.resource_class_id, inv.c.total,
                  inv.c.reserved, inv.c.min_unit, inv.c.max_unit, inv.c.step_size,
                  inv.c.allocation_ratio)
    out: dict[int, dict[str, InventoryRecord]] = defaultdict(dict)
    for sel in _where_ids(q, inv.c.resource_provider_id, ids):
        for pid, rc_id, total, reserved, mn, mx, step, ratio in conn.execute(sel):
            out[int(pid)][rc_names.get(int(rc_id), str(rc_id))] = InventoryRecord(
                total=int(total), reserved=int(reserved), min_unit=int(mn), max_unit=int(mx),
                step_size=int(step), allocation_ratio=float(ratio))
    return out


def _usage(conn: Connection, ids: list[int] | None, rc_names: dict[int, str]
           ) -> dict[int, dict[str, int]]:
    a = allocations
    q = (sa.select(a.c.resource_provider_id, a.c.resource_class_id, sa.func.sum(a.c.used))
         .group_by(a.c.resource_provider_id, a.c.resource_class_id))
    out: dict[int, dict[str, int]] = defaultdict(dict)
    for sel in _where_ids(q, a.c.resource_provider_id, ids):
        for pid, rc_id, used in conn.execute(sel):
            out[int(pid)][rc_names.get(int(rc_id), str(rc_id))] = int(used or 0)
    return out


def _names(conn: Connection, ids: list[int] | None, rp_col: sa.ColumnElement[int],
           name_col: sa.ColumnElement[str], join: sa.FromClause) -> dict[int, list[str]]:
    q = sa.select(rp_col, name_col).select_from(join)
    out: dict[int, list[str]] = defaultdict(list)
    for sel in _where_ids(q, rp_col, ids):
        for pid, name in conn.execute(sel):
            out[int(pid)].append(name)
    return out


def load_usage(conn: Connection, uuids: Iterable[str]) -> dict[str, dict[str, int]]:
    """Current usage per class of the named providers: the refresh after an
    allocation change, which touches nothing else (one query)."""
    a, rc = allocations, resource_classes
    wanted = sorted(set(uuids))
    out: dict[str, dict[str, int]] = {u: {} for u in wanted}
    q = (sa.select(rp.c.uuid, rc.c.name, sa.func.sum(a.c.used))
         .select_from(a.join(rp, rp.c.id == a.c.resource_provider_id)
                      .join(rc, rc.c.id == a.c.resource_class_id))
         .group_by(rp.c.uuid, rc.c.name))
    for part in _chunks(wanted):
        for uuid, name, used in conn.execute(q.where(rp.c.uuid.in_(part))):
            out[uuid][name] = int(used or 0)
    return out


def known_names(conn: Connection) -> tuple[set[str], set[str]]:
    """(resource class names, trait names) that exist in the store."""
    rcs = set(conn.execute(sa.select(resource_classes.c.name)).scalars())
    tr = set(conn.execute(sa.select(traits.c.name)).scalars())
    return rcs, tr
