"""Usages: what is allocated, per provider or per project/user (and consumer type).

Every query here starts from an indexed key (one provider id, or one
project's consumers), so its cost follows the answer's size, not the zone's.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store.allocations import DEFAULT_CONSUMER_TYPE
from strato.store.schema import (
    allocations,
    consumer_types,
    consumers,
    inventories,
    projects,
    resource_classes,
    users,
)

# GET /usages?consumer_type= values with a special meaning (Placement 1.38).
ALL_CONSUMER_TYPES = "all"
UNKNOWN_CONSUMER_TYPE = DEFAULT_CONSUMER_TYPE


@dataclass(frozen=True, slots=True)
class TypeUsage:
    """Usage of one consumer type: amounts per class and how many consumers."""

    resources: dict[str, int]
    consumer_count: int
    # Of consumer_count: those with allocations in a zone below too (counted there).
    spanning: int = 0


def provider_usages(conn: Connection, provider_id: int) -> dict[str, int]:
    """Usage of every class the provider has inventory of (0 when unused)."""
    inv, a = inventories, allocations
    used = (
        sa.select(a.c.resource_class_id, sa.func.sum(a.c.used).label("used"))
        .where(a.c.resource_provider_id == provider_id)
        .group_by(a.c.resource_class_id)
        .subquery()
    )
    rows = conn.execute(
        sa.select(resource_classes.c.name, sa.func.coalesce(used.c.used, 0))
        .select_from(
            inv.join(resource_classes, resource_classes.c.id == inv.c.resource_class_id)
            .outerjoin(used, used.c.resource_class_id == inv.c.resource_class_id))
        .where(inv.c.resource_provider_id == provider_id)
    ).all()
    return {r[0]: int(r[1]) for r in rows}


def _project_consumers(project_id: str, user_id: str | None) -> sa.Select[tuple[int]]:
    """Ids of the consumers of a project (and user): the indexed way in."""
    q = (sa.select(consumers.c.id)
         .join(projects, projects.c.id == consumers.c.project_id)
         .where(projects.c.external_id == project_id))
    if user_id is not None:
        q = q.join(users, users.c.id == consumers.c.user_id).where(
            users.c.external_id == user_id)
    return q


def _base(project_id: str, user_id: str | None) -> tuple[sa.FromClause, sa.ColumnElement[bool]]:
    join = (
        allocations.join(consumers, consumers.c.uuid == allocations.c.consumer_id)
        .join(resource_classes, resource_classes.c.id == allocations.c.resource_class_id)
        .outerjoin(consumer_types, consumer_types.c.id == consumers.c.consumer_type_id)
    )
    return join, consumers.c.id.in_(_project_consumers(project_id, user_id))


def project_usages(conn: Connection, project_id: str, user_id: str | None = None
                   ) -> dict[str, int]:
    """Total usage per class of a project's (and optionally one user's) consumers."""
    join, where = _base(project_id, user_id)
    rows = conn.execute(
        sa.select(resource_classes.c.name, sa.func.sum(allocations.c.used))
        .select_from(join).where(where).group_by(resource_classes.c.name)
    ).all()
    return {r[0]: int(r[1]) for r in rows}


def usages_by_consumer_type(
    conn: Connection, project_id: str, user_id: str | None = None,
    consumer_type: str | None = None,
) -> dict[str, TypeUsage]:
    """Usage grouped by consumer type (microversion 1.38).

    `consumer_type` None: every type, each under its own name ("unknown" for
    consumers without one). "all": one group with everything. "unknown": only
    consumers without a type. Any other name: only that type.
    """
    join, where = _base(project_id, user_id)
    if consumer_type == UNKNOWN_CONSUMER_TYPE:
        where = sa.and_(where, consumers.c.consumer_type_id.is_(None))
    elif consumer_type not in (None, ALL_CONSUMER_TYPES):
        where = sa.and_(where, consumer_types.c.name == consumer_type)
    if consumer_type == ALL_CONSUMER_TYPES:
        # One group: grouping by a constant is not portable SQL, so group by
        # nothing and name the group here.
        keys: list[sa.ColumnElement[str]] = []
    else:
        keys = [sa.func.coalesce(consumer_types.c.name, UNKNOWN_CONSUMER_TYPE).label("grp")]
    amounts = conn.execute(
        sa.select(*keys, resource_classes.c.name, sa.func.sum(allocations.c.used))
        .select_from(join).where(where).group_by(*keys, resource_classes.c.name)
    ).all()
    # Counted separately: a consumer of several classes is still one consumer.
    counts = conn.execute(
        sa.select(*keys, sa.func.count(sa.distinct(consumers.c.id)),
                  sa.func.count(sa.distinct(sa.case(
                      (consumers.c.spans_below.is_(True), consumers.c.id)))))
        .select_from(join).where(where).group_by(*keys)
    ).all()
    fixed = ALL_CONSUMER_TYPES if not keys else None
    count_of = {fixed or r[0]: (int(r[-2]), int(r[-1])) for r in counts}
    out: dict[str, TypeUsage] = {}
    for r in amounts:
        grp, rc, used = fixed or r[0], r[-2], r[-1]
        entry = out.setdefault(grp, TypeUsage(resources={}, consumer_count=count_of[grp][0],
                                              spanning=count_of[grp][1]))
        entry.resources[rc] = int(used)
    return out
