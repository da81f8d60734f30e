"""`CLASS=N` or `CLASS:N`: a resource class and a number, as people type them.

Every command-line flag and environment variable that takes per-class numbers
(amounts to schedule, inventory totals, reservations, allocation ratios, class
weights) reads them here, so both spellings work everywhere and a bad item is
named the same way everywhere. Several may be given in one argument, comma
separated (`VCPU=2,MEMORY_MB=4096`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

N = TypeVar("N", int, float)

SYNTAX = "CLASS=N (or CLASS:N)"
_CLASS = re.compile(r"[A-Z0-9_]{1,255}")
_SEPARATORS = re.compile(r"[=:]")


class AmountError(ValueError):
    """One item is not `CLASS=N` / `CLASS:N`; `item` is that item as typed."""

    def __init__(self, item: str, why: str) -> None:
        super().__init__(f"{item!r}: {why}")
        self.item = item
        self.why = why


def parse_amount(item: str, cast: Callable[[str], N]) -> tuple[str, N]:
    """`"vcpu=2"` or `"VCPU:2"` -> `("VCPU", 2)`; the class is upper-cased."""
    parts = _SEPARATORS.split(item, maxsplit=1)
    if len(parts) != 2:
        raise AmountError(item, f"expected {SYNTAX}, e.g. VCPU=2 or MEMORY_MB:4096")
    name, text = parts[0].strip().upper(), parts[1].strip()
    if not _CLASS.fullmatch(name):
        raise AmountError(item, "a resource class is letters, digits and _ "
                                "(CUSTOM_... for your own)")
    try:
        value = cast(text)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise AmountError(item, f"{text!r} is not {kind}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise AmountError(item, f"{text!r} is not a finite number")
    return name, value


def parse_amounts(items: Iterable[str], cast: Callable[[str], N]) -> dict[str, N]:
    """Repeated and/or comma-separated items as `{CLASS: N}`; a class given twice
    keeps its last value."""
    out: dict[str, N] = {}
    for text in items:
        for part in text.split(","):
            if part.strip():
                name, value = parse_amount(part.strip(), cast)
                out[name] = value
    return out
