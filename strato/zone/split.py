"""One schedule request divided among several child zones.

A routing zone first hands a request whole to its most promising child
(``ZoneTree._delegate``). A request for several instances is divided when no
child can take it whole, or at once when an anti-affinity rule reaches above
a child: its level is one at which every child lies in a single domain (the
site of a child whose location prefix is ``dfw``, or the level ``zone``, where
each child zone is its own domain), so no one child may take two instances.

1. **Plan.** The children that could take one instance (static metadata,
   summary, health) are asked, in parallel, for a dry run of the whole
   request with ``atomic: false``: how many instances each could take.
2. **Assign.** Each child gets a share, the biggest first, with no domain
   over its cap: one instance per domain for anti-affinity, one domain for
   affinity (the one with the most room). A soft rule that leaves instances
   out is relaxed (reported in ``relaxed``), a hard one is not.
3. **Claim.** Each share is asked of its child under a part id recorded in
   the request ledger first. A request that is ``atomic`` and divided over
   two or more children is a gang: every share is *held* (``hold_ttl``), and
   confirmed only once all are held. A share refused, a hold expired, a
   child that does not answer: every part of the attempt is cancelled by its
   part id, and the request is refused (or 503 if part of the tree could not
   be asked). A crash of this zone leaves holds that expire by themselves, or
   (mid-confirm) parts that recovery cancels when the request's deadline
   passes. ``atomic: false`` places what fits and lists the rest in
   ``unplaced``.
4. **Answer.** The placements of every share, with zone paths from here.

This zone's own providers take a share too (named OWN, asked first), and
under rules above the children only when all of them lie in one domain of
each rule's level (``takes_part``): then they are one more domain, as a child.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from strato.model.schedule import (
    DEFAULT_LEVELS,
    Constraint,
    LocationRule,
    ScheduleRequest,
    SpreadRuleSpec,
    TagsRule,
)
from strato.store.children import Child
from strato.zone import shared
from strato.zone.attempt import Attempt, Health, Outcome, Result
from strato.zone.prune import predicted_fit, prune_reason
from strato.zone.scheduler import NoValidPlacement

# The name of this zone's own providers when they take a share (zone/tree.py's LOCAL).
OWN = ""
# The level at which each child zone is its own domain.
ZONE_LEVEL = "zone"
# How explain names what the division itself found (not any one zone).
DIVIDED = "(divided among children)"
# Of the time left, what the plan's dry runs may use (the claim and the
# confirmations need the rest).
PLAN_SHARE = 0.4
CLAIM_SHARE = 0.6


class Splitter(shared.Caller, Protocol):
    """What a split needs of the zone tree (zone/tree.py's ZoneTree)."""

    @property
    def cache(self) -> Mapping[str, Any]: ...

    def health_of(self, name: str) -> Health: ...

    async def ask(self, child: Child, req: ScheduleRequest, attempt: Attempt | None,
                  share: float = 1.0) -> dict[str, Any] | Outcome: ...

    def prefixed(self, answer: dict[str, Any], child: str) -> dict[str, Any]: ...

    async def reserve(self, attempt: Attempt) -> None: ...

    async def undo(self, request_id: str, *, placed: bool,
                   attempt: str | None = None) -> Any: ...

    async def refresh(self, kids: Sequence[Child] | None = None, *, fresh: bool = False,
                      wait: float | None = None) -> None: ...

    async def confirm_here(self, consumers: Sequence[str]) -> bool: ...


def domain(child: Child, level: str, levels: Sequence[str] = DEFAULT_LEVELS) -> str | None:
    """The one domain at `level` that all of `child` lies in, or None when it may
    span several (its location prefix does not reach that deep)."""
    if level == ZONE_LEVEL:
        return child.name
    if level not in levels or not child.location_prefix:
        return None
    segs = child.location_prefix.strip("/").split("/")
    depth = list(levels).index(level) + 1
    return "/".join(segs[:depth]) if len(segs) >= depth else None


def wide_rules(req: ScheduleRequest, kids: Sequence[Child]
               ) -> list[tuple[int, SpreadRuleSpec]]:
    """The request's spread rules at a level where every child is one domain."""
    if not kids:
        return []
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec)
            and all(domain(k, c.level) is not None for k in kids)]


def kept_together(req: ScheduleRequest, kids: Sequence[Child]
                  ) -> list[tuple[int, SpreadRuleSpec]]:
    """The affinity rules that keep the request's own instances in one domain
    (they join the rule's group) at a level no child is one domain of: a child
    keeps one only within its share, so shares in two zones (two children, or
    a child and this zone's own providers) would break it."""
    wide = {i for i, _ in wide_rules(req, kids)}
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec) and c.type == "affinity" and i not in wide
            and req.group is not None and (c.group or req.group) == req.group]


def relax_together(req: ScheduleRequest, kids: Sequence[Child], answer: dict[str, Any]
                   ) -> dict[str, Any]:
    """`answer` placed in several zones: the soft rules of kept_together are
    reported in `relaxed` (a hard one never gets here)."""
    seen = {r.get("index") for r in answer.get("relaxed", [])}
    more = [_relaxed(i, r, req) for i, r in kept_together(req, kids)
            if not r.hard and i not in seen]
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def must_split(req: ScheduleRequest, kids: Sequence[Child]) -> bool:
    """An anti-affinity rule above the children that the request's instances
    are subject to (they join its group), or a spread: no child may take two
    instances (a soft one: should not), so the request is divided from the
    start. Anti-affinity to another group only keeps them from where that
    group's members are."""
    if len(req.consumers) < 2:
        return False
    causes = [r for _, r in wide_rules(req, kids)
              if r.type == "spread" or (r.type == "anti_affinity" and joins(req, r))]
    if causes and all(not r.hard for r in causes) and any(
            r.hard for _, r in kept_together(req, kids)):
        # A hard affinity below the children keeps the request in one zone:
        # it wins over soft rules that would divide it (`relax_undivided`).
        return False
    return bool(causes)


def relax_undivided(req: ScheduleRequest, kids: Sequence[Child], answer: dict[str, Any]
                    ) -> dict[str, Any]:
    """`answer`, placed in one child though soft rules above the children would
    divide it (`must_split`), with those it breaks there in `relaxed`: an
    anti-affinity among its instances, a spread whose skew or cap one domain
    exceeds."""
    n = len(answer.get("placements", []))
    seen = {x.get("index") for x in answer.get("relaxed", [])}
    more = []
    for i, r in wide_rules(req, kids):
        if r.hard or i in seen or n < 2:
            continue
        if (r.type == "anti_affinity" and joins(req, r)) or (r.type == "spread" and (
                n > r.max_skew or (r.max_per_domain is not None and n > r.max_per_domain))):
            more.append(_relaxed(i, r, req))
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def for_child(req: ScheduleRequest) -> ScheduleRequest:
    """`req` without the rules a child cannot check: those at level `zone` (a
    child is one zone; the zone that divides the request keeps them)."""
    keep = [c for c in req.constraints
            if not (isinstance(c, SpreadRuleSpec) and c.level == ZONE_LEVEL)]
    if len(keep) == len(req.constraints):
        return req
    return req.model_copy(update={"constraints": keep})


