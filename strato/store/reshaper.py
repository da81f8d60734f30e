"""The reshaper: move inventory and the allocations on it, in one transaction.

Typical use: a host's VCPU inventory moves from the root provider to new
NUMA child providers, and every consumer's VCPU allocation moves with it.
Neither half can be done alone: inventory with allocations on it cannot be
removed, and allocations cannot be made against inventory that is not there
yet. So, inside the caller's write transaction (as Placement does):

1. every named provider gets an *interim* inventory: its current inventory
   with the new records laid over it (nothing is removed yet);
2. every consumer's allocations are replaced through `allocations.claim`,
   checked against that interim inventory;
3. every named provider gets its *final* inventory, which may now drop the
   classes whose allocations moved away (still in use: 409).

Any failure raises; the caller's transaction then rolls back and nothing has
changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from strato.model import errors
from strato.model.inventory import Inventory
from strato.store import allocations, inventories, providers
from strato.store.db import lock_providers


@dataclass(frozen=True, slots=True)
class ProviderInventories:
    """The complete new inventory of one provider, and the generation the writer read."""

    generation: int
    inventories: Mapping[str, Inventory]


@dataclass(frozen=True, slots=True)
class ReshapeResult:
    claim: allocations.ClaimResult | None
    provider_generations: dict[str, int]


def reshape(
    conn: Connection,
    new_inventories: Mapping[str, ProviderInventories],
    claims: Sequence[allocations.ConsumerClaim],
) -> ReshapeResult:
    """Replace the inventories of the named providers and the consumers' allocations."""
    _lock_everything(conn, _providers(conn, new_inventories), claims)
    # Read again under the locks: only now are the generations stable.
    named = _providers(conn, new_inventories)
    for uuid, want in new_inventories.items():
        providers.check_generation(named[uuid], want.generation)

    for uuid, want in new_inventories.items():
        # An empty inventory would lay nothing over the current one.
        if not want.inventories:
            continue
        current = providers.get_provider(conn, uuid)
        interim = {**inventories.get_inventories(conn, current), **want.inventories}
        inventories.replace_inventories(conn, current, interim, current.generation)

    result = allocations.claim(conn, claims) if claims else None

    gens: dict[str, int] = {}
    for uuid, want in new_inventories.items():
        current = providers.get_provider(conn, uuid)
        gens[uuid] = inventories.replace_inventories(
            conn, current, want.inventories, current.generation)
    return ReshapeResult(claim=result, provider_generations=gens)


def _providers(conn: Connection, new_inventories: Mapping[str, ProviderInventories]
               ) -> dict[str, providers.Provider]:
    named = providers.providers_by_uuid(conn, list(new_inventories))
    for uuid in new_inventories:
        if uuid not in named:
            raise errors.BadRequest(
                f"Resource provider {uuid} in inventories not found",
                errors.RESOURCE_PROVIDER_NOT_FOUND)
    return named


def _lock_everything(conn: Connection, named: Mapping[str, providers.Provider],
                     claims: Sequence[allocations.ConsumerClaim]) -> None:
    """Lock every provider the reshape may touch, once, in id order.

    `claim` and `replace_inventories` lock again what they touch; taking the
    whole set first means no lock is ever taken out of order (no deadlock).
    """
    alloc_uuids = {u for c in claims for u in c.allocations}
    alloc_ids = {p.id for p in providers.providers_by_uuid(conn, sorted(alloc_uuids)).values()}
    old_ids = allocations.provider_ids_of_consumers(conn, [c.consumer_uuid for c in claims])
    lock_providers(conn, sorted({p.id for p in named.values()} | alloc_ids | old_ids))
