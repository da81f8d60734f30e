"""What a zone's own database holds (a routing zone's Placement API answers for
its whole subtree, so tests that ask where a consumer lives read the store)."""

from __future__ import annotations

from typing import Any

from strato.store import allocations as store
from strato.zone.inprocess import InProcessTree


def own_allocations(tree: InProcessTree, zone: str, consumer: str) -> dict[str, Any]:
    """provider uuid -> {"resources": ...} of `consumer` in `zone`'s own store."""
    with tree.dbs[zone].read() as conn:
        found = store.get_consumer_allocations(conn, consumer)
    return {rp: {"resources": dict(share.resources), "generation": share.generation}
            for rp, share in found.allocations.items()}
