"""Fill a zone's database fast, straight through the store (for benchmarks only).

Creating 100,000 providers one HTTP call at a time takes minutes; benchmarks
measure the read and claim paths, so they populate in bulk and then talk to a
real server over HTTP like any client.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from strato.store import changes
from strato.store.db import Database
from strato.store.migrate import upgrade
from strato.store.resource_classes import ids_by_name
from strato.store.schema import inventories, resource_providers
from strato.store.util import utcnow


@dataclass(frozen=True)
class Populated:
    uuids: list[str]


def populate(db: Database, n: int, *, seed: int = 1, batch: int = 5000) -> Populated:
    """`n` root providers with VCPU, MEMORY_MB and DISK_GB inventories."""
    upgrade(db)
    rng = random.Random(seed)
    uuids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
    now = utcnow()
    with db.write() as conn:
        rc = ids_by_name(conn, ["VCPU", "MEMORY_MB", "DISK_GB"])
        start = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(resource_providers.c.id),
                                                            0))).scalar_one()) + 1
        for lo in range(0, n, batch):
            rows = []
            invs = []
            for i in range(lo, min(n, lo + batch)):
                pid = start + i
                rows.append({"id": pid, "uuid": uuids[i], "name": f"bench-{uuids[i][:13]}-{i}",
                             "generation": 1, "root_provider_id": pid,
                             "parent_provider_id": None, "created_at": now, "updated_at": now})
                for name, total, ratio in (("VCPU", rng.choice([32, 64]), 4.0),
                                           ("MEMORY_MB", rng.choice([131072, 262144]), 1.0),
                                           ("DISK_GB", rng.choice([2000, 4000]), 1.0)):
                    invs.append({"resource_provider_id": pid, "resource_class_id": rc[name],
                                 "total": total, "reserved": 0, "min_unit": 1,
                                 "max_unit": total, "step_size": 1, "allocation_ratio": ratio,
                                 "created_at": now, "updated_at": now})
            conn.execute(sa.insert(resource_providers), rows)
            conn.execute(sa.insert(inventories), invs)
        changes.record(conn, "bulk_load", [None])
    return Populated(uuids)