def in_one_zone(req: ScheduleRequest) -> tuple[ScheduleRequest, list[dict[str, Any]]]:
    """At a zone without children, rules at level `zone` are about this zone
    alone: affinity holds, anti-affinity holds for one instance. (the request
    without them, the soft ones relaxed); raises NoValidPlacement for a hard
    anti-affinity rule over several instances."""
    relaxed = []
    for i, c in enumerate(req.constraints):
        if (isinstance(c, SpreadRuleSpec) and c.level == ZONE_LEVEL and c.type == "spread"
                and c.max_per_domain is not None and len(req.consumers) > c.max_per_domain):
            if c.hard:
                raise NoValidPlacement(
                    f"no valid placement for {len(req.consumers)} consumer(s): spread at "
                    f"level zone allows {c.max_per_domain} per zone, and this zone has no "
                    "child zones", {"summary": "spread at level zone: max_per_domain"})
            relaxed.append(_relaxed(i, c, req))
        if (isinstance(c, SpreadRuleSpec) and c.level == ZONE_LEVEL
                and c.type == "anti_affinity" and len(req.consumers) > 1 and joins(req, c)):
            if c.hard:
                raise NoValidPlacement(
                    f"no valid placement for {len(req.consumers)} consumer(s): hard "
                    "anti_affinity at level zone allows one instance per zone, and this "
                    "zone has no child zones",
                    {"summary": "anti_affinity at level zone: one instance per zone"})
            relaxed.append(_relaxed(i, c, req))
    return for_child(req), relaxed


# -- server groups across zones ---------------------------------------------------------

# Members per wide rule (its index in the request) and domain at its level.
Occupancy = dict[int, Counter[str]]


def rule_groups(req: ScheduleRequest, wide: Sequence[tuple[int, SpreadRuleSpec]]
                ) -> list[str]:
    return sorted({g for _, r in wide if (g := r.group or req.group) is not None})


def member_domain(member: Mapping[str, Any], level: str, kids: Mapping[str, Child],
                  levels: Sequence[str] = DEFAULT_LEVELS) -> str | None:
    """The domain at `level` of a member (zone path from the zone that asked)."""
    segs = str(member.get("zone", "")).split("/")
    below = kids.get(segs[1]) if len(segs) > 1 else None
    if level == ZONE_LEVEL:
        # On this zone's own providers: their share's domain (see `domain`).
        return segs[1] if len(segs) > 1 else OWN
    if level in levels and member.get("location"):
        loc = str(member["location"]).strip("/").split("/")
        depth = list(levels).index(level) + 1
        if len(loc) >= depth:
            return "/".join(loc[:depth])
    return domain(below, level) if below is not None else None


def occupancy(req: ScheduleRequest, kids: Sequence[Child],
              wide: Sequence[tuple[int, SpreadRuleSpec]],
              found: Mapping[str, Mapping[str, Any]]) -> tuple[Occupancy, set[str]]:
    """(members per wide rule and domain, children whose members are unknown)."""
    by_name = {k.name: k for k in kids}
    mine = set(req.consumers)
    occ: Occupancy = {}
    unknown: set[str] = set()
    for i, r in wide:
        g = r.group or req.group
        answer = found.get(g or "")
        counts: Counter[str] = Counter()
        if answer is not None:
            for m in answer["members"]:
                if m["consumer"] in mine:
                    continue  # a retry of this request: not another member
                d = member_domain(m, r.level, by_name)
                if d is not None:
                    counts[d] += 1
            unknown |= {u.split("/")[0] for u in answer["unreachable"]}
        occ[i] = counts
    return occ, unknown


def add_placements(occ: Occupancy, req: ScheduleRequest, kids: Sequence[Child],
                   wide: Sequence[tuple[int, SpreadRuleSpec]],
                   placements: Sequence[Mapping[str, Any]]) -> None:
    """Members this request just placed (atomic=false: before placing the rest)."""
    by_name = {k.name: k for k in kids}
    for i, r in wide:
        for p in placements:
            d = member_domain(p, r.level, by_name)
            if d is not None:
                occ.setdefault(i, Counter())[d] += 1


def scattered(req: ScheduleRequest, i: int, rule: SpreadRuleSpec, occ: Occupancy | None
              ) -> list[str]:
    """The domains of an affinity rule's group when the request joins that group
    and its members are already in more than one (every member in one domain
    cannot hold, wherever the new ones go); else []."""
    if rule.type != "affinity" or not req.group or (rule.group or req.group) != req.group:
        return []
    found = sorted(d for d, c in (occ or {}).get(i, Counter()).items() if c > 0)
    return found if len(found) > 1 else []


