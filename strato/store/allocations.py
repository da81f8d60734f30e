"""Allocations, and `claim`: the one write path for every allocation in Strato.

The Placement API (PUT/POST/DELETE allocations, reshaper), the scheduler's
schedule-and-claim and the zone tree's cross-zone claims all go through
`claim`. It runs inside the caller's write transaction and either applies
every consumer's allocations or raises and changes nothing.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from strato.model import errors
from strato.model.inventory import Inventory, amount_problem
from strato.store import changes
from strato.store.db import lock_providers
from strato.store.raw import Raw, marks
from strato.store.resource_classes import ids_by_name
from strato.store.schema import (
    allocations,
    consumer_types,
    consumers,
    projects,
    resource_classes,
    resource_providers,
    users,
)
from strato.store.util import get_or_create_id, utcnow


class _AnyGeneration:
    def __repr__(self) -> str:
        return "ANY_GENERATION"


# The consumer generation check is skipped (Placement microversions < 1.28).
ANY_GENERATION: Final = _AnyGeneration()
# Placement's default for consumers written before project/user were required.
INCOMPLETE_CONSUMER_PROJECT = "00000000-0000-0000-0000-000000000000"
INCOMPLETE_CONSUMER_USER = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class ConsumerClaim:
    """The complete new allocations of one consumer (empty: remove them all)."""

    consumer_uuid: str
    allocations: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    project_id: str | None = None
    user_id: str | None = None
    consumer_type: str | None = None
    # The consumer generation the writer read. None: the consumer must not
    # exist yet. ANY_GENERATION: do not check.
    generation: int | _AnyGeneration | None = ANY_GENERATION
    # An emptying written as allocations (POST /allocations with {}): as in
    # Placement, the providers the consumer leaves get their generation
    # bumped, which DELETE /allocations does not do.
    bump_emptied: bool = False
    # The request (as this zone's ledger knows it) that makes this new
    # consumer; "" for any other write (see `placed_by`).
    placed_by: str = ""
    # A new consumer that gets allocations in a zone below too (consumers.spans_below).
    spans_below: bool = False


@dataclass(frozen=True, slots=True)
class ClaimResult:
    # consumer uuid -> its generation after the write (None: consumer removed)
    generations: dict[str, int | None]
    touched_providers: tuple[str, ...]
    change_seq: int


def claim(conn: Connection, claims: Sequence[ConsumerClaim]) -> ClaimResult:
    """Replace the allocations of every consumer in `claims`, atomically.

    Checks, inside the caller's write transaction: consumer generations,
    providers and classes exist, min_unit/max_unit/step_size, and capacity
    ((total - reserved) * allocation_ratio) against everyone else's usage.
    Every provider the new allocations use gets its generation bumped (as in
    Placement: not those that only lose allocations, unless `bump_emptied`).
    Any failure raises a StratoError; the caller's transaction then rolls back.

    The statements run on the DBAPI cursor (`strato.store.raw`): this is the
    hottest write path, and SQLAlchemy's per-statement work was most of it.
    """
    consumer_uuids = [c.consumer_uuid for c in claims]
    if len(set(consumer_uuids)) != len(consumer_uuids):
        raise errors.BadRequest("a consumer appears more than once in one write")
    rc_names = {rc for c in claims for per_rp in c.allocations.values() for rc in per_rp}
    raw = Raw(conn)
    try:
        try:
            rc_ids = ids_by_name(conn, rc_names)
        except errors.BadRequest as exc:
            _check_consumer_generations(raw, claims)  # Placement's 409 comes first
            raise errors.BadRequest(f"Unable to allocate inventory for consumer "
                                    f"{', '.join(consumer_uuids)}: {exc.detail}") from None
        return _claim(conn, raw, claims, consumer_uuids, rc_ids)
    finally:
        raw.close()


def _providers(raw: Raw, ids_or_uuids: str, values: Sequence[object],
               consumer_uuids: Sequence[str]) -> list[tuple[int, str]]:
    """(id, uuid) of the providers named (by `ids_or_uuids` column) plus those the
    consumers' current allocations use."""
    old = (f"SELECT resource_provider_id FROM allocations "
           f"WHERE consumer_id IN ({marks(len(consumer_uuids))})")
    if not values:
        rows = raw.all(f"SELECT id, uuid FROM resource_providers WHERE id IN ({old})",
                       consumer_uuids)
    else:
        rows = raw.all(f"SELECT id, uuid FROM resource_providers WHERE {ids_or_uuids} IN "
                       f"({marks(len(values))}) OR id IN ({old})", [*values, *consumer_uuids])
    return [(int(r[0]), str(r[1])) for r in rows]


