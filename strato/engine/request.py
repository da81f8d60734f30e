"""An allocation candidates request: request groups and request-wide rules.

These are names (resource classes, traits, aggregate and provider uuids),
already validated by the API layer. The candidate builder works on them
together with an index snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class GroupPolicy(StrEnum):
    NONE = "none"
    ISOLATE = "isolate"


@dataclass(frozen=True, slots=True)
class RequestGroup:
    """One request group: `resources{S}`, `required{S}`, `member_of{S}`, `in_tree{S}`.

    The unsuffixed group (suffix "") may be spread over several providers of
    one tree plus sharing providers; a suffixed (granular) group is satisfied
    by exactly one provider.
    """

    suffix: str = ""
    resources: tuple[tuple[str, int], ...] = ()
    # All of these any-of sets must be satisfied.
    required: tuple[tuple[str, ...], ...] = ()
    forbidden: tuple[str, ...] = ()
    # All of these any-of sets of aggregate uuids must be satisfied.
    member_of: tuple[tuple[str, ...], ...] = ()
    forbidden_aggs: tuple[str, ...] = ()
    in_tree: str | None = None

    @property
    def granular(self) -> bool:
        return self.suffix != ""

    @property
    def resource_classes(self) -> tuple[str, ...]:
        return tuple(rc for rc, _ in self.resources)


@dataclass(frozen=True, slots=True)
class CandidateRequest:
    groups: tuple[RequestGroup, ...]
    group_policy: GroupPolicy = GroupPolicy.NONE
    limit: int | None = None
    # Traits the root of every candidate's anchor tree must have / not have.
    root_required: tuple[tuple[str, ...], ...] = ()
    root_forbidden: tuple[str, ...] = ()
    # Each entry: suffixes whose providers must share one subtree.
    same_subtree: tuple[tuple[str, ...], ...] = ()
    # Before microversion 1.29 a candidate may use only one provider per tree.
    nested_aware: bool = True
    # With a limit: a tree whose best possible score only ties the k-th best
    # is not explored (the scheduler wants good options; Placement's answer
    # orders ties by provider uuid, so the API keeps exploring them).
    skip_ties: bool = False

    def group(self, suffix: str) -> RequestGroup:
        for g in self.groups:
            if g.suffix == suffix:
                return g
        raise KeyError(suffix)

    @property
    def granular_count(self) -> int:
        return sum(1 for g in self.groups if g.granular)
