"""Provider aggregates: which aggregate uuids a provider belongs to.

Aggregates have no life of their own in Placement: a row in
``placement_aggregates`` is created the first time a uuid is used and is
never validated against anything else.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.store import changes, providers
from strato.store.db import lock_providers
from strato.store.providers import Provider
from strato.store.schema import placement_aggregates, resource_provider_aggregates
from strato.store.util import insert_ignore, slices

agg = placement_aggregates
rpa = resource_provider_aggregates
CHANGE_KIND = "aggregates"


def get_aggregates(conn: Connection, provider: Provider) -> list[str]:
    """The aggregate uuids of a provider, in the order they were first seen."""
    return list(conn.execute(
        sa.select(agg.c.uuid).join(rpa, rpa.c.aggregate_id == agg.c.id)
        .where(rpa.c.resource_provider_id == provider.id)
        .order_by(agg.c.id)).scalars())


def _ensure_ids(conn: Connection, uuids: set[str]) -> dict[str, int]:
    """uuid -> aggregate id, creating the aggregates never seen before (race-safe)."""
    if not uuids:
        return {}

    def lookup(wanted: Sequence[str]) -> dict[str, int]:
        return {u: int(i) for part in slices(wanted) for u, i in conn.execute(
            sa.select(agg.c.uuid, agg.c.id).where(agg.c.uuid.in_(part)))}
    found = lookup(sorted(uuids))
    missing = sorted(uuids - found.keys())
    if missing:
        insert_ignore(conn, agg, [{"uuid": u} for u in missing])
        found |= lookup(missing)
    return found


def set_aggregates(conn: Connection, provider: Provider, uuids: Sequence[str], *,
                   generation: int | None) -> int:
    """Make `uuids` the provider's whole aggregate set; returns its generation after.

    With `generation` (microversion 1.19 and later) the provider generation is
    checked (409 placement.concurrent_update) and bumped; without it (older
    microversions) neither, as in Placement. A change is recorded either way.
    """
    lock_providers(conn, [provider.id])
    current = providers.get_provider(conn, provider.uuid)
    if generation is not None:
        providers.check_generation(current, generation)
    wanted = _ensure_ids(conn, set(uuids))
    have = set(conn.execute(sa.select(rpa.c.aggregate_id)
                            .where(rpa.c.resource_provider_id == current.id)).scalars())
    want_ids = set(wanted.values())
    gone = have - want_ids
    for part in slices(sorted(gone)):
        conn.execute(sa.delete(rpa).where(rpa.c.resource_provider_id == current.id,
                                          rpa.c.aggregate_id.in_(part)))
    new = sorted(want_ids - have)
    if new:
        conn.execute(sa.insert(rpa), [{"resource_provider_id": current.id, "aggregate_id": i}
                                      for i in new])
    gen = current.generation
    if generation is not None:
        gen = providers.bump_generation(conn, current)
    changes.record(conn, CHANGE_KIND, [current.uuid])
    return gen