def _claim(conn: Connection, raw: Raw, claims: Sequence[ConsumerClaim],
           consumer_uuids: list[str], rc_ids: Mapping[str, int]) -> ClaimResult:
    # Providers named by the new allocations, and those the old ones used:
    # one query for both.
    new_rp_uuids = {u for c in claims for u in c.allocations}
    rows = _providers(raw, "uuid", sorted(new_rp_uuids), consumer_uuids)
    named = {u: i for i, u in rows if u in new_rp_uuids}
    missing = sorted(new_rp_uuids - named.keys())
    if missing:
        # Placement checks the consumers' generations before it looks the
        # providers up: a stale one is its 409, whatever the providers.
        _check_consumer_generations(raw, claims)
        raise errors.BadRequest(
            f"Allocation for resource provider '{missing[0]}' that does not exist.")
    affected_ids = sorted({i for i, _ in rows})
    uuid_of: dict[int, str] = dict(rows)
    if not raw.sqlite:
        uuid_of = _lock_affected(conn, raw, affected_ids, consumer_uuids)
        affected_ids = sorted(uuid_of)
        gone = sorted(u for u, i in named.items() if i not in uuid_of)
        if gone:  # deleted while this write waited for its lock
            _check_consumer_generations(raw, claims)
            raise errors.BadRequest(
                f"Allocation for resource provider '{gone[0]}' that does not exist.")

    existing = _check_consumer_generations(raw, claims)

    # New demand per (provider id, class id), checked against inventories.
    demand: dict[tuple[int, int], int] = defaultdict(int)
    rows_to_insert: list[tuple[int, str, int, int]] = []
    for c in claims:
        for rp_uuid, per_rc in c.allocations.items():
            rp_id = named[rp_uuid]
            for rc_name, amount in per_rc.items():
                if not isinstance(amount, int) or amount < 1:
                    raise errors.BadRequest(
                        f"allocation of {rc_name} on resource provider {rp_uuid} must be a "
                        f"positive integer, got {amount!r}")
                demand[(rp_id, rc_ids[rc_name])] += amount
                rows_to_insert.append((rp_id, c.consumer_uuid, rc_ids[rc_name], amount))
    if demand:
        _check_capacity(raw, demand, rows_to_insert, consumer_uuids, uuid_of, rc_ids)

    gaining = set(named.values())
    emptied = [c.consumer_uuid for c in claims if c.bump_emptied and not c.allocations]
    if emptied:
        gaining |= {int(r[0]) for r in raw.all(
            "SELECT DISTINCT resource_provider_id FROM allocations "
            f"WHERE consumer_id IN ({marks(len(emptied))})", emptied)}
    raw.run(f"DELETE FROM allocations WHERE consumer_id IN ({marks(len(consumer_uuids))})",
            consumer_uuids)
    now = raw.stamp(utcnow())
    raw.many("INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, "
             "used, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
             [(*r, now, now) for r in rows_to_insert])
    # As Placement, the generation moves on the providers the new allocations
    # use (not on those that only lose some). Every affected provider is
    # locked (PostgreSQL) or the database is (SQLite): one statement.
    if gaining:
        bumped = raw.run("UPDATE resource_providers SET generation = generation + 1 "
                         f"WHERE id IN ({marks(len(gaining))})", sorted(gaining))
        if bumped != len(gaining):
            raise errors.ConcurrentUpdate("a resource provider changed concurrently; retry")

    generations = _write_consumers(conn, raw, claims, existing)
    touched = tuple(sorted(uuid_of[i] for i in affected_ids))
    seq = changes.record(conn, "allocation", touched)
    return ClaimResult(generations=generations, touched_providers=touched, change_seq=seq)


