"""What one request at a routing zone knows while it works: its ledger id, its
deadline, what each zone it tried answered; and each child's health.

Kept apart from ``tree.py`` so that ``shared.py`` (the cross-zone split) and
the routes use these without importing the tree.
"""

from __future__ import annotations

import enum
import hashlib
import random
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from strato.store.ledger import Part

# A child that failed is probed again after this long, doubling per failure
# up to MAX_BACKOFF_S: a healed child is used again within seconds.
FIRST_BACKOFF_S = 0.25
MAX_BACKOFF_S = 4.0
# A child that answered something no zone says is not asked again for this
# long, whatever its probes say: it is not trusted.
FAULTY_QUARANTINE_S = 30.0
# A zone keeps this share of its remaining time for itself (to answer, and to
# undo what a late child did); the rest is its children's budget.
KEEP_SHARE = 0.2
MIN_KEEP_S = 0.05


class Result(enum.StrEnum):
    """What asking one zone (or this zone's own providers) came to."""

    PRUNED = "pruned"                       # its summary or metadata cannot fit it
    NO_VALID_PLACEMENT = "no_valid_placement"
    CONFLICT = "conflict"                   # a claim lost a race; definite for this try
    UNHEALTHY = "unhealthy"                 # skipped: failed recently, probe not due
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    IN_DOUBT = "in_doubt"                   # may have acted; cancelled when it answers
    UNAVAILABLE = "unavailable"             # answered 503: part of its subtree is down
    LOOP = "loop"                           # the tree has a cycle there (508 zone_loop)
    FAULTY = "faulty"                       # answered something malformed or inconsistent
    ERROR = "error"                         # any other failure

    @property
    def outage(self) -> bool:
        """Not an answer about capacity: the zone could not be (fully) asked."""
        return self not in (Result.PRUNED, Result.NO_VALID_PLACEMENT, Result.CONFLICT)


@dataclass(slots=True)
class Outcome:
    zone: str
    outcome: Result
    reason: str
    explain: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"zone": self.zone or "(own providers)",
                               "outcome": str(self.outcome), "reason": self.reason}
        if self.explain:
            out["explain"] = self.explain
        return out


def outage(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.outcome.outage]


@dataclass(slots=True)
class Health:
    """A child's health: suspect after one failure, probed with bounded backoff."""

    healthy: bool = True
    failures: int = 0
    last_error: str | None = None
    last_ok: float | None = None
    next_probe: float = 0.0
    quarantined_until: float = 0.0
    # Its last failure was a timeout: likely hung (paused, cut off), so a
    # caller short of time does not wait on it again before its probe.
    hung: bool = False
    # Its last failure was a cycle of the tree through it (its summary
    # covers this zone, or it answered 508 strato.zone_loop).
    looped: bool = False

    def failed(self, why: str, *, faulty: bool = False, timed_out: bool = False,
               loop: bool = False) -> None:
        self.healthy = False
        self.failures += 1
        self.last_error = why
        self.hung = timed_out
        self.looped = loop
        now = time.monotonic()
        if faulty:
            self.quarantined_until = now + FAULTY_QUARANTINE_S
            self.next_probe = self.quarantined_until
            return
        delay = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** min(self.failures - 1, 8))
        self.next_probe = max(self.quarantined_until,
                              now + delay * (0.8 + 0.4 * random.random()))

    def ok(self) -> None:
        if time.monotonic() < self.quarantined_until:
            return  # an answer now does not undo a lie a moment ago
        self.healthy = True
        self.hung = False
        self.looped = False
        self.failures = 0
        self.last_error = None
        self.last_ok = time.monotonic()

    def due(self) -> bool:
        return self.healthy or time.monotonic() >= self.next_probe

    def retry_after(self) -> float:
        return max(0.0, self.next_probe - time.monotonic())

    def as_dict(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"healthy": self.healthy, "failures": self.failures,
                "last_error": self.last_error,
                "seconds_since_ok": None if self.last_ok is None else round(now - self.last_ok,
                                                                            3),
                "next_probe_in": (None if self.healthy
                                  else round(max(0.0, self.next_probe - now), 3))}


@dataclass(slots=True)
class Attempt:
    """One schedule request being worked on at a routing zone."""

    request_id: str  # as this zone's ledger knows it
    deadline: float  # unix time
    # Whether its id is reserved in the ledger yet. Until then its id is held
    # in the zone's memory (`ZoneTree._open`), with the parts asked of
    # children so far (`pending`): the answer's commit writes them all.
    reserved: bool = False
    pending: list[Part] = field(default_factory=list)
    # A cancel of its request came while it was held in memory: it asks for
    # nothing more, and its answer is not kept.
    cancelled: bool = False
    # Its parts held in memory are being undone (its id goes when that ends).
    dropping: bool = False
    # This attempt among the tries of one request id at this zone: it owns the
    # reservation, and only its own parts and holds are its to undo.
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    # Children that timed out on this attempt (likely hung): its undo does not
    # wait on them again; what they may hold is cancelled there later.
    hung: set[str] = field(default_factory=set)
    # Its id was made up here (the client sent none): no ledger can know it,
    # so holding it reads nothing.
    fresh: bool = False

    def remaining(self) -> float:
        return self.deadline - time.time()

    def child_deadline(self, cap: float, share: float = 1.0) -> float:
        """The deadline a child gets: at most `cap` seconds from now, less than
        ours by the share this zone keeps to answer and undo, and only `share`
        of the rest when other zones may have to be asked after it (a hung
        child must not use up the time of its siblings)."""
        now = time.time()
        left = self.deadline - now
        keep = max(MIN_KEEP_S, KEEP_SHARE * left)
        return now + max(0.0, min(cap, (left - keep) * share))


_PART_TAIL = re.compile(r"@([^@#/]{1,255})#[0-9a-f]{8}$")


def part_zone(request_id: str) -> str | None:
    """The zone that made `request_id`, if it is a part id as `part_id` makes
    them (a parent's request to its child, or a zone's own local part)."""
    found = _PART_TAIL.search(request_id)
    return found.group(1) if found else None


def part_origin(request_id: str) -> str:
    """The id of the request a part id was made for (its tries share it):
    `request_id` without the tail `part_id` adds; as it is if it has none."""
    found = _PART_TAIL.search(request_id)
    return request_id[:found.start()] if found else request_id


def part_id(request_id: str, zone: str) -> str:
    """A fresh id for one part of `request_id` that this zone asks of another
    (or of its own providers): unique per try, so a retry never collides with
    a part that was cancelled, and within the 255 characters an id may have."""
    tail = f"@{zone}#{secrets.token_hex(4)}"
    if len(request_id) + len(tail) <= 255:
        return request_id + tail
    return f"h-{hashlib.sha256(request_id.encode()).hexdigest()}{tail}"[:255]
