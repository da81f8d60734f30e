"""What a zone's parts report as they work: the seam between them and metrics.

The store, the engine, the scheduler and the zone tree each hold an
`Observer` (by default `NOBODY`, which does nothing); the app gives them its
`api.metrics.Metrics`, which turns the reports into Prometheus metrics. So
the parts do not import the API, and a part built alone (tests, the
simulator, benchmarks) reports to nobody.
"""

from __future__ import annotations


class Observer:
    def planned(self, seconds: float) -> None:
        """A plan on this zone's own providers took `seconds`."""

    def claimed(self, seconds: float) -> None:
        """A claim (its transaction included) took `seconds`."""

    def lost_race(self) -> None:
        """A claim found its plan taken by another writer: planned again."""

    def committed(self, seconds: float) -> None:
        """A write transaction's commit took `seconds`."""

    def synced(self, seconds: float) -> None:
        """An fsync of the database's write-ahead log took `seconds` (SQLite,
        synchronous FULL: commits wait for it; from the syncing threads)."""

    def refreshed(self, seconds: float) -> None:
        """The engine's index caught up with the store in `seconds`."""

    def zone_called(self, child: str, seconds: float, outcome: str) -> None:
        """A call to child zone `child` ended: ok, error (it answered 5xx),
        loop (508 strato.zone_loop: the tree has a cycle), unreachable or
        malformed."""


NOBODY = Observer()
