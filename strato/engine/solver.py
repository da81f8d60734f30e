"""Assign several instances to candidate options under spread rules.

Input: the options the engine found for *one* instance (each a candidate with
its score, host and failure-domain keys), the free capacity of the providers
they use, how many instances to place, and the affinity / anti-affinity rules
among them (hard or soft, with weights). Output: one option per instance, or
None when the hard rules and capacity cannot all be met.

Method: greedy with look-ahead by domain. Anti-affinity keeps at most one
instance per domain; affinity tries the most promising domains one by one and
keeps the best complete assignment. Soft rules cost their weight per
violation. Pure: no database, no index; tests compare it with an exhaustive
solver on small cases (tests/engine/test_solver.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

# Affinity: how many target domains to try before settling for the best so far.
MAX_AFFINITY_DOMAINS = 8
# Repair (1-swap local search) is quadratic: only for modest problems.
REPAIR_MAX_INSTANCES = 32
REPAIR_MAX_OPTIONS = 64
REPAIR_ROUNDS = 4


class SpreadKind(StrEnum):
    AFFINITY = "affinity"
    ANTI_AFFINITY = "anti_affinity"
    # Even across the domains of a level: at most `max_skew` more in one domain
    # than in the emptiest one that could take an instance, and at most
    # `max_per_domain` in any.
    SPREAD = "spread"


# A hard spread rule pulls each pick to the least filled domain: this much
# per instance already there outweighs any score (scores are within [0, 1]).
SPREAD_PULL = 10.0


@dataclass(frozen=True, slots=True)
class Option:
    """One way to place one instance."""

    # (provider uuid, resource class, amount), as claimed.
    items: tuple[tuple[str, str, int], ...]
    host: str
    # level name -> domain key at that level (e.g. "rack" -> "dfw/room1/rack3").
    domains: Mapping[str, str]
    score: float
    location: str | None = None


@dataclass(frozen=True, slots=True)
class SpreadRule:
    kind: SpreadKind
    level: str
    hard: bool = True
    weight: float = 1.0
    # Domains (at `level`) that members placed earlier already occupy.
    existing: frozenset[str] = frozenset()
    name: str = ""
    # False when the rule is about another group than the one the new
    # instances join: then only `existing` matters, not the new instances.
    among_new: bool = True
    # SPREAD: members placed earlier per domain, and the limits.
    counts: Mapping[str, int] = field(default_factory=dict)
    max_skew: int = 1
    max_per_domain: int | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    # One option index per placed instance, in instance order.
    choices: tuple[int, ...]
    objective: float
    # Soft rules violated by this assignment (indexes into the rules given).
    violated: tuple[int, ...] = ()


@dataclass(slots=True)
class _State:
    free: dict[tuple[str, str], int]
    chosen: list[int] = field(default_factory=list)
    # per rule: Counter of domains used by the instances chosen so far
    used: list[Counter[str]] = field(default_factory=list)


def solve(options: Sequence[Option], free: Mapping[tuple[str, str], int], count: int,
          rules: Sequence[SpreadRule] = (), *, atomic: bool = True) -> Assignment | None:
    """The best assignment found, or None if `atomic` and not every instance fits."""
    if count <= 0:
        return Assignment((), 0.0)
    if count == 1 and not rules:
        # The usual ask: the best scored option that fits (ties: the first).
        for i in sorted(range(len(options)), key=lambda i: -options[i].score):
            if all(free.get(k, 0) >= v for k, v in _need(options[i])):
                return Assignment((i,), options[i].score)
        return None if atomic else Assignment((), 0.0)
    allowed = [i for i, o in enumerate(options) if _hard_ok_alone(o, rules)]
    if any(r.kind is SpreadKind.SPREAD for r in rules):
        return _spread(options, allowed, free, count, rules, atomic)
    affinity = [k for k, r in enumerate(rules)
                if r.hard and r.kind is SpreadKind.AFFINITY and not r.existing and r.among_new]
    if not affinity:
        return _greedy(options, allowed, free, count, rules, atomic)
    # Hard affinity with no earlier member: every instance in one domain of
    # the first such rule; try the most promising domains.
    rule = rules[affinity[0]]
    best_by_domain: dict[str, float] = {}
    for i in allowed:
        d = options[i].domains.get(rule.level, options[i].host)
        best_by_domain[d] = max(best_by_domain.get(d, float("-inf")), options[i].score)
    ranked = sorted(best_by_domain, key=lambda d: (-best_by_domain[d], d))
    best: Assignment | None = None
    for d in ranked[:MAX_AFFINITY_DOMAINS]:
        subset = [i for i in allowed if options[i].domains.get(rule.level, options[i].host) == d]
        got = _greedy(options, subset, free, count, rules, atomic)
        if got is not None and (best is None or _better(got, best)):
            best = got
            if len(got.choices) == count and not got.violated:
                break
    return best


def _better(a: Assignment, b: Assignment) -> bool:
    return (len(a.choices), a.objective) > (len(b.choices), b.objective)


def _domain(o: Option, level: str) -> str:
    return o.domains.get(level, o.host)


def _hard_ok_alone(o: Option, rules: Sequence[SpreadRule]) -> bool:
    """Hard rules against members placed earlier (not among the new instances)."""
    for r in rules:
        if not r.hard:
            continue
        d = _domain(o, r.level)
        if r.kind is SpreadKind.SPREAD:
            if r.max_per_domain is not None and r.counts.get(d, 0) >= r.max_per_domain:
                return False
            continue
        if r.kind is SpreadKind.ANTI_AFFINITY and d in r.existing:
            return False
        if r.kind is SpreadKind.AFFINITY and r.existing and d not in r.existing:
            return False
    return True


def _need(o: Option) -> list[tuple[tuple[str, str], int]]:
    need: dict[tuple[str, str], int] = {}
    for rp, rc, amount in o.items:
        need[(rp, rc)] = need.get((rp, rc), 0) + amount
    return list(need.items())


_NO_USE: Counter[str] = Counter()


def _gain(o: Option, state: _State, rules: Sequence[SpreadRule],
          doms: Sequence[str] | None = None) -> float | None:
    """Score of adding `o` now; None if a hard rule among new instances forbids it.
    `doms`: the option's domain per rule, when the caller has them."""
    gain = o.score
    for k, r in enumerate(rules):
        d = doms[k] if doms is not None else _domain(o, r.level)
        used = state.used[k] if r.among_new else _NO_USE
        if r.kind is SpreadKind.SPREAD:
            have = used[d] + r.counts.get(d, 0)
            if r.max_per_domain is not None and have + 1 > r.max_per_domain:
                if r.hard:
                    return None
                gain -= r.weight
            gain -= (SPREAD_PULL if r.hard else r.weight) * have
            continue
        if r.kind is SpreadKind.ANTI_AFFINITY:
            # A broken soft rule costs its weight per member already there
            # (earlier members count as one), as Nova's soft anti-affinity
            # weigher counts them: when the rule must give, the instances
            # still spread as evenly as they can, not pile up where the
            # score is best once every domain has one.
            clash = used[d] + (d in r.existing)
            if clash and r.hard:
                return None
            if clash:
                gain -= r.weight * clash
        else:
            others = set(used) | set(r.existing)
            apart = bool(others) and d not in others
            if apart and r.hard:
                return None
            if apart:
                gain -= r.weight
    return gain


