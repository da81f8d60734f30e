"""How far a child zone's clock is from this zone's, from its summaries.

A deadline crosses zones as a Unix time, so that a zone that reads a request
late (it was paused, the message queued) still sees that its caller gave up.
That needs the two clocks to agree. Zones run by other organisations may not:
a child whose clock runs ahead by more than a request's budget would find
every deadline passed on arrival and refuse everything (503). So each
summary a child sends carries its clock (`clock`, read as it answers), and
the parent estimates the offset the way NTP does: a sample taken over a
round trip of r seconds is within r/2 of the truth, and the sample with the
shortest round trip among the recent ones is kept. A deadline sent to the
child is then given in the child's time, when the offset is larger than that
uncertainty plus `TOLERANCE_S`; smaller offsets are left alone (the same
machine, or clocks kept by NTP).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

# Offsets up to this (beyond the sample's own uncertainty) are left alone.
TOLERANCE_S = 0.5
# The recent samples the best is chosen from (one per summary fetch).
SAMPLES = 16
# A sample whose range (offset +- error) misses the best one's by more than
# this says a clock was set (the child's, by NTP or by hand, or this zone's):
# the samples before it are of another clock, and are dropped at once.
STEP_S = 0.1


@dataclass(frozen=True, slots=True)
class Sample:
    offset: float  # their clock minus ours, seconds
    error: float  # at most this far from the truth: half the round trip


class Skew:
    """The clock offset of one child."""

    def __init__(self) -> None:
        self._samples: deque[Sample] = deque(maxlen=SAMPLES)
        self._offset = 0.0  # kept: read for every request sent to the child

    def note(self, their_now: float, sent: float, received: float) -> None:
        """A summary the child stamped `their_now`, asked for at `sent` and
        received at `received` (this zone's clock)."""
        if received < sent:
            return  # this zone's clock was set back meanwhile: no sample
        new = Sample(their_now - (sent + received) / 2, (received - sent) / 2)
        best = self.best()
        if best is not None and abs(new.offset - best.offset) > new.error + best.error + STEP_S:
            self._samples.clear()
        self._samples.append(new)
        best = self.best()
        assert best is not None
        self._offset = (0.0 if abs(best.offset) <= best.error + TOLERANCE_S
                        else best.offset)

    def best(self) -> Sample | None:
        return min(self._samples, key=lambda s: s.error, default=None)

    def offset(self) -> float:
        """What to add to a time of this zone's to give it in the child's: the
        best sample's offset, or 0.0 while that is within the tolerance."""
        return self._offset