LOCK_ATTEMPTS = 5


def _lock_affected(conn: Connection, raw: Raw, ids: list[int],
                   consumer_uuids: Sequence[str]) -> dict[int, str]:
    """Lock (PostgreSQL) the providers a write touches, in id order; their uuid by id.

    The consumers' old allocations may move before the locks are held. When
    they then name a provider not locked, the locks are given back (rolled back
    to a savepoint) and all are taken again in id order: taking the newcomer
    while holding a higher id would deadlock with a writer locking the other
    way round.
    """
    wanted = set(ids)
    for _ in range(LOCK_ATTEMPTS):
        raw.run("SAVEPOINT strato_lock")
        lock_providers(conn, sorted(wanted))
        locked = dict(_providers(raw, "id", sorted(wanted), consumer_uuids))
        if locked.keys() <= wanted:
            raw.run("RELEASE SAVEPOINT strato_lock")
            return locked
        raw.run("ROLLBACK TO SAVEPOINT strato_lock")
        wanted |= locked.keys()
    raise errors.ConcurrentUpdate("the consumers' allocations kept changing; retry")


def _check_consumer_generations(raw: Raw, claims: Sequence[ConsumerClaim]
                                ) -> dict[str, tuple[int, int]]:
    """Existing consumers as uuid -> (id, generation), after checking generations."""
    rows = raw.all(f"SELECT uuid, id, generation FROM consumers WHERE uuid IN "
                   f"({marks(len(claims))})", [c.consumer_uuid for c in claims])
    existing = {str(r[0]): (int(r[1]), int(r[2])) for r in rows}
    for c in claims:
        if isinstance(c.generation, _AnyGeneration):
            continue
        have = existing.get(c.consumer_uuid)
        stored = None if have is None else have[1]
        if c.generation != stored:
            # Placement's wording, which clients match on: "expected" is the
            # stored generation (null: no such consumer), "got" the request's.
            shown = "null" if stored is None else str(stored)
            raise errors.ConcurrentUpdate(
                f"consumer generation conflict - expected {shown} but got {c.generation} "
                f"(consumer {c.consumer_uuid})")
    return existing


