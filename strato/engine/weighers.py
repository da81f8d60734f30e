"""Weighers: how good a candidate is, as a number in [0, 1] (higher is better).

A weigher scores one allocation item (a provider, a class, the amount the
candidate would take from it) from the provider's capacity and its free
capacity after the allocation. The scorer combines items centrally: the
weighted mean of item scores, weighted per resource class, so that every
weigher's output is on the same scale (as Nova's weight normalisation).

* ``spread`` (default): prefer providers left with the most free room.
* ``pack``: prefer providers left with the least free room (bin packing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Weigher(Protocol):
    name: str

    def item_scores(self, free_after: FloatArray, capacity: FloatArray) -> FloatArray:
        """Raw score per item, in [0, 1]; both arrays have the same shape."""
        ...

    def item_score(self, free_after: float, capacity: float) -> float:
        """The same for one item (no numpy overhead on the enumerated path)."""
        ...


def _share(free_after: float, capacity: float) -> float:
    return min(max(free_after / capacity, 0.0), 1.0) if capacity > 0 else 0.0


def _free_share(free_after: FloatArray, capacity: FloatArray) -> FloatArray:
    share = np.zeros(np.shape(free_after), dtype=np.float64)
    np.divide(free_after, capacity, out=share, where=capacity > 0)
    np.maximum(share, 0.0, out=share)
    return np.minimum(share, 1.0, out=share)


class SpreadWeigher:
    name = "spread"

    def item_scores(self, free_after: FloatArray, capacity: FloatArray) -> FloatArray:
        return _free_share(free_after, capacity)

    def item_score(self, free_after: float, capacity: float) -> float:
        return _share(free_after, capacity)


class PackWeigher:
    name = "pack"

    def item_scores(self, free_after: FloatArray, capacity: FloatArray) -> FloatArray:
        return 1.0 - _free_share(free_after, capacity)

    def item_score(self, free_after: float, capacity: float) -> float:
        return 1.0 - _share(free_after, capacity)


WEIGHERS: dict[str, Callable[[], Weigher]] = {
    "spread": SpreadWeigher,
    "pack": PackWeigher,
}


@dataclass(frozen=True, slots=True)
class WeigherConfig:
    name: str = "spread"
    # Resource class -> multiplier of its items (default 1.0).
    class_weights: Mapping[str, float] = field(default_factory=dict)
    # Break ties randomly instead of by provider uuid.
    randomize: bool = False

    def __post_init__(self) -> None:
        if self.name not in WEIGHERS:
            raise ValueError(f"unknown weigher {self.name!r}; known: {sorted(WEIGHERS)}")
        bad = {k: v for k, v in self.class_weights.items() if v < 0}
        if bad:
            raise ValueError(f"class weights must not be negative: {bad}")


class Scorer:
    """Turns allocation items into one candidate score with the configured weigher."""

    def __init__(self, config: WeigherConfig | None = None) -> None:
        self.config = config or WeigherConfig()
        self.weigher = WEIGHERS[self.config.name]()

    def weight(self, rc: str) -> float:
        return float(self.config.class_weights.get(rc, 1.0))

    # Both sum over classes in name order, the same operations in the same
    # order: with each item's score at most its class's best, a candidate's
    # score is then at most the combined bests, exactly, not just within
    # rounding (the enumeration prunes ties on that: engine/candidates.py).

    def combine(self, columns: Mapping[str, FloatArray]) -> FloatArray:
        """Weighted mean over classes of per-class item score vectors."""
        names = sorted(columns)
        total_w = 0.0
        for rc in names:
            total_w += self.weight(rc)
        acc = columns[names[0]] * self.weight(names[0])
        for rc in names[1:]:
            acc = acc + columns[rc] * self.weight(rc)
        if total_w <= 0:
            return np.zeros_like(acc)
        result: FloatArray = acc / total_w
        return result

    def items(self, rcs: list[str], free_after: list[float], capacity: list[float]) -> float:
        """Score of one candidate given its consolidated items: their weighted
        mean, never above the best item's score (which rounding alone could
        otherwise pass by a unit in the last place)."""
        order = sorted(range(len(rcs)), key=rcs.__getitem__) if len(rcs) > 1 else range(
            len(rcs))
        num = den = 0.0
        top = 0.0
        for i in order:
            w = self.weight(rcs[i])
            score = self.weigher.item_score(free_after[i], capacity[i])
            num += w * score
            den += w
            top = max(top, score)
        return min(num / den, top) if den > 0 else 0.0
