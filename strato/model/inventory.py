"""Inventory records and the capacity arithmetic every layer shares."""

from __future__ import annotations

from dataclasses import dataclass

# Placement's bounds for integer fields.
MAX_INT = 2**31 - 1
MAX_FLOAT = 3.40282e38


@dataclass(frozen=True, slots=True)
class Inventory:
    resource_class: str
    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = MAX_INT
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        return capacity(self.total, self.reserved, self.allocation_ratio)


def capacity(total: int, reserved: int, allocation_ratio: float) -> int:
    """What may be allocated in all: (total - reserved) * allocation_ratio, rounded down."""
    return int((total - reserved) * allocation_ratio)


def amount_problem(inv: Inventory, amount: int) -> str | None:
    """Why `amount` can never be one allocation against `inv`, or None if it can."""
    if amount < inv.min_unit:
        return f"amount {amount} is below min_unit {inv.min_unit}"
    if amount > inv.max_unit:
        return f"amount {amount} is above max_unit {inv.max_unit}"
    if amount % inv.step_size != 0:
        return f"amount {amount} is not a multiple of step_size {inv.step_size}"
    return None