def _check_capacity(
    raw: Raw,
    demand: Mapping[tuple[int, int], int],
    rows: Sequence[tuple[int, str, int, int]],
    consumer_uuids: Sequence[str],
    uuid_of: Mapping[int, str],
    rc_ids: Mapping[str, int],
) -> None:
    rp_ids = sorted({k[0] for k in demand})
    rc_name = {v: k for k, v in rc_ids.items()}
    # Usage by everyone except the consumers being rewritten, per inventory row.
    invs: dict[tuple[int, int], Inventory] = {}
    used: dict[tuple[int, int], int] = {}
    for r in raw.all(
            "SELECT i.resource_provider_id, i.resource_class_id, i.total, i.reserved, "
            "i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, "
            "(SELECT COALESCE(SUM(a.used), 0) FROM allocations a "
            "WHERE a.resource_provider_id = i.resource_provider_id "
            "AND a.resource_class_id = i.resource_class_id "
            f"AND a.consumer_id NOT IN ({marks(len(consumer_uuids))})) "
            f"FROM inventories i WHERE i.resource_provider_id IN ({marks(len(rp_ids))})",
            [*consumer_uuids, *rp_ids]):
        key = (int(r[0]), int(r[1]))
        invs[key] = Inventory(
            resource_class=rc_name.get(key[1], str(key[1])), total=r[2], reserved=r[3],
            min_unit=r[4], max_unit=r[5], step_size=r[6], allocation_ratio=r[7])
        used[key] = int(r[8])
    for rp_id, _, rc_id, amount in rows:
        key = (rp_id, rc_id)
        inv = invs.get(key)
        name = rc_name[key[1]]
        if inv is None:
            raise errors.Conflict(
                f"Unable to allocate inventory: Inventory for '{name}' on resource provider "
                f"'{uuid_of[key[0]]}' invalid.")
        problem = amount_problem(inv, amount)
        if problem:
            # Placement treats this as an allocation that does not fit the
            # inventory (InvalidAllocationConstraintsViolated): 409, not 400.
            raise errors.Conflict(
                f"Unable to allocate inventory: Allocation of {name} on resource provider "
                f"'{uuid_of[key[0]]}' violates min_unit, max_unit, or step_size: {problem}")
    for key, amount in demand.items():
        inv = invs[key]
        have = used.get(key, 0)
        # As Placement: over capacity (an inventory shrunk below its usage) a
        # write may still go through if it leaves the usage no higher than it
        # was, so a provider that is over can still be moved off or resized down
        # (its usage before the write read only then: not on a claim's path).
        if have + amount > inv.capacity and have + amount > _usage(raw, key):
            raise errors.Conflict(
                f"Unable to allocate inventory: Unable to create allocation for "
                f"'{inv.resource_class}' on resource provider '{uuid_of[key[0]]}'. The "
                f"requested amount would exceed the capacity ({amount} requested, "
                f"{have} used of {inv.capacity}).")


def _usage(raw: Raw, key: tuple[int, int]) -> int:
    """Everyone's usage of one inventory row, as it is in the transaction."""
    row = raw.all("SELECT COALESCE(SUM(used), 0) FROM allocations "
                  "WHERE resource_provider_id = ? AND resource_class_id = ?", list(key))
    return int(row[0][0])


# Projects, users and consumer types are never renamed or deleted, so once
# committed their ids can be remembered per database (keyed by the engine).
_NAME_IDS: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], int]] = (
    weakref.WeakKeyDictionary())
_NAME_IDS_LOCK = threading.Lock()


def _name_id(conn: Connection, table: sa.Table, column: str, value: str,
             fresh: set[tuple[str, str]]) -> int:
    """Id of a project/user/type name, creating it if new. `fresh` collects the
    names this transaction created: they are not remembered (it may roll back)."""
    key = (table.name, value)
    with _NAME_IDS_LOCK:
        found = _NAME_IDS.setdefault(conn.engine, {}).get(key)
    if found is not None:
        return found
    col = table.c[column]
    committed = conn.execute(sa.select(table.c.id).where(col == value)).scalar()
    if committed is None or key in fresh:
        fresh.add(key)
        return committed if committed is not None else get_or_create_id(
            conn, table, column, value)
    with _NAME_IDS_LOCK:
        _NAME_IDS.setdefault(conn.engine, {})[key] = int(committed)
    return int(committed)


