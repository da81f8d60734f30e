"""What each child zone could not fit, remembered until room grows there.

A summary says, per class, the most one host of a child could take; it cannot
say whether one host has all of it at once. In a packed child (free VCPU on
some hosts, free memory on others) every class passes the test, the child is
asked, and it answers "no valid placement", request after request of the same
shape. So a parent remembers each such answer with the child's `freed` token
(a summary field that moves on every release, inventory change or change of
stale hosts) and does not ask again while the token stays put: claims only
take room away, so what did not fit still does not.

A request *dominates* a remembered failure when it asks at least as much of
every class, of the same kinds of providers (traits, aggregates, trees), with
the same static rules (location, tags), for at least as many instances. Rules
that depend on a group's members (affinity, anti-affinity, spread) change with
other requests, so those requests are not remembered, soft ones too: a child
that routes keeps such a rule above its own children by how it divides the
request, so its refusal says what that division found, not only how much room
there is. Soft static rules do not matter: a refusal comes only after all of
them were dropped.

Like summaries, this is a hint: a remembered failure only ever prunes, and a
parent that finds nothing else widens to the pruned children with fresh
summaries, whose new token lifts the block once anything was freed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from strato.model.schedule import ScheduleRequest, SpreadRuleSpec

# Remembered failures per child; the oldest are forgotten first.
PER_CHILD = 32


@dataclass(frozen=True, slots=True)
class Shape:
    """A request without its amounts (the part that must match exactly)."""

    key: tuple[Any, ...]
    amounts: tuple[int, ...]  # per class, in the order of the key's class list
    count: int


def shape_of(req: ScheduleRequest) -> Shape | None:
    """The request's shape, or None if it cannot be remembered (spread rules)."""
    if any(isinstance(c, SpreadRuleSpec) for c in req.constraints):
        return None
    groups = []
    amounts: list[int] = []
    for suffix, g in req.suffixed_groups():
        classes = tuple(sorted(g.resources))
        amounts += [g.resources[rc] for rc in classes]
        groups.append((suffix, classes, tuple(sorted(g.required)),
                       tuple(tuple(sorted(m)) for m in g.member_of), g.in_tree))
    rules = tuple(sorted(repr(c) for c in req.constraints if c.hard))
    key = (tuple(groups), req.group_policy, rules)
    # A non-atomic request fails only when not even one instance fits.
    return Shape(key=key, amounts=tuple(amounts), count=len(req.consumers) if req.atomic else 1)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A remembered "no valid placement": the child's words and explain."""

    reason: str
    explain: dict[str, Any] | None


class FailureMemory:
    def __init__(self, per_child: int = PER_CHILD) -> None:
        self.per_child = per_child
        # child -> (freed token, failures seen at that token)
        self._seen: dict[str, tuple[int, OrderedDict[Shape, Refusal]]] = {}

    def note(self, child: str, shape: Shape | None, freed: int | None,
             refusal: Refusal) -> None:
        """`child` refused a request of `shape` (`shape_of`) while its summary
        said `freed`."""
        if shape is None or freed is None:
            return
        token, seen = self._seen.get(child, (freed, OrderedDict()))
        if token != freed:
            seen = OrderedDict()
        seen[shape] = refusal
        seen.move_to_end(shape)
        while len(seen) > self.per_child:
            seen.popitem(last=False)
        self._seen[child] = (freed, seen)

    def blocks(self, child: str, shape: Shape | None, freed: int | None) -> Refusal | None:
        """The refusal `child` gave to as much as a request of `shape` asks, if
        nothing was freed there since; None when it may fit."""
        found = self._seen.get(child)
        if found is None or freed is None or found[0] != freed or shape is None:
            return None
        for s, refusal in found[1].items():
            if (s.key == shape.key and s.count <= shape.count
                    and all(a <= b for a, b in zip(s.amounts, shape.amounts, strict=True))):
                return refusal
        return None

    def forget(self, child: str) -> None:
        self._seen.pop(child, None)
