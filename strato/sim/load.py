"""Load a scenario's hosts into a fresh zone store, in bulk.

Creating 100,000 providers through the API one call at a time takes
minutes, and the simulator measures scheduling, not registration. So the
hosts go in with a few multi-row INSERTs per table (providers, inventories,
traits, location and tags), then one `bulk_load` change tells every engine
to rebuild its index. Ids are assigned by the database, so the zone stays
usable through the API afterwards (PostgreSQL sequences stay in step).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from strato.model import names
from strato.sim.cluster import HostSpec
from strato.store import changes
from strato.store import resource_classes as rc_store
from strato.store import traits as trait_store
from strato.store.db import Database
from strato.store.migrate import upgrade
from strato.store.schema import (
    inventories,
    provider_meta,
    resource_provider_traits,
    resource_providers,
)
from strato.store.util import utcnow

BATCH = 5000


def load_hosts(db: Database, hosts: Sequence[HostSpec]) -> None:
    """Migrate, then insert `hosts` as root providers. The store must hold no provider."""
    upgrade(db)
    rp = resource_providers
    now = utcnow()
    with db.write() as conn:
        if conn.execute(sa.select(sa.func.count()).select_from(rp)).scalar_one():
            raise ValueError(f"{db.url}: the simulator needs an empty zone database")
        rc_names = sorted({rc for h in hosts for rc in h.inventory})
        for name in rc_names:
            if names.is_custom_name(name):
                rc_store.ensure_class(conn, name)
        rc_ids = rc_store.ids_by_name(conn, rc_names)
        trait_names = sorted({t for h in hosts for t in h.traits})
        for name in trait_names:
            if names.is_custom_name(name):
                trait_store.ensure_trait(conn, name)
        trait_ids = trait_store.ids_by_name(conn, trait_names)
        for lo in range(0, len(hosts), BATCH):
            part = hosts[lo: lo + BATCH]
            conn.execute(sa.insert(rp), [
                {"uuid": h.uuid, "name": h.name, "generation": 1, "root_provider_id": None,
                 "parent_provider_id": None, "created_at": now, "updated_at": now}
                for h in part])
            ids = dict(conn.execute(sa.select(rp.c.uuid, rp.c.id)
                                    .where(rp.c.uuid.in_([h.uuid for h in part]))).all())
            invs, trs, metas = [], [], []
            for h in part:
                pid = ids[h.uuid]
                for name, inv in h.inventory.items():
                    invs.append({"resource_provider_id": pid, "resource_class_id": rc_ids[name],
                                 "total": inv.total, "reserved": inv.reserved,
                                 "min_unit": inv.min_unit,
                                 "max_unit": inv.max_unit or inv.total,
                                 "step_size": inv.step_size,
                                 "allocation_ratio": inv.allocation_ratio,
                                 "created_at": now, "updated_at": now})
                trs += [{"resource_provider_id": pid, "trait_id": trait_ids[t]}
                        for t in h.traits]
                metas.append({"resource_provider_id": pid, "location": "/".join(h.location),
                              "tags": json.dumps(sorted(h.tags)), "heartbeat": False,
                              "last_report_at": None, "updated_at": now})
            conn.execute(sa.insert(inventories), invs)
            if trs:
                conn.execute(sa.insert(resource_provider_traits), trs)
            conn.execute(sa.insert(provider_meta), metas)
        conn.execute(sa.update(rp).where(rp.c.root_provider_id.is_(None))
                     .values(root_provider_id=rp.c.id))
        changes.record(conn, "bulk_load", [None])
