"""What the engine indexes about one provider: the loaded, plain-data form.

The loader reads these from the store; tests and the reference implementation
build them directly. The index never sees a database row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strato.model.inventory import MAX_INT, capacity


@dataclass(frozen=True, slots=True)
class InventoryRecord:
    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = MAX_INT
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        return capacity(self.total, self.reserved, self.allocation_ratio)


@dataclass(frozen=True, slots=True)
class ProviderRecord:
    uuid: str
    # None for a root provider.
    parent_uuid: str | None = None
    # The provider's own uuid for a root provider.
    root_uuid: str = ""
    inventories: Mapping[str, InventoryRecord] = field(default_factory=dict)
    # Sum of allocations per resource class.
    used: Mapping[str, int] = field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()

    @property
    def root(self) -> str:
        return self.root_uuid or self.uuid