def relax_scattered(req: ScheduleRequest, wide: Sequence[tuple[int, SpreadRuleSpec]],
                    occ: Occupancy | None, answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` with the soft affinity rules whose group is already scattered
    in `relaxed` (a child, seeing only its own members, may not say so)."""
    seen = {x.get("index") for x in answer.get("relaxed", [])}
    more = [_relaxed(i, r, req) for i, r in wide
            if not r.hard and i not in seen and scattered(req, i, r, occ)]
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def soft_misses(req: ScheduleRequest, child: Child, kids: Sequence[Child],
                wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy
                ) -> list[tuple[int, SpreadRuleSpec]]:
    """The soft rules above the children that one more instance in `child`
    would break, given where the groups' members are (`kids`: the children
    it is chosen among, for a spread's emptiest domain)."""
    out = []
    for i, r in wide:
        if r.hard:
            continue
        d = domain(child, r.level) or child.name
        counts = occ.get(i, Counter())
        if r.type == "anti_affinity":
            missed = counts[d] > 0
        elif r.type == "spread":
            low = min((counts[domain(k, r.level) or k.name] for k in kids), default=0)
            missed = (r.max_per_domain is not None and counts[d] >= r.max_per_domain) or \
                counts[d] + 1 - low > r.max_skew
        else:  # affinity: where the members are, once there are any
            missed = sum(counts.values()) > 0 and counts[d] == 0
        if missed:
            out.append((i, r))
    return out


def steering(req: ScheduleRequest, wide: Sequence[tuple[int, SpreadRuleSpec]]
             ) -> list[tuple[int, SpreadRuleSpec]]:
    """The rules above the children that a request placed whole in one child
    keeps or breaks there as one instance does: every rule for one instance;
    for several, those about where the members are (an affinity, an
    anti-affinity to another group), since the others divide it
    (`must_split`)."""
    if len(req.consumers) == 1:
        return list(wide)
    return [(i, r) for i, r in wide
            if r.type == "affinity" or (r.type == "anti_affinity" and not joins(req, r))]


def penalties(req: ScheduleRequest, kids: Sequence[Child],
              wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy
              ) -> dict[str, float] | None:
    """Each child's weight of the soft rules above the children that the
    request placed there would break (asked in that order: those that break
    none first); None when every child keeps them all. (A request for
    several instances that no child takes whole is divided: `assign`.)"""
    rules = steering(req, wide)
    out = {k.name: sum(r.weight for _, r in soft_misses(req, k, kids, rules, occ))
           for k in kids}
    return out if any(out.values()) else None


def relax_missed(req: ScheduleRequest, kids: Sequence[Child],
                 wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy,
                 answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` with the soft rules above the children that a child it was
    placed in breaks (`steering`) in `relaxed`: none that kept them had room."""
    by_name = {k.name: k for k in kids}
    wide = steering(req, wide)
    seen = {x.get("index") for x in answer.get("relaxed", [])}
    more: list[dict[str, Any]] = []
    for p in answer.get("placements", []):
        segs = str(p.get("zone", "")).split("/")
        child = by_name.get(segs[1] if len(segs) > 1 else OWN)
        if child is None:
            continue
        for i, r in soft_misses(req, child, kids, wide, occ):
            if i not in seen:
                seen.add(i)
                more.append(_relaxed(i, r, req))
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def allowed(req: ScheduleRequest, kids: Sequence[Child],
            wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy, unknown: set[str],
            outcomes: list[Outcome], every: Sequence[Child] | None = None) -> list[Child]:
    """The children where the request's hard rules still allow a member, given
    where its groups' members already are (`unknown`: the children of `every`,
    by default `kids`, that could not say)."""
    among = kids if every is None else every
    out = []
    for k in kids:
        why = None
        for i, r in wide:
            if not r.hard:
                continue
            d = domain(k, r.level) or k.name
            g = r.group or req.group
            if r.type == "spread":
                if r.max_per_domain is not None and \
                        occ.get(i, Counter())[d] >= r.max_per_domain:
                    why = (Result.PRUNED, f"group {g} already has {r.max_per_domain} "
                           f"member(s) in {r.level} {d} (spread, max_per_domain)")
            elif r.type == "anti_affinity":
                if occ.get(i, Counter())[d] > 0:
                    why = (Result.PRUNED, f"group {g} already has a member in {r.level} {d} "
                           "(hard anti_affinity)")
                elif any(domain(u, r.level) == d for u in among if u.name in unknown):
                    why = (Result.UNAVAILABLE, f"group {g}: the members in {r.level} {d} "
                           "could not be read (a zone did not answer)")
            elif (apart := scattered(req, i, r, occ)):
                why = (Result.PRUNED, f"affinity {g}@{r.level}: members already in "
                       f"{len(apart)} {r.level}s ({', '.join(apart)}), so not every member "
                       f"can share one (hard affinity)")
            elif occ.get(i) and d not in occ[i]:
                why = (Result.PRUNED, f"group {g} has its members in {r.level} "
                       f"{', '.join(sorted(occ[i]))} (hard affinity)")
            elif not occ.get(i) and (away := sorted(
                    u.name for u in among if u.name in unknown
                    and (domain(u, r.level) or u.name) != d)):
                # None known: the members may be where no zone could say.
                why = (Result.UNAVAILABLE, f"group {g}: its members in {', '.join(away)} "
                       "could not be read (a zone did not answer; hard affinity)")
            if why is not None:
                break
        if why is None:
            out.append(k)
        else:
            outcomes.append(Outcome(k.name, why[0], why[1]))
    return out


def takes_part(own: Child, wide: Sequence[tuple[int, SpreadRuleSpec]]) -> bool:
    """This zone's own providers (`own`, located where all its hosts are) are
    one domain of every rule above the children, as each child is: they take
    part in keeping them (a share of a divided request, a domain whose
    members count). Hosts in several rooms are not one domain of a room rule:
    they are left out of a request that such a rule divides."""
    return all(domain(own, r.level) is not None for _, r in wide)


def own_excluded(req: ScheduleRequest, wide: Sequence[tuple[int, SpreadRuleSpec]],
                 occ: Occupancy, found: Mapping[str, Mapping[str, Any]],
                 unknown: Collection[str] = ()) -> str | None:
    """Why this zone's own providers may not take the request under a hard
    affinity rule above the children, or None: their planner sees only the
    members on them, so members below a child, or in several domains, would
    not count there."""
    mine = set(req.consumers)
    for i, r in wide:
        g = r.group or req.group
        if r.hard and r.level == ZONE_LEVEL and r.type != "affinity":
            # This zone's own providers are one zone (OWN) of the rule.
            most = 1 if r.type == "anti_affinity" else r.max_per_domain
            if most is not None and occ.get(i, Counter())[OWN] >= most:
                return (f"group {g} already has {most} member(s) in this zone's own "
                        f"providers ({r.type} at level zone)")
        if not r.hard or r.type != "affinity":
            continue
        if not occ.get(i) and unknown:
            return (f"group {g}: its members in {', '.join(sorted(unknown))} could not be "
                    "read (a zone did not answer; hard affinity)")
        if (apart := scattered(req, i, r, occ)):
            return (f"affinity {g}@{r.level}: members already in {len(apart)} "
                    f"{r.level}s ({', '.join(apart)}) (hard affinity)")
        below = sorted(d for d, c in occ.get(i, Counter()).items() if c > 0) if any(
            "/" in str(m.get("zone", "")) and m["consumer"] not in mine
            for m in (found.get(g or "") or {}).get("members", [])) else []
        if below:
            return (f"group {g} has its members in {r.level} {', '.join(below)} "
                    "below a child zone (hard affinity)")
    return None


def deep_affinity(req: ScheduleRequest, kids: Sequence[Child]
                  ) -> list[tuple[int, SpreadRuleSpec]]:
    """The affinity rules at a level below the children (a room, when each
    child is a site): a child keeps one only with the members it holds
    itself, so this zone sends the request where the group's members are."""
    wide = {i for i, _ in wide_rules(req, kids)}
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec) and c.type == "affinity" and i not in wide]


def kept_apart(req: ScheduleRequest, kids: Sequence[Child]
               ) -> list[tuple[int, SpreadRuleSpec]]:
    """The soft anti-affinity rules below the children that keep the request's
    own instances apart (they join the rule's group): a child keeps one only
    within its share, and relaxes it when its share does not fit apart, where
    another division would have kept it."""
    if len(req.consumers) < 2:
        return []
    wide = {i for i, _ in wide_rules(req, kids)}
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec) and c.type == "anti_affinity" and not c.hard
            and i not in wide and joins(req, c)]


def deep_spreads(req: ScheduleRequest, kids: Sequence[Child]
                 ) -> list[tuple[int, SpreadRuleSpec]]:
    """The spread rules at a level below the children (`rack` when each child
    is a room): a child keeps one over its own domains only, so a request it
    takes whole may pile up in its few domains while another child's stay
    empty, where one zone with the same hosts would spread it over all."""
    if len(req.consumers) < 2:
        return []
    wide = {i for i, _ in wide_rules(req, kids)}
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec) and c.type == "spread" and i not in wide]


def soft_first(req: ScheduleRequest, kids: Sequence[Child]
               ) -> list[tuple[int, Constraint]]:
    """The soft rules a routing zone tries as hard ones first, as a zone
    without children tries its perfect matches first: its location and tags
    rules (the child asked would relax one its hosts cannot keep, where
    another child's keep it) and those of `kept_apart`."""
    return sorted([*((i, c) for i, c in enumerate(req.constraints)
                     if not c.hard and isinstance(c, LocationRule | TagsRule)),
                   *kept_apart(req, kids)], key=lambda t: t[0])


def hardened(req: ScheduleRequest, rules: Sequence[tuple[int, Constraint]]
             ) -> ScheduleRequest:
    """`req` with `rules` (soft) made hard: enforced first, as a zone without
    children enforces its soft rules first."""
    which = {i for i, _ in rules}
    return req.model_copy(update={"constraints": [
        c.model_copy(update={"hard": True}) if i in which else c
        for i, c in enumerate(req.constraints)]})


def deep_apart(req: ScheduleRequest, kids: Sequence[Child],
               levels: Sequence[str] = DEFAULT_LEVELS) -> list[tuple[int, SpreadRuleSpec]]:
    """The hard anti-affinity rules at a level below the children, above the
    host (a host is in one zone only): a child keeps one only with the members
    it holds, so a child that may have hosts in a domain where another zone
    holds a member would place there unknowing."""
    wide = {i for i, _ in wide_rules(req, kids)}
    return [(i, c) for i, c in enumerate(req.constraints)
            if isinstance(c, SpreadRuleSpec) and c.type == "anti_affinity" and c.hard
            and i not in wide and c.level in levels[:-1]]


