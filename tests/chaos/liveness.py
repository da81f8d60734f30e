"""Liveness figures from the same history (reported; the short test asserts
them loosely, the long run prints them against the 5 s targets).

* heal_to_use: for each healed fault, seconds from the heal (restart
  answered, SIGCONT sent, link up) until the root's first 200 that places a
  consumer in the healed zone's subtree (for the root: its next placement
  anywhere, as every zone is in its subtree). A zone never used again before
  the workload ended counts as (end - heal) and is flagged censored; so is
  one struck again (a fault on it or above it) before it was used, its clock
  stopped at that fault's start: the time after it belongs to the next heal.
  A heal in the last 5 s of the workload is not measured.
* longest_gap: the longest time with no successful placement while at least
  half the cells were up (no fault on them or above them) and had room (seen
  directly by the monitor: a small request fits). Time in which that
  condition fails does not count, nor does it reset the gap: only a success
  resets it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tests.chaos.cluster import Cluster
from tests.chaos.history import History

STEP = 0.05
# A heal this close to the end of the workload cannot show a 5 s target met.
TOO_LATE = 5.0


@dataclass
class Liveness:
    # (kind, zone, seconds, why censored: "" when it was used again)
    heal_to_use: list[tuple[str, str, float, str]] = field(default_factory=list)
    unmeasured: list[tuple[str, str]] = field(default_factory=list)  # healed too late
    longest_gap: float = 0.0
    gap_at: float = 0.0

    @property
    def median_heal(self) -> float | None:
        values = [d for _, _, d, _ in self.heal_to_use]
        return statistics.median(values) if values else None

    @property
    def max_heal(self) -> float | None:
        values = [d for _, _, d, _ in self.heal_to_use]
        return max(values) if values else None

    def report(self) -> str:
        lines = [f"  {kind:<10} {zone:<6} "
                 + (f"not used in {d:5.1f}s ({censored})" if censored
                    else f"used again after {d:5.1f}s")
                 for kind, zone, d, censored in self.heal_to_use]
        lines += [f"  {kind:<10} {zone:<6} healed too near the end to measure"
                  for kind, zone in self.unmeasured]
        med = self.median_heal
        lines.append(f"  heal->use median {'-' if med is None else f'{med:.1f}s'}; longest "
                     f"gap without a placement {self.longest_gap:.1f}s (ending at "
                     f"t={self.gap_at:.1f})")
        return "\n".join(lines)


def measure(cluster: Cluster, history: History) -> Liveness:
    # Up to when the clients were told to stop: the last answers trickle in
    # with no new requests behind them.
    end = history.stop_at or history.end or history.now()
    successes = sorted(
        (a.done, p["zone"])
        for r in history.requests.values() for a in r.oks()
        if a.done is not None and a.answer and not a.answer.get("replayed")
        for p in a.answer["placements"])
    out = Liveness()
    for ev in history.events:
        if ev.healed is None or ev.healed > end - TOO_LATE:
            out.unmeasured.append((ev.kind, ev.zone))
            continue
        used = next((t for t, path in successes
                     if t >= ev.healed and ev.zone in path.split("/")), None)
        above = set(cluster.ancestors(ev.zone))
        again = min((e.start for e in history.events
                     if e.start >= ev.healed and e.zone in above), default=None)
        if again is not None and (used is None or again < used):
            out.heal_to_use.append((ev.kind, ev.zone, again - ev.healed,
                                    f"struck again at t={again:.1f}"))
        elif used is None:
            out.heal_to_use.append((ev.kind, ev.zone, end - ev.healed, "never, run ended"))
        else:
            out.heal_to_use.append((ev.kind, ev.zone, used - ev.healed, ""))
    out.longest_gap, out.gap_at = _longest_gap(cluster, history, [t for t, _ in successes],
                                               end)
    return out


def _longest_gap(cluster: Cluster, history: History, successes: list[float],
                 end: float) -> tuple[float, float]:
    cells = cluster.cells
    room = sorted(history.room, key=lambda s: s.at)
    last_room: dict[str, bool] = {}
    ri = si = 0
    gap = best = best_at = 0.0
    t = 0.0
    while t < end:
        t += STEP
        while ri < len(room) and room[ri].at <= t:
            sample = room[ri]
            if sample.room is not None:
                last_room[sample.cell] = sample.room
            ri += 1
        hit = False
        while si < len(successes) and successes[si] <= t:
            hit = True
            si += 1
        if hit:
            gap = 0.0
            continue
        faulted = {ev.zone for ev in history.events
                   if ev.start <= t and (ev.healed is None or t < ev.healed)}
        ok = [c for c in cells if last_room.get(c, False)
              and not faulted & set(cluster.ancestors(c))]
        if 2 * len(ok) >= len(cells):
            gap += STEP
            if gap > best:
                best, best_at = gap, t
    return best, best_at