def _greedy(options: Sequence[Option], allowed: Sequence[int],
            free: Mapping[tuple[str, str], int], count: int, rules: Sequence[SpreadRule],
            atomic: bool) -> Assignment | None:
    state = _State(free=dict(free), used=[Counter() for _ in rules])
    # Per option, once: what it takes and its domain under each rule.
    needs: dict[int, list[tuple[tuple[str, str], int]]] = {}
    doms: dict[int, list[str]] = {}
    # Hard rules only: a gain is the option's score or nothing, so in order of
    # score (ties: the given order, as the full scan keeps its first) the first
    # option that fits and keeps the rules is the pick.
    hard = all(r.hard and r.kind is not SpreadKind.SPREAD for r in rules)
    order = sorted(allowed, key=lambda i: -options[i].score) if hard else allowed
    for _ in range(count):
        best_i, best_gain = -1, float("-inf")
        sfree = state.free
        for i in order:
            need = needs.get(i)
            if need is None:
                need = needs[i] = _need(options[i])
                doms[i] = [_domain(options[i], r.level) for r in rules]
            if not all(sfree.get(k, 0) >= v for k, v in need):
                continue
            g = _gain(options[i], state, rules, doms[i])
            if g is not None and g > best_gain:
                best_i, best_gain = i, g
                if hard:
                    break
        if best_i < 0:
            if atomic:
                return None
            break
        o = options[best_i]
        for rp, rc, amount in o.items:
            state.free[(rp, rc)] = state.free.get((rp, rc), 0) - amount
        for k, r in enumerate(rules):
            state.used[k][_domain(o, r.level)] += 1
        state.chosen.append(best_i)
    # One instance: the greedy pick is already the best that fits.
    chosen = (state.chosen if count == 1
              else _repair(options, allowed, free, state.chosen, rules))
    return Assignment(tuple(chosen), _objective(options, chosen, rules),
                      violated(options, chosen, rules))


def _feasible(options: Sequence[Option], chosen: Sequence[int],
              free: Mapping[tuple[str, str], int]) -> bool:
    need: Counter[tuple[str, str]] = Counter()
    for i in chosen:
        for rp, rc, amount in options[i].items:
            need[(rp, rc)] += amount
    return all(free.get(k, 0) >= v for k, v in need.items())


