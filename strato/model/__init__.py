"""Pure data shared by every part: names, inventories, capacity math, errors."""

from strato.model.errors import (
    BadRequest,
    ConcurrentUpdate,
    Conflict,
    Forbidden,
    NotFound,
    StratoError,
)
from strato.model.inventory import Inventory, amount_problem, capacity

__all__ = [
    "BadRequest",
    "ConcurrentUpdate",
    "Conflict",
    "Forbidden",
    "Inventory",
    "NotFound",
    "StratoError",
    "amount_problem",
    "capacity",
]