def may_hold(prefix: str | None, dom: Sequence[str]) -> bool:
    """Whether a zone whose providers are under `prefix` (None: anywhere) may
    have a host in the failure domain `dom` (its location segments)."""
    if not prefix:
        return True
    segs = prefix.strip("/").split("/")
    n = min(len(segs), len(dom))
    return list(segs[:n]) == list(dom[:n])


def separated(a: str | None, b: str | None, level: str,
              levels: Sequence[str] = DEFAULT_LEVELS) -> bool:
    """Whether zones under prefixes `a` and `b` can share no domain at `level`."""
    if not a or not b or level not in levels:
        return False
    sa, sb = a.strip("/").split("/"), b.strip("/").split("/")
    n = min(len(sa), len(sb), list(levels).index(level) + 1)
    return sa[:n] != sb[:n]


def keep_apart(req: ScheduleRequest, kids: Sequence[Child],
               deep: Sequence[tuple[int, SpreadRuleSpec]],
               found: Mapping[str, Mapping[str, Any]], own: Any,
               outcomes: list[Outcome]) -> tuple[list[Child], bool]:
    """(the children a hard anti-affinity below them allows, whether this
    zone's own providers may take it): not those that may have hosts in a
    domain where a member is that they do not hold (they would not see it),
    nor, while a zone's members could not be read, those that may share a
    domain with it (a 503). `own`: this zone's OwnHosts, or None."""
    mine = set(req.consumers)
    out = list(kids)
    own_ok = True
    by_name = {k.name: k for k in kids}
    for _, r in deep:
        g = r.group or req.group
        answer = found.get(g or "") or {}
        depth = list(DEFAULT_LEVELS).index(r.level) + 1
        for m in answer.get("members", []):
            if m["consumer"] in mine or not m.get("location"):
                continue
            loc = str(m["location"]).strip("/").split("/")
            if len(loc) < depth:
                continue  # an unknown domain: the host's own
            dom = loc[:depth]
            segs = str(m.get("zone", "")).split("/")
            holder = segs[1] if len(segs) > 1 else OWN
            why = (f"group {g} has a member in {r.level} {'/'.join(dom)} (in "
                   f"{holder or 'own providers'}), where it may have hosts too (hard "
                   "anti_affinity below the children)")
            keep = []
            for k in out:
                if k.name != holder and may_hold(k.location_prefix, dom):
                    outcomes.append(Outcome(k.name, Result.PRUNED, why))
                else:
                    keep.append(k)
            out = keep
            if own_ok and own is not None and holder != OWN and own.may_be_in(dom):
                outcomes.append(Outcome(OWN, Result.PRUNED, why))
                own_ok = False
        for u in sorted({str(x).split("/")[0] for x in answer.get("unreachable", [])}):
            lost = by_name.get(u)
            why = (f"group {g}: the members in {u} could not be read (a zone did not "
                   "answer), and it may share a domain with them (hard anti_affinity)")
            keep = []
            for k in out:
                if k.name != u and not separated(k.location_prefix,
                                                 lost.location_prefix if lost else None,
                                                 r.level):
                    outcomes.append(Outcome(k.name, Result.UNAVAILABLE, why))
                else:
                    keep.append(k)
            out = keep
            if own_ok and own is not None and not separated(
                    own.where, lost.location_prefix if lost else None, r.level):
                outcomes.append(Outcome(OWN, Result.PRUNED, why))
                own_ok = False
    return out, own_ok


def apart_unsafe(req: ScheduleRequest, kids: Sequence[Child], cands: Sequence[Child]
                 ) -> list[str]:
    """The hard anti-affinity rules below the children, about the request's own
    instances, that shares in `cands` could break: two of them may share a
    domain of its level, and each keeps the rule only within its share."""
    out = []
    for _, r in deep_apart(req, kids):
        if not joins(req, r):
            continue
        if any(not separated(a.location_prefix, b.location_prefix, r.level)
               for n, a in enumerate(cands) for b in cands[n + 1:]):
            out.append(f"anti_affinity {r.group or req.group}@{r.level}")
    return out


class Following:
    """Where the affinity rules below the children let the request go, given
    where their groups' members are (`follow`)."""

    def __init__(self) -> None:
        self.own = True                       # this zone's own providers may take it
        # The weight of the soft rules broken, per child (OWN: own providers).
        self.penalty: dict[str, float] = {}
        self.holders: dict[int, set[str]] = {}  # rule -> children (OWN) holding members
        self.relaxed: list[dict[str, Any]] = []  # soft rules that cannot hold anywhere


def follow(req: ScheduleRequest, kids: Sequence[Child],
           deep: Sequence[tuple[int, SpreadRuleSpec]], found: Mapping[str, Mapping[str, Any]],
           outcomes: list[Outcome]) -> tuple[list[Child], Following]:
    """(the children an affinity rule below them allows, and the rest of what
    they say): a hard one goes only to the children (or this zone's own
    providers) that hold the group's members, since the others see none and
    would allow any domain; a soft one prefers them. Members of a group the
    request joins under two zones (two sites, so two rooms) cannot all share
    one room: a hard rule is refused, a soft one relaxed."""
    out = Following()
    mine = set(req.consumers)
    allowed_kids = list(kids)
    for i, r in deep:
        g = r.group or req.group
        where: set[str] = set()
        doms: set[str | None] = set()
        for m in (found.get(g or "") or {}).get("members", []):
            if m["consumer"] in mine:
                continue
            segs = str(m.get("zone", "")).split("/")
            where.add(segs[1] if len(segs) > 1 else OWN)
            doms.add(_location_domain(m, r.level))
        if not where:
            away = sorted({str(u).split("/")[0] for u in
                           (found.get(g or "") or {}).get("unreachable", [])})
            if r.hard and away:
                # None known: the members may be where no zone could say.
                why = (f"group {g}: its members in {', '.join(away)} could not be read "
                       f"(a zone did not answer; hard affinity at level {r.level})")
                outcomes += [Outcome(k.name, Result.UNAVAILABLE, why)
                             for k in allowed_kids if k.name not in away]
                allowed_kids = [k for k in allowed_kids if k.name in away]
                if out.own:
                    outcomes.append(Outcome(OWN, Result.PRUNED, why))
                out.own = False
            continue
        out.holders[i] = where
        apart = joins(req, r) and len(where) > 1 and (None in doms or len(doms) > 1)
        named = sorted(str(d) for d in doms if d is not None)
        if apart:
            if r.hard:
                why = (f"affinity {g}@{r.level}: members already in {len(where)} zones "
                       f"({', '.join(sorted(x or 'own providers' for x in where))}"
                       f"{': ' + ', '.join(named) if named else ''}), so not every member "
                       f"can share one {r.level} (hard affinity)")
                outcomes += [Outcome(k.name, Result.PRUNED, why) for k in allowed_kids]
                allowed_kids = []
                if out.own:
                    outcomes.append(Outcome(OWN, Result.PRUNED, why))
                out.own = False
            else:
                out.relaxed.append(_relaxed(i, r, req))
            continue
        if r.hard:
            why = (f"group {g} has its members in zone(s) "
                   f"{', '.join(sorted(x or 'own providers' for x in where))} "
                   f"(hard affinity at level {r.level}, below the children)")
            outcomes += [Outcome(k.name, Result.PRUNED, why)
                         for k in allowed_kids if k.name not in where]
            allowed_kids = [k for k in allowed_kids if k.name in where]
            if out.own and OWN not in where:
                outcomes.append(Outcome(OWN, Result.PRUNED, why))
                out.own = False
        else:
            for name in [*(k.name for k in kids), OWN]:
                if name not in where:
                    out.penalty[name] = out.penalty.get(name, 0.0) + r.weight
    return allowed_kids, out