def _repair(options: Sequence[Option], allowed: Sequence[int],
            free: Mapping[tuple[str, str], int], chosen: list[int],
            rules: Sequence[SpreadRule]) -> list[int]:
    """Greedy can lock itself in (an early pick blocks better later ones):
    move one instance at a time to another option while that improves."""
    if not chosen or len(chosen) > REPAIR_MAX_INSTANCES:
        return chosen
    pool = sorted(allowed, key=lambda i: -options[i].score)[:REPAIR_MAX_OPTIONS]
    best = list(chosen)
    best_value = _objective(options, best, rules)
    # Without soft rules the objective is the sum of scores: only an option
    # that scores higher can improve a move (and the pool is best first).
    soft = any(not r.hard or r.kind is SpreadKind.SPREAD for r in rules)
    for _ in range(REPAIR_ROUNDS):
        improved = False
        for j in range(len(best)):
            for i in pool:
                if not soft and options[i].score <= options[best[j]].score + 1e-12:
                    break
                if i == best[j]:
                    continue
                trial = [*best[:j], i, *best[j + 1:]]
                value = _objective(options, trial, rules)
                if value > best_value + 1e-12 and _feasible(options, trial, free):
                    best, best_value, improved = trial, value, True
        if not improved:
            break
    return best


def violated(options: Sequence[Option], chosen: Sequence[int],
             rules: Sequence[SpreadRule]) -> tuple[int, ...]:
    """Indexes of the soft rules that `chosen` breaks."""
    out = []
    for k, r in enumerate(rules):
        if r.hard:
            continue
        doms = [_domain(options[i], r.level) for i in chosen]
        if r.kind is SpreadKind.SPREAD:
            if not _spread_ok(r, Counter(doms), _universe(options, range(len(options)), r)):
                out.append(k)
            continue
        if r.kind is SpreadKind.ANTI_AFFINITY:
            bad = any(d in r.existing for d in doms) or (
                r.among_new and len(set(doms)) < len(doms))
        elif r.among_new:
            bad = len(set(doms) | set(r.existing)) > 1
        else:
            bad = bool(r.existing) and any(d not in r.existing for d in doms)
        if bad:
            out.append(k)
    return tuple(out)


def objective(options: Sequence[Option], chosen: Sequence[int],
              rules: Sequence[SpreadRule]) -> float:
    """The objective the solver maximises, for any assignment (-inf if a hard rule breaks)."""
    return _objective(options, chosen, rules)


def _objective(options: Sequence[Option], chosen: Sequence[int],
               rules: Sequence[SpreadRule]) -> float:
    state = _State(free={}, used=[Counter() for _ in rules])
    total = 0.0
    for i in chosen:
        g = _gain(options[i], state, rules)
        if g is None:
            return float("-inf")
        total += g
        for k, r in enumerate(rules):
            state.used[k][_domain(options[i], r.level)] += 1
    return total


# -- spread (topology) ---------------------------------------------------------------------

def _universe(options: Sequence[Option], allowed: Sequence[int] | range, rule: SpreadRule
              ) -> set[str]:
    """The domains that could take an instance: those the skew is measured over."""
    return {_domain(options[i], rule.level) for i in allowed}


def _spread_ok(rule: SpreadRule, mine: Counter[str], universe: set[str]) -> bool:
    totals = {d: mine.get(d, 0) + rule.counts.get(d, 0) for d in universe | set(mine)}
    if rule.max_per_domain is not None and any(
            mine.get(d, 0) and n > rule.max_per_domain for d, n in totals.items()):
        return False
    if not universe:
        return True
    low = min(totals.get(d, 0) for d in universe)
    return all(n - low <= rule.max_skew for d, n in totals.items() if mine.get(d, 0))


def _spread(options: Sequence[Option], allowed: Sequence[int],
            free: Mapping[tuple[str, str], int], count: int, rules: Sequence[SpreadRule],
            atomic: bool) -> Assignment | None:
    """Greedy with every pick pulled to the least filled domain of each spread
    rule (so the spread is as even as room allows), then the hard spread
    rules' skew checked over the domains that could take an instance. A
    request that is not atomic keeps what keeps the skew."""
    got = _greedy(options, allowed, free, count, rules, atomic)
    if got is None:
        return None
    chosen = list(got.choices)
    for r in rules:
        if r.kind is not SpreadKind.SPREAD or not r.hard:
            continue
        universe = _universe(options, allowed, r)
        while chosen and not _spread_ok(r, Counter(_domain(options[i], r.level)
                                                   for i in chosen), universe):
            if atomic:
                return None
            # Drop one from the fullest domain until the skew holds.
            per = Counter(_domain(options[i], r.level) for i in chosen)
            worst = max(per, key=lambda d: (per[d] + r.counts.get(d, 0), d))
            chosen.remove(max(i for i in chosen if _domain(options[i], r.level) == worst))
    return Assignment(tuple(chosen), _objective(options, chosen, rules),
                      violated(options, chosen, rules))
