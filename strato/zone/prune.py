"""Which children a request is worth asking, from their summaries and static
metadata (location prefix, tags), and in what order. Summaries are hints: a
pruned child may still fit, and is looked at again with a fresh summary
before a request is refused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from strato.model.location import location_matches, location_pattern
from strato.model.schedule import Constraint, LocationRule, ScheduleRequest, TagsRule


def _demand(req: ScheduleRequest) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in req.groups:
        for rc, n in g.resources.items():
            out[rc] = out.get(rc, 0) + n
    return out


def static_reason(req: ScheduleRequest, summary: dict[str, Any] | None,
                  prefix: str | None, zone_tags: Sequence[str]) -> str | None:
    """Why a zone's location prefix or tags exclude `req` (definite), or None."""
    for c in req.constraints:
        if c.hard and (why := rule_reason(c, summary, prefix, zone_tags)) is not None:
            return why
    return None


def rule_reason(c: Constraint, summary: dict[str, Any] | None, prefix: str | None,
                zone_tags: Sequence[str]) -> str | None:
    """Why no provider of a zone can keep location or tags rule `c` (from its
    location prefix, tags and summary: definite), or None."""
    if isinstance(c, LocationRule) and prefix and not prefix_compatible(c.pattern, prefix):
        return f"pruned: location prefix {prefix} cannot match {c.pattern}"
    if isinstance(c, TagsRule):
        present = set(zone_tags) | set((summary or {}).get("tags_present", []))
        missing = [t for t in c.required if t not in present]
        if missing and (summary is not None or zone_tags):
            return f"pruned: no provider tagged {', '.join(missing)}"
        clash = [t for t in c.forbidden if t in zone_tags]
        if clash:
            return f"pruned: zone is tagged {', '.join(clash)}"
    return None


def soft_penalty(req: ScheduleRequest, summary: dict[str, Any] | None, prefix: str | None,
                 zone_tags: Sequence[str]) -> float:
    """The weight of the soft location and tags rules no provider of a zone can
    keep: a zone that may keep them all is asked first, as one zone tries its
    perfect matches first (the zone asked then keeps what it can)."""
    return sum(c.weight for c in req.constraints
               if not c.hard and rule_reason(c, summary, prefix, zone_tags) is not None)


def prune_reason(req: ScheduleRequest, summary: dict[str, Any] | None,
                 prefix: str | None, zone_tags: Sequence[str]) -> str | None:
    """Why a zone cannot satisfy `req`, or None when it might."""
    why = static_reason(req, summary, prefix, zone_tags)
    if why is not None or summary is None:
        return why
    classes = summary.get("classes", {})
    traits = set(summary.get("traits", []))
    for g in req.groups:
        for rc, amount in g.resources.items():
            c = classes.get(rc)
            if c is None:
                return f"pruned: no {rc}"
            if int(c.get("largest_free", 0)) < amount:
                return (f"pruned: no capacity ({rc} largest free {c.get('largest_free', 0)}"
                        f" < {amount})")
        for t in g.required:
            if t.startswith("!"):
                continue
            names = t[3:].split(",") if t.startswith("in:") else [t]
            if not any(n in traits for n in names):
                return f"pruned: no {' or '.join(names)}"
    count = len(req.consumers)
    if req.atomic:
        for rc, amount in _demand(req).items():
            c = classes.get(rc, {})
            if int(c.get("capacity", 0)) - int(c.get("used", 0)) < amount * count:
                return f"pruned: not enough {rc} for {count} instance(s)"
    return None


def prefix_compatible(pattern: str, prefix: str) -> bool:
    """Could a location under `prefix` match `pattern`? (segment-wise, both ways)."""
    segments, exact = location_pattern(pattern)
    pre = tuple(prefix.strip("/").split("/"))
    n = min(len(segments), len(pre))
    head = (segments[:n], False)
    if not location_matches(head, pre[:n]):
        return False
    return not (exact and len(pre) > len(segments))


def predicted_fit(req: ScheduleRequest, summary: dict[str, Any]) -> float:
    """Higher is better: free share after the request (spread) or its opposite (pack)."""
    classes = summary.get("classes", {})
    shares = []
    count = len(req.consumers)
    for rc, amount in _demand(req).items():
        c = classes.get(rc)
        if not c or not c.get("capacity"):
            continue
        free = int(c["capacity"]) - int(c["used"]) - amount * count
        shares.append(free / int(c["capacity"]))
    if not shares:
        return 0.0
    share = sum(shares) / len(shares)
    return 1.0 - share if req.weigher.name == "pack" else share