def relax_unfollowed(req: ScheduleRequest, deep: Sequence[tuple[int, SpreadRuleSpec]],
                     following: Following, answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` with the soft affinity rules below the children in `relaxed`
    that it broke (placed in a zone that holds none of the group's members,
    or the members cannot all share a domain)."""
    seen = {x.get("index") for x in answer.get("relaxed", [])}
    more = [x for x in following.relaxed if x["index"] not in seen]
    seen |= {x["index"] for x in more}
    zones = {(lambda s: s[1] if len(s) > 1 else OWN)(str(p.get("zone", "")).split("/"))
             for p in answer.get("placements", [])}
    for i, r in deep:
        held = following.holders.get(i)
        if not r.hard and i not in seen and held and zones - held:
            seen.add(i)
            more.append(_relaxed(i, r, req))
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def _location_domain(member: Mapping[str, Any], level: str,
                     levels: Sequence[str] = DEFAULT_LEVELS) -> str | None:
    """A member's domain at `level` from its location (None: unknown, or the
    host level, whose domain is the host itself)."""
    if level not in levels[:-1] or not member.get("location"):
        return None
    loc = str(member["location"]).strip("/").split("/")
    depth = list(levels).index(level) + 1
    return "/".join(loc[:depth]) if len(loc) >= depth else None


def relax_scattered_own(req: ScheduleRequest, answer: dict[str, Any],
                        levels: Sequence[str] = DEFAULT_LEVELS) -> dict[str, Any]:
    """`answer` with the soft affinity rules its own instances break (they
    join the rule's group and are in more than one domain of its level) in
    `relaxed`, whichever zones placed them: each zone that took a share kept
    the rule within it, and may not have said so."""
    seen = {x.get("index") for x in answer.get("relaxed", [])}
    more = []
    for i, r in enumerate(req.constraints):
        if (not isinstance(r, SpreadRuleSpec) or r.type != "affinity" or r.hard
                or i in seen or not joins(req, r)):
            continue
        doms = {_placed_in(p, r.level, levels) for p in answer.get("placements", [])}
        if len(doms) > 1:
            more.append(_relaxed(i, r, req))
    return {**answer, "relaxed": [*answer.get("relaxed", []), *more]} if more else answer


def _placed_in(p: Mapping[str, Any], level: str, levels: Sequence[str]) -> str:
    """A placement's domain at `level` (an unknown one: its host's own)."""
    if level == ZONE_LEVEL:
        segs = str(p.get("zone", "")).split("/")
        return segs[1] if len(segs) > 1 else OWN
    if level in levels[:-1] and p.get("location"):
        loc = str(p["location"]).strip("/").split("/")
        depth = list(levels).index(level) + 1
        if len(loc) >= depth:
            return "/".join(loc[:depth])
    return f"host:{p.get('provider')}"


class GroupLocks:
    """One request at a time per server group at this zone, while it reads
    where the group's members are and places new ones (rules above a child
    are this zone's to keep). Locks go when nobody holds or waits for them."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, names: Sequence[str]) -> AsyncIterator[None]:
        names = sorted(set(names))
        for n in names:
            lock, users = self._locks.get(n, (asyncio.Lock(), 0))
            self._locks[n] = (lock, users + 1)
        taken: list[asyncio.Lock] = []
        try:
            for n in names:
                lock = self._locks[n][0]
                await lock.acquire()
                taken.append(lock)
            yield
        finally:
            for lock in taken:
                lock.release()
            for n in names:
                lock, users = self._locks[n]
                if users <= 1:
                    del self._locks[n]
                else:
                    self._locks[n] = (lock, users - 1)


def _relaxed(i: int, rule: SpreadRuleSpec, req: ScheduleRequest) -> dict[str, Any]:
    return {"index": i, "type": rule.type, "weight": rule.weight,
            "rule": f"{rule.type} {rule.group or req.group or ''}@{rule.level}"}


def _candidates(tree: Splitter, req: ScheduleRequest, kids: Sequence[Child],
                outcomes: list[Outcome]) -> list[Child]:
    """Children that could take one instance, most promising first."""
    one = req.model_copy(update={"consumers": req.consumers[:1], "atomic": True})
    scored: list[tuple[float, str, Child]] = []
    for k in kids:
        if not tree.health_of(k.name).due():
            outcomes.append(Outcome(k.name, Result.UNHEALTHY,
                                    "split: skipped, failed recently (probe not due)"))
            continue
        cached = tree.cache.get(k.name)
        body = cached.body if cached is not None else None
        why = prune_reason(one, body, k.location_prefix, k.tags)
        if why is not None:
            outcomes.append(Outcome(k.name, Result.PRUNED, f"split: {why}"))
            continue
        scored.append((predicted_fit(one, body) if body else 0.0, k.name, k))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [k for _, _, k in scored][: max(1, int(tree.config.fanout))]


def _enough(tree: Splitter, req: ScheduleRequest, cands: Sequence[Child],
            wide: Sequence[tuple[int, SpreadRuleSpec]]) -> list[Child]:
    """The first candidates whose summaries promise room for every instance,
    plus one: each child's promise is its free room per class over what one
    instance asks (one, under an anti-affinity rule above the children)."""
    want: dict[str, int] = {}
    for g in req.groups:
        for rc, amount in g.resources.items():
            want[rc] = want.get(rc, 0) + amount
    if any(r.type == "spread" for _, r in wide):
        return list(cands)  # the skew is measured over every domain with room
    one_each = any(r.type == "anti_affinity" and joins(req, r) for _, r in wide)
    n = len(req.consumers)
    promised = 0
    for i, k in enumerate(cands):
        cached = tree.cache.get(k.name)
        classes = cached.body.get("classes", {}) if cached is not None else {}
        fits = min((max(0, int(classes.get(rc, {}).get("capacity", 0))
                        - int(classes.get(rc, {}).get("used", 0))) // amount
                    for rc, amount in want.items()), default=0)
        promised += min(fits, 1 if one_each else n)
        if promised >= n:
            return list(cands[: i + 2])
    return list(cands)


async def _plan(tree: Splitter, req: ScheduleRequest, kids: Sequence[Child],
                outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Each child's dry run of the whole request with atomic=false."""
    dry = for_child(req).model_copy(update={"dry_run": True, "atomic": False,
                                            "request_id": None, "explain": False,
                                            "hold_ttl": None})
    got = await asyncio.gather(*(tree.ask(k, dry, None, PLAN_SHARE) for k in kids))
    plans: dict[str, dict[str, Any]] = {}
    for k, answer in zip(kids, got, strict=True):
        if isinstance(answer, Outcome):
            outcomes.append(answer)
        elif answer.get("placements"):
            plans[k.name] = answer
        else:
            outcomes.append(Outcome(k.name, Result.NO_VALID_PLACEMENT,
                                    "split: it could take none of the instances"))
    return plans


def _binding(req: ScheduleRequest, counts: Sequence[tuple[Child, int]],
             wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy | None = None
             ) -> list[str]:
    """The hard rules above the children that cannot hold all the request's
    instances in the domains of the children that could take one, said as a
    zone without children says them (scheduler.py's _together), e.g.
    "anti_affinity db@site: 3 instances need 3 sites apart, and the children
    that could take one are in 2 site(s)". (Each child's count is under the
    rules already: a child that is one site takes one instance of a site
    anti-affinity, so the counts alone never show the rule.)"""
    n = len(req.consumers)
    out = []
    for i, r in wide:
        if not r.hard:
            continue
        name = f"{r.type} {r.group or req.group or ''}@{r.level}"
        room: Counter[str] = Counter()
        for k, c in counts:
            if c > 0:
                room[domain(k, r.level) or k.name] += c
        lv, doms = r.level, len(room)
        if r.type == "anti_affinity":
            if joins(req, r) and doms < n:
                out.append(f"{name}: {n} instances need {n} {lv}s apart, and the children "
                           f"that could take one are in {doms} {lv}(s)")
        elif r.type == "spread":
            if r.max_per_domain is not None:
                held = (occ or {}).get(i, Counter())
                more = sum(min(c, max(0, r.max_per_domain - held[d])) for d, c in room.items())
                if more < n:
                    out.append(f"{name}: at most {r.max_per_domain} per {lv}, and the {doms} "
                               f"{lv}(s) the children that could take one are in take "
                               f"{more} more")
        elif joins(req, r) and n > 1 and room and max(room.values()) < n:
            out.append(f"{name}: no single {lv} among the {doms} the children that could "
                       f"take one are in has room for all {n} instances")
    return out


def joins(req: ScheduleRequest, rule: SpreadRuleSpec) -> bool:
    """The request's instances join the rule's group: an affinity or
    anti-affinity rule is then about them too, not only the members before."""
    return req.group is not None and (rule.group or req.group) == req.group


def assign(req: ScheduleRequest, counts: Sequence[tuple[Child, int]],
           wide: Sequence[tuple[int, SpreadRuleSpec]], occ: Occupancy | None = None
           ) -> tuple[list[tuple[Child, int]], list[dict[str, Any]]]:
    """(each child's number of instances, the soft rules relaxed): biggest first,
    within the caps of the spread rules above the children."""
    n = len(req.consumers)
    order = sorted(counts, key=lambda t: (-t[1], t[0].name))
    relaxed: list[dict[str, Any]] = []
    for i, r in wide:
        if r.type != "affinity":
            continue
        # Where the group's members are is where the rule goes (a hard one:
        # the other children were never candidates, see `allowed`); the
        # request's own instances are kept in one domain when they join it.
        held = {d for d, c in (occ or {}).get(i, Counter()).items() if c > 0}
        together = joins(req, r)
        if not together and not held:
            continue  # no member to follow, and the instances may be apart
        room: Counter[str] = Counter()
        for k, cnt in order:
            room[domain(k, r.level) or k.name] += cnt
        if not room:
            break
        if together:
            # Members in several domains: a hard rule was refused before
            # (`allowed`), a soft one is relaxed (`relax_scattered`).
            pick = held if len(held) == 1 else set(room)
            best = max((d for d in room if d in pick), key=lambda d: (room[d], d),
                       default=None)
            keep = {best} if best is not None and (room[best] >= n or r.hard) else set()
        else:
            keep = held if sum(room[d] for d in held) >= n or r.hard else set()
        if keep or r.hard:
            order = [(k, c) for k, c in order if (domain(k, r.level) or k.name) in keep]
        else:
            relaxed.append(_relaxed(i, r, req))
    anti = [(i, r) for i, r in wide if r.type == "anti_affinity" and joins(req, r)]
    spreads = [(i, r) for i, r in wide if r.type == "spread"]
    # Anti-affinity to another group: only where its members are is out (a
    # hard one: those children were never candidates, see `allowed`); a soft
    # one keeps the request from there while the others have room.
    avoid = [(i, r) for i, r in wide if r.type == "anti_affinity" and not joins(req, r)
             and not r.hard and any((occ or {}).get(i, Counter()).values())]
    if avoid:
        clear = [(k, c) for k, c in order
                 if not any((occ or {})[i][domain(k, r.level) or k.name] for i, r in avoid)]
        if sum(c for _, c in clear) >= n:
            order = clear
        else:
            relaxed += [_relaxed(i, r, req) for i, r in avoid]

    def cap(r: SpreadRuleSpec) -> int | None:
        return 1 if r.type == "anti_affinity" else r.max_per_domain

    def start() -> Counter[tuple[int, str]]:
        used: Counter[tuple[int, str]] = Counter()
        for i, counts in (occ or {}).items():
            for d, c in counts.items():
                used[(i, d)] += c
        return used

    def fill(caps: Sequence[tuple[int, SpreadRuleSpec]]) -> list[tuple[Child, int]]:
        used = start()
        out: list[tuple[Child, int]] = []
        left = n
        for k, cnt in order:
            take = min(cnt, left)
            for i, r in caps:
                limit = cap(r)
                if limit is not None:
                    take = min(take, limit - used[(i, domain(k, r.level) or k.name)])
            if take <= 0:
                continue
            for i, r in caps:
                used[(i, domain(k, r.level) or k.name)] += take
            out.append((k, take))
            left -= take
            if not left:
                break
        return out

    def balance(caps: Sequence[tuple[int, SpreadRuleSpec]],
                even: Sequence[tuple[int, SpreadRuleSpec]]) -> list[tuple[Child, int]]:
        """One instance at a time to the child whose `even` domains hold the
        fewest so far (a relaxed soft rule still spreads as far as it can)."""
        used = start()
        took: Counter[str] = Counter()
        room = {k.name: cnt for k, cnt in order}
        for _ in range(n):
            best = None
            for k, _cnt in order:
                if took[k.name] >= room[k.name] or any(
                        (limit := cap(r)) is not None
                        and used[(i, domain(k, r.level) or k.name)] >= limit
                        for i, r in caps):
                    continue
                key = (sum(used[(i, domain(k, r.level) or k.name)] for i, r in even),
                       took[k.name])
                if best is None or key < best[0]:
                    best = (key, k)
            if best is None:
                break
            k = best[1]
            took[k.name] += 1
            # Each rule once: a rule both capped and evened is one count.
            for i, r in dict([*caps, *even]).items():
                used[(i, domain(k, r.level) or k.name)] += 1
        return [(k, took[k.name]) for k, _ in order if took[k.name]]

    if spreads:
        # Even across the domains (one at a time to the emptiest), within the
        # caps; then the skew, over the domains of the children that could
        # take an instance.
        shares = balance([*anti, *spreads], [*spreads, *anti])
        soft = [(i, r) for i, r in [*anti, *spreads] if not r.hard]
        if sum(c for _, c in shares) < n and soft:
            shares = balance([(i, r) for i, r in [*anti, *spreads] if r.hard],
                             [*spreads, *anti])
            relaxed += [_relaxed(i, r, req) for i, r in soft]
        for i, r in spreads:
            # The emptiest domain is among all that could take one, not only
            # those an affinity rule kept.
            if _skew(shares, counts, i, r, occ) <= r.max_skew:
                continue
            if r.hard:
                return [], relaxed
            if all(x["index"] != i for x in relaxed):
                relaxed.append(_relaxed(i, r, req))
        return shares, relaxed
    shares = fill(anti)
    soft = [(i, r) for i, r in anti if not r.hard]
    if sum(c for _, c in shares) < n and soft:
        shares = balance([(i, r) for i, r in anti if r.hard], soft)
        relaxed += [_relaxed(i, r, req) for i, r in soft]
    return shares, relaxed


def even_shares(n: int, room: Sequence[tuple[Child, int]], domains: Mapping[str, int]
                ) -> list[tuple[Child, int]]:
    """`n` instances over the children that can take them (`room`: how many
    each can take), in proportion to the domains each has room in (`domains`,
    see `_domains`). A soft anti-affinity below the children that must give,
    or a spread below them, then still spreads over the most domains, as one
    zone spreads it (each child spreads its share over its own): eight
    instances over two cells of two hosts go four and four, not eight in
    one. Children with no such domain take what the others cannot."""
    took: Counter[str] = Counter()
    cap = {k.name: c for k, c in room}
    order = sorted(room, key=lambda t: (-domains.get(t[0].name, 0), t[0].name))
    for _ in range(n):
        best: tuple[tuple[float, int], Child] | None = None
        for k, _c in order:
            d = domains.get(k.name, 0)
            if took[k.name] >= cap[k.name]:
                continue
            # The share each of its domains would hold with one more; a child
            # with none comes after every child that has one.
            key = ((took[k.name] + 1) / d if d > 0 else float("inf"), -cap[k.name])
            if best is None or key < best[0]:
                best = (key, k)
        if best is None:
            break
        took[best[1].name] += 1
    return [(k, took[k.name]) for k, _ in order if took[k.name]]


def _skew(shares: Sequence[tuple[Child, int]], order: Sequence[tuple[Child, int]], i: int,
          r: SpreadRuleSpec, occ: Occupancy | None) -> int:
    """The most one domain that gets instances holds beyond the emptiest domain
    that could take one (the request's own and the group's earlier members)."""
    totals: Counter[str] = Counter()
    for d, c in (occ or {}).get(i, Counter()).items():
        totals[d] += c
    mine: set[str] = set()
    for k, c in shares:
        d = domain(k, r.level) or k.name
        totals[d] += c
        mine.add(d)
    universe = {domain(k, r.level) or k.name for k, cnt in order if cnt > 0}
    if not universe or not mine:
        return 0
    low = min(totals[d] for d in universe)
    return max(totals[d] for d in mine) - low


async def schedule_across(tree: Splitter, req: ScheduleRequest, kids: Sequence[Child],
                          outcomes: list[Outcome], attempt: Attempt | None,
                          occ: Occupancy | None = None, own: Child | None = None, *,
                          even: bool = False) -> dict[str, Any] | None:
    """`req` divided among the children (see the module's doc); None if it does
    not apply or nothing (atomic: not everything) fits. `own`: this zone's own
    providers as one more share (named OWN: asked first, with no round trip),
    when no rule above a child applies (their domains are per host, not one).
    `even`: the request's instances outnumber the domains any one child has
    room in under the soft anti-affinity rules of `kept_apart` (those a plan
    with them hard could not keep) or the rules of `deep_spreads`: the shares
    follow the domains each child has room in (`even_shares`), every
    candidate asked; None (and nothing said) when that does not apply, for
    the caller to place the request as it would otherwise."""
    n = len(req.consumers)
    if n < 2:
        return None
    first: list[Outcome] = []
    cands = _candidates(tree, req, kids, first)
    pruned = {o.zone for o in first if o.outcome == Result.PRUNED}
    if pruned:
        # Summaries are hints: look again at those they ruled out.
        wait = min(tree.config.child_timeout,
                   attempt.remaining() * 0.25 if attempt else tree.config.child_timeout)
        await tree.refresh([k for k in kids if k.name in pruned], fresh=True,
                           wait=max(0.0, wait))
        first = []
        cands = _candidates(tree, req, kids, first)
    # The division's own look at a child replaces what an earlier one said of
    # it: explain lists each child once.
    looked = {o.zone for o in first}
    outcomes[:] = [o for o in outcomes if not (o.outcome == Result.PRUNED and o.zone in looked)]
    outcomes += first
    wide = wide_rules(req, kids)
    if own is not None and takes_part(own, wide):
        cands = [own, *cands]
    if not cands:
        return None
    hard = [(i, r) for i, r in kept_together(req, kids) if r.hard]
    if hard:
        named = ", ".join(f"{r.type} {r.group or req.group}@{r.level}" for _, r in hard)
        outcomes.append(Outcome(DIVIDED, Result.NO_VALID_PLACEMENT,
                                f"{named}: no one zone has room for all {n} instances, "
                                "and shares in several zones would not be together"))
        return None
    unsafe = apart_unsafe(req, kids, cands)
    if unsafe:
        outcomes.append(Outcome(DIVIDED, Result.NO_VALID_PLACEMENT,
                                f"{', '.join(unsafe)}: no one zone has room for all {n} "
                                "instances, and shares in zones that may share a domain "
                                "could be together"))
        return None
    # Ask the fewest children the summaries say are enough (and one more),
    # then the rest only if their plans fall short: a gang of four over ten
    # cells asks five, not ten.
    apart = kept_apart(req, kids) if even and not wide else []
    spreads = deep_spreads(req, kids) if even and not wide else []
    if even and not (apart or spreads):
        return None
    first_round = list(cands) if even else _enough(tree, req, cands, wide)
    plans = await _plan(tree, req, first_round, outcomes)
    by_name = {k.name: k for k in cands}
    counts = [(by_name[name], len(p["placements"])) for name, p in plans.items()]
    shares, relaxed = assign(req, counts, wide, occ)
    rest = cands[len(first_round):]
    if sum(c for _, c in shares) < n and rest:
        plans.update(await _plan(tree, req, rest, outcomes))
        counts = [(by_name[name], len(p["placements"])) for name, p in plans.items()]
        shares, relaxed = assign(req, counts, wide, occ)
    if even:
        if len(counts) < 2:
            return None  # nothing to divide among (no round of plans for it)
        domains = await _domains(tree, req, counts, plans, apart, spreads)
        if max(domains.values(), default=0) >= n:
            return None  # one child can give each instance a domain of its own
        shares = even_shares(n, counts, domains)
    total = sum(c for _, c in shares)
    if not total or (req.atomic and total < n):
        took = ", ".join(f"{_label(k)}: {c}" for k, c in shares) or "none"
        who = ("this zone's own providers and its children" if any(k.name == OWN for k in cands)
               else "the children")
        why = f"{who} could take {total} of {n} instance(s) together ({took})"
        # A rule above the children that made it impossible is said first, as
        # a zone without children says it (its explain's `cause`).
        cause = "; ".join(_binding(req, counts, wide, occ))
        outcomes.append(Outcome(DIVIDED, Result.NO_VALID_PLACEMENT, why,
                                {"cause": cause} if cause else None))
        return None
    consumers = list(req.consumers)
    split: list[tuple[Child, list[str]]] = []
    for k, c in shares:
        split.append((k, consumers[:c]))
        consumers = consumers[c:]
    if len(split) > 1:
        relaxed = relax_together(req, kids, {"relaxed": relaxed})["relaxed"]
    if req.dry_run or attempt is None:
        return _merge(tree, req, await _dry_shares(tree, req, split, plans), consumers,
                      relaxed)
    return await _claim(tree, req, split, consumers, relaxed, outcomes, attempt)


async def _domains(tree: Splitter, req: ScheduleRequest, counts: Sequence[tuple[Child, int]],
                   plans: Mapping[str, dict[str, Any]],
                   apart: Sequence[tuple[int, SpreadRuleSpec]],
                   spreads: Sequence[tuple[int, SpreadRuleSpec]]) -> dict[str, int]:
    """How many domains each child has room in, for `even_shares` (what a
    child says is a hint only: never more than its plain plan takes). Under
    `apart`, what its plan with those rules hard places (the group's members
    keep it from their domains); under `spreads`, the domains its plain plan
    of every instance uses (it spreads them over all it can); under both,
    the fewer."""
    got = {k.name: c for k, c in counts}
    if apart:
        kept = await _plan(tree, hardened(req, apart), [k for k, _ in counts], [])
        for k, _c in counts:
            got[k.name] = min(got[k.name], len(kept.get(k.name, {}).get("placements", [])))
    for _, r in spreads:
        for k, _c in counts:
            used = {_placed_in(p, r.level, DEFAULT_LEVELS)
                    for p in plans.get(k.name, {}).get("placements", [])}
            got[k.name] = min(got[k.name], len(used))
    return got


async def _dry_shares(tree: Splitter, req: ScheduleRequest,
                      split: Sequence[tuple[Child, list[str]]],
                      plans: Mapping[str, dict[str, Any]]
                      ) -> list[tuple[Child, dict[str, Any]]]:
    """Each child's plan cut to its share. A plan of the whole request that
    relaxed a soft rule may have relaxed it only for instances beyond the
    share: that child is asked again for its share alone (as the real request
    asks it), so a dry run says what the real request would."""
    async def one(k: Child, cs: list[str]) -> tuple[Child, dict[str, Any]]:
        plan = plans[k.name]
        if plan.get("relaxed") and len(cs) < len(plan["placements"]):
            dry = for_child(req).model_copy(update={
                "consumers": cs, "dry_run": True, "request_id": None, "explain": False,
                "hold_ttl": None})
            again = await tree.ask(k, dry, None, PLAN_SHARE)
            if isinstance(again, dict) and len(again.get("placements", [])) == len(cs):
                plan = again
        return k, _dry_share(plan, cs)
    return list(await asyncio.gather(*(one(k, cs) for k, cs in split)))


def _dry_share(plan: dict[str, Any], consumers: list[str]) -> dict[str, Any]:
    """A child's dry-run plan cut to its share, renamed to the share's consumers."""
    picked = plan["placements"][: len(consumers)]
    return {**plan, "placements": [{**p, "consumer_uuid": c}
                                   for p, c in zip(picked, consumers, strict=True)],
            "unplaced": []}


async def _claim(tree: Splitter, req: ScheduleRequest, split: list[tuple[Child, list[str]]],
                 unassigned: list[str], relaxed: list[dict[str, Any]],
                 outcomes: list[Outcome], attempt: Attempt) -> dict[str, Any] | None:
    gang = req.atomic and len(split) > 1
    # A share of a share (this zone is itself held by a parent's gang) is held
    # too, and its parent confirms it; a gang of this zone's, this zone does.
    hold = req.hold_ttl if req.hold_ttl is not None else (
        tree.config.hold_ttl if gang else None)
    base = for_child(req).model_copy(update={"hold_ttl": hold, "dry_run": False,
                                             "explain": False})
    # The id is reserved before the shares are asked at once (each records
    # its part under it).
    await tree.reserve(attempt)
    # Every share runs to its end before anything is decided: an error in one
    # (a child calling the request invalid, a cancel) must not leave another
    # still asking while the attempt is undone.
    got = await asyncio.gather(*(
        tree.ask(k, base.model_copy(update={"consumers": cs}), attempt, CLAIM_SHARE)
        for k, cs in split), return_exceptions=True)
    errors_ = [g for g in got if isinstance(g, BaseException)]
    if errors_:
        await tree.undo(attempt.request_id, placed=False, attempt=attempt.token)
        raise errors_[0]
    answers: list[tuple[Child, dict[str, Any]]] = []
    failed: list[str] = []
    for (k, cs), answer in zip(split, got, strict=True):
        assert not isinstance(answer, BaseException)
        if isinstance(answer, Outcome):
            outcomes.append(answer)
            failed += cs
        else:
            answers.append((k, answer))
    if req.atomic and failed:
        await tree.undo(attempt.request_id, placed=False, attempt=attempt.token)
        outcomes.append(Outcome(DIVIDED, Result.CONFLICT,
                                f"{len(failed)} of {len(req.consumers)} instance(s) "
                                "were not placed where planned; every share was released"))
        return None
    merged = _merge(tree, req, answers, [*unassigned, *failed], relaxed)
    if gang and req.hold_ttl is None and (
            attempt.remaining() <= 0 or not await _confirm(tree, merged, attempt)):
        await tree.undo(attempt.request_id, placed=False, attempt=attempt.token)
        outcomes.append(Outcome(DIVIDED, Result.CONFLICT, "a held share expired before "
                                "it was confirmed; every share was released"))
        return None
    return merged


async def _confirm(tree: Splitter, merged: dict[str, Any], attempt: Attempt) -> bool:
    """Confirm every held share: False if one had expired (404). A child that
    does not answer raises ServiceUnavailable (the attempt is undone). The
    share on this zone's own providers is confirmed here, after the children's
    (if one of theirs had expired, the attempt is undone, ours with it)."""
    parts = shared.remote_parts(merged)
    got = await asyncio.gather(*(shared.confirm_part(tree, part, attempt.deadline)
                                 for part in parts), return_exceptions=True)
    for g in got:
        if isinstance(g, BaseException):
            raise g  # not answered: the attempt is undone
    if not all(g != 404 for g in got):
        return False
    here = shared.local_consumers(merged)
    return not here or await tree.confirm_here(here)


def _label(k: Child) -> str:
    return "own providers" if k.name == OWN else k.name


def _merge(tree: Splitter, req: ScheduleRequest, answers: Sequence[tuple[Child, dict[str, Any]]],
           unplaced: list[str], relaxed: list[dict[str, Any]]) -> dict[str, Any]:
    placements: list[dict[str, Any]] = []
    seen_rules = {r["index"] for r in relaxed}
    rules = list(relaxed)
    retries = 0
    left = list(unplaced)
    for k, answer in answers:
        placements += tree.prefixed(answer, k.name)["placements"]
        left += answer.get("unplaced", [])
        retries += int(answer.get("retries", 0))
        for r in answer.get("relaxed", []):
            if r.get("index") not in seen_rules:
                seen_rules.add(r.get("index"))
                rules.append(r)
    out = {"placements": placements, "relaxed": rules, "retries": retries,
           "dry_run": req.dry_run, "request_id": req.request_id, "unplaced": left}
    if req.explain:
        # What placed it: the division, and each zone's share.
        out["explain"] = {"divided": [
            {"zone": _label(k), "instances": len(a["placements"])} for k, a in answers]}
    return out



def combine(first: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """atomic=false: a first answer and the answer for what it left unplaced."""
    seen = {r.get("index") for r in first.get("relaxed", [])}
    return {**first, "placements": [*first["placements"], *more["placements"]],
            "unplaced": list(more.get("unplaced", [])),
            "retries": int(first.get("retries", 0)) + int(more.get("retries", 0)),
            "relaxed": [*first.get("relaxed", []),
                        *(r for r in more.get("relaxed", []) if r.get("index") not in seen)]}
