"""The last decisions of one zone process, for the web view (`GET /ui`).

A bounded ring (`SIZE` entries, each capped in size): what was asked, what
was placed where, or why not. In memory only, per process: it is a window
for an operator, not a record (the ledger and the allocations are that).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

SIZE = 50
MAX_PLACEMENTS = 8   # placements kept per decision (the count is kept whole)
MAX_TEXT = 400       # characters of a refusal's detail, and of each explain line
MAX_LINES = 12       # lines of explain kept per refusal


@dataclass(frozen=True, slots=True)
class Decision:
    at: float
    request_id: str | None
    result: str
    consumers: int
    seconds: float
    placements: tuple[tuple[str, str, str], ...] = ()   # (consumer, host, zone path)
    placed: int = 0
    detail: str | None = None
    explain: tuple[str, ...] = field(default_factory=tuple)


class Recent:
    def __init__(self, size: int = SIZE) -> None:
        self._ring: deque[Decision] = deque(maxlen=size)

    def placed(self, request_id: str | None, consumers: int, answer: dict[str, Any],
               seconds: float) -> None:
        ps = answer.get("placements") or []
        self._ring.append(Decision(
            at=time.time(), request_id=_short(request_id), result="placed",
            consumers=consumers, seconds=seconds, placed=len(ps),
            placements=tuple((_short(p.get("consumer_uuid")) or "", _short(p.get("provider"))
                              or "", _short(p.get("zone")) or "")
                             for p in ps[:MAX_PLACEMENTS])))

    def refused(self, request_id: str | None, consumers: int, result: str, detail: str,
                explain: Any, seconds: float) -> None:
        self._ring.append(Decision(
            at=time.time(), request_id=_short(request_id), result=result,
            consumers=consumers, seconds=seconds, detail=detail[:MAX_TEXT],
            explain=tuple(explain_lines(explain))))

    def latest(self) -> list[Decision]:
        return list(reversed(self._ring))


def _short(s: Any) -> str | None:
    return None if s is None else str(s)[:200]


def explain_lines(explain: Any) -> list[str]:
    """An explain body as a few readable lines: per group of one zone, what
    each stage removed; per child of a routing zone, its outcome and why."""
    out: list[str] = []
    if not isinstance(explain, dict):
        return out
    for g in explain.get("groups") or []:
        if not isinstance(g, dict):
            continue
        cuts = ", ".join(f"{r.get('reason', '?')} ({r.get('count', '?')})"
                         for r in g.get("removed") or [] if isinstance(r, dict))
        out.append(f"group{g.get('suffix') or ''}: {g.get('providers', '?')} providers, "
                   f"{g.get('remaining', '?')} left" + (f"; removed: {cuts}" if cuts else ""))
    for c in explain.get("children") or []:
        if isinstance(c, dict):
            outcome, reason = str(c.get("outcome", "?")), str(c.get("reason") or "")
            said = reason if reason.startswith(outcome) else f"{outcome}: {reason}"
            out.append(f"{c.get('zone', '?')}: {said}")
    if not out and isinstance(explain.get("summary"), str):
        out.append(explain["summary"])
    return [line[:MAX_TEXT] for line in out[:MAX_LINES]]
