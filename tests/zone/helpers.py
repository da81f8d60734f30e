"""What a zone's own database holds (a routing zone's Placement API answers for
its whole subtree, so tests that ask where a consumer lives read the store)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strato.store import allocations as store
from strato.zone.inprocess import InProcessTree


def own_allocations(tree: InProcessTree, zone: str, consumer: str) -> dict[str, Any]:
    """provider uuid -> {"resources": ...} of `consumer` in `zone`'s own store."""
    with tree.dbs[zone].read() as conn:
        found = store.get_consumer_allocations(conn, consumer)
    return {rp: {"resources": dict(share.resources), "generation": share.generation}
            for rp, share in found.allocations.items()}


def record_calls(tree: InProcessTree, wanted: Callable[[str, str], bool]) -> list[str]:
    """From now on, the URL of every call between zones whose (method, path)
    is `wanted`, in order (the list returned fills as they are made)."""
    seen: list[str] = []
    real = tree.transport.call

    async def counted(url: str, method: str, path: str, **kw: Any) -> Any:
        if wanted(method, path):
            seen.append(url)
        return await real(url, method, path, **kw)
    tree.transport.call = counted  # type: ignore[method-assign]
    return seen