def _write_consumers(conn: Connection, raw: Raw, claims: Sequence[ConsumerClaim],
                     existing: Mapping[str, tuple[int, int]]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    fresh: set[tuple[str, str]] = set()
    now = raw.stamp(utcnow())
    for c in claims:
        have = existing.get(c.consumer_uuid)
        if not c.allocations:
            # A consumer with no allocations is no longer recorded (as in Placement).
            if have is not None:
                raw.run("DELETE FROM consumers WHERE id = ?", (have[0],))
            out[c.consumer_uuid] = None
            continue
        values: dict[str, object] = {"updated_at": now}
        if c.project_id is not None or have is None:
            values["project_id"] = _name_id(
                conn, projects, "external_id", c.project_id or INCOMPLETE_CONSUMER_PROJECT,
                fresh)
        if c.user_id is not None or have is None:
            values["user_id"] = _name_id(
                conn, users, "external_id", c.user_id or INCOMPLETE_CONSUMER_USER, fresh)
        if c.consumer_type is not None:
            values["consumer_type_id"] = _name_id(conn, consumer_types, "name",
                                                  c.consumer_type, fresh)
        if have is None:
            row = {"uuid": c.consumer_uuid, "generation": 1, "created_at": now,
                   "placed_by": c.placed_by, **values}
            if c.spans_below:
                row["spans_below"] = True
            insert = (f"INSERT INTO consumers ({', '.join(row)}) "
                      f"VALUES ({marks(len(row))})")
            if raw.sqlite:
                # Writers are serialised and the consumer was just read as absent.
                raw.run(insert, list(row.values()))
            elif raw.first(insert + " ON CONFLICT (uuid) DO NOTHING RETURNING id",
                           list(row.values())) is None:
                raise errors.ConcurrentUpdate(
                    f"consumer generation conflict - consumer {c.consumer_uuid} was "
                    "created concurrently; retry")
            out[c.consumer_uuid] = 1
        else:
            sets = ", ".join(f"{k} = ?" for k in values)
            changed = raw.run(f"UPDATE consumers SET generation = ?, {sets} "
                              "WHERE id = ? AND generation = ?",
                              [have[1] + 1, *values.values(), have[0], have[1]])
            if changed != 1:
                raise errors.ConcurrentUpdate(
                    f"consumer generation conflict - consumer {c.consumer_uuid} changed "
                    "concurrently; retry")
            out[c.consumer_uuid] = have[1] + 1
    return out


def placed_by(conn: Connection, consumers: Sequence[str], request_id: str) -> list[str]:
    """Those of `consumers` that are here as `request_id` made them (or made
    before that was recorded): a consumer released since and made again by
    another request or write is not `request_id`'s to undo."""
    if not consumers:
        return []
    raw = Raw(conn)
    try:
        mine = {str(r[0]) for r in raw.all(
            f"SELECT uuid FROM consumers WHERE uuid IN ({marks(len(consumers))}) "
            "AND (placed_by = ? OR placed_by IS NULL)", [*consumers, request_id])}
    finally:
        raw.close()
    return [c for c in consumers if c in mine]


# --- Reads -----------------------------------------------------------------

def held(conn: Connection, consumer_uuid: str) -> dict[str, dict[str, int]]:
    """What `consumer_uuid` holds, provider uuid -> class -> amount (one indexed
    read on the cursor: a release makes it in the writer's group commit)."""
    raw = Raw(conn)
    try:
        rows = raw.all(
            "SELECT rp.uuid, rc.name, a.used FROM allocations a "
            "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
            "JOIN resource_classes rc ON rc.id = a.resource_class_id "
            "WHERE a.consumer_id = ?", (consumer_uuid,))
    finally:
        raw.close()
    out: dict[str, dict[str, int]] = {}
    for rp, rc, used in rows:
        per = out.setdefault(str(rp), {})
        per[str(rc)] = per.get(str(rc), 0) + int(used)
    return out


DEFAULT_CONSUMER_TYPE = "unknown"  # Placement's name for "no consumer type recorded"


@dataclass(frozen=True, slots=True)
class ProviderShare:
    """What one consumer holds on one provider."""

    generation: int  # the provider's generation
    resources: dict[str, int]


@dataclass(frozen=True, slots=True)
class ConsumerAllocations:
    """A consumer's allocations keyed by provider uuid, with who owns them."""

    consumer_uuid: str
    allocations: dict[str, ProviderShare]
    project_id: str | None
    user_id: str | None
    generation: int | None
    consumer_type: str | None
    last_modified: datetime | None


@dataclass(frozen=True, slots=True)
class ConsumerShare:
    """What one consumer holds on the provider being listed."""

    generation: int | None  # the consumer's generation
    resources: dict[str, int]


@dataclass(frozen=True, slots=True)
class ProviderAllocations:
    allocations: dict[str, ConsumerShare]
    last_modified: datetime | None


def get_consumer_allocations(conn: Connection, consumer_uuid: str) -> ConsumerAllocations:
    """Everything `consumer_uuid` holds; empty allocations if it holds nothing."""
    a, rp, c = allocations, resource_providers, consumers
    rows = conn.execute(
        sa.select(rp.c.uuid, rp.c.generation, resource_classes.c.name, a.c.used,
                  a.c.created_at, c.c.generation.label("consumer_generation"),
                  projects.c.external_id.label("project"),
                  users.c.external_id.label("user"),
                  consumer_types.c.name.label("consumer_type"))
        .select_from(
            a.join(rp, rp.c.id == a.c.resource_provider_id)
            .join(resource_classes, resource_classes.c.id == a.c.resource_class_id)
            .outerjoin(c, c.c.uuid == a.c.consumer_id)
            .outerjoin(projects, projects.c.id == c.c.project_id)
            .outerjoin(users, users.c.id == c.c.user_id)
            .outerjoin(consumer_types, consumer_types.c.id == c.c.consumer_type_id))
        .where(a.c.consumer_id == consumer_uuid)
        .order_by(a.c.id)
    ).all()
    shares: dict[str, ProviderShare] = {}
    for r in rows:
        share = shares.setdefault(r.uuid, ProviderShare(generation=r.generation, resources={}))
        share.resources[r.name] = int(r.used)
    first = rows[0] if rows else None
    return ConsumerAllocations(
        consumer_uuid=consumer_uuid,
        allocations=shares,
        # Allocations written without a consumer record belong to Placement's
        # "incomplete consumer" project and user.
        project_id=(first.project or INCOMPLETE_CONSUMER_PROJECT) if first else None,
        user_id=(first.user or INCOMPLETE_CONSUMER_USER) if first else None,
        generation=(first.consumer_generation or 0) if first else None,
        consumer_type=(first.consumer_type or DEFAULT_CONSUMER_TYPE) if first else None,
        last_modified=max((r.created_at for r in rows if r.created_at), default=None),
    )


def spans_below(conn: Connection, consumer_uuid: str) -> bool:
    """Whether the consumer was written with allocations in a zone below too
    (consumers.spans_below): a hint, the zone below may have released them."""
    row = conn.execute(sa.select(consumers.c.spans_below)
                       .where(consumers.c.uuid == consumer_uuid)).first()
    return bool(row is not None and row.spans_below)


def get_provider_allocations(conn: Connection, provider_id: int) -> ProviderAllocations:
    """Every consumer's allocations on one provider, keyed by consumer uuid."""
    a, c = allocations, consumers
    rows = conn.execute(
        sa.select(a.c.consumer_id, resource_classes.c.name, a.c.used, a.c.created_at,
                  c.c.generation)
        .select_from(
            a.join(resource_classes, resource_classes.c.id == a.c.resource_class_id)
            .outerjoin(c, c.c.uuid == a.c.consumer_id))
        .where(a.c.resource_provider_id == provider_id)
        .order_by(a.c.id)
    ).all()
    out: dict[str, ConsumerShare] = {}
    for r in rows:
        share = out.setdefault(r.consumer_id, ConsumerShare(
            generation=r.generation if r.generation is not None else 0, resources={}))
        share.resources[r.name] = int(r.used)
    return ProviderAllocations(
        allocations=out,
        last_modified=max((r.created_at for r in rows if r.created_at), default=None))


def provider_ids_of_consumers(conn: Connection, consumer_uuids: Sequence[str]) -> set[int]:
    """Ids of the providers on which these consumers hold anything now."""
    if not consumer_uuids:
        return set()
    return set(conn.execute(
        sa.select(allocations.c.resource_provider_id).distinct()
        .where(allocations.c.consumer_id.in_(list(consumer_uuids)))).scalars())
