"""What the clients sent and heard, and what the nemesis did, with times.

Times are seconds since the history began (time.monotonic based), so the
checker and the liveness figures can line answers up with faults.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NO_VALID = "strato.no_valid_placement"
CANCELLED = "strato.request_cancelled"


@dataclass
class Attempt:
    """One HTTP call of one schedule request; status None: no answer (timeout,
    connection error) so its outcome is unknown."""

    client: str
    number: int
    sent: float
    timeout: float
    done: float | None = None
    status: int | None = None
    code: str | None = None
    answer: dict[str, Any] | None = None
    error: str | None = None

    @property
    def outcome(self) -> str:
        """ok (200), refused (409 no_valid_placement: a definite no), cancelled
        (409 request_cancelled: an admin cancelled the request id, whatever it
        placed is undone), or unknown (anything else: 503 zone_unavailable, 409
        request_in_progress, other 409s, 5xx, no answer): the request may or
        may not have taken effect."""
        if self.status == 200:
            return "ok"
        if self.status == 409 and self.code == NO_VALID:
            return "refused"
        if self.status == 409 and self.code == CANCELLED:
            return "cancelled"
        return "unknown"

    def line(self, request_id: str) -> str:
        if self.status is None:
            got = f"no answer ({self.error})"
        elif self.status == 200 and self.answer is not None:
            places = ", ".join(
                f"{p['consumer_uuid'][:8]}@{p['zone']}"
                + (f"+{p['shared_zone']}" if p.get("shared_zone") else "")
                for p in self.answer.get("placements", []))
            replay = " replayed" if self.answer.get("replayed") else ""
            got = f"200{replay} [{places}]"
        else:
            got = f"{self.status} {self.code or ''}".rstrip()
        end = "?" if self.done is None else f"{self.done:.3f}"
        return (f"  {self.sent:8.3f}..{end:>8} {self.client:>8} {request_id} "
                f"#{self.number} (timeout {self.timeout:.2f}s) -> {got}")


@dataclass
class Request:
    request_id: str
    kind: str
    body: dict[str, Any]
    attempts: list[Attempt] = field(default_factory=list)
    cancels: list[Cancel] = field(default_factory=list)

    @property
    def consumers(self) -> list[str]:
        return list(self.body["consumers"])

    def oks(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome == "ok"]

    def resolved(self) -> bool:
        return any(a.outcome != "unknown" for a in self.attempts)

    def cancelled_at(self) -> float | None:
        """When the first cancel that was carried out (200) ended; None if none was."""
        done = [c.done for c in self.cancels if c.status == 200 and c.done is not None]
        return min(done) if done else None

    def lines(self) -> list[str]:
        events: list[tuple[float, str]] = [(a.sent, a.line(self.request_id))
                                           for a in self.attempts]
        events += [(c.sent, c.line()) for c in self.cancels]
        return [line for _, line in sorted(events, key=lambda e: e[0])]


@dataclass
class Cancel:
    """An admin cancelled a request by its id at the root (POST
    /strato/v1/requests/cancel), racing the request's own attempts; one record
    per call. status None: no answer."""

    request_id: str
    sent: float
    done: float | None = None
    status: int | None = None
    error: str | None = None

    def line(self) -> str:
        got = f"{self.status}" if self.status is not None else f"no answer ({self.error})"
        return (f"  {self.sent:8.3f}..{self.done or 0:8.3f}   cancel {self.request_id} "
                f"-> {got}")


@dataclass
class Release:
    """A client released an acknowledged consumer: DELETE /allocations/{consumer}
    at each zone that holds a part; per zone: deleted (204), absent (404) or
    failed (no definite answer)."""

    consumer: str
    request_id: str
    sent: float
    zones: dict[str, str] = field(default_factory=dict)
    done: float | None = None

    def line(self) -> str:
        return (f"  {self.sent:8.3f}..{self.done or 0:8.3f}  release {self.consumer} "
                f"({self.request_id}): {self.zones}")


@dataclass
class Event:
    """A nemesis fault: `healed` is when the zone was back (restart answered,
    SIGCONT sent, link up); None while it lasts."""

    kind: str
    zone: str
    start: float
    healed: float | None = None
    note: str = ""

    def line(self) -> str:
        healed = "-" if self.healed is None else f"{self.healed:.2f}"
        return f"{self.kind:<10} {self.zone:<6} {self.start:7.2f} -> {healed:>7} {self.note}"


@dataclass
class RoomSample:
    """A cell seen directly (not through the tree): whether it could take a
    small request, for the liveness figure."""

    at: float
    cell: str
    room: bool | None  # None: it did not answer


class History:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self.requests: dict[str, Request] = {}
        self.releases: list[Release] = []
        self.events: list[Event] = []
        self.room: list[RoomSample] = []
        self.stop_at: float | None = None  # when the clients were told to stop
        self.end: float | None = None  # when the last client ended

    def now(self) -> float:
        return time.monotonic() - self.t0

    def request(self, request_id: str, kind: str, body: dict[str, Any]) -> Request:
        with self._lock:
            req = self.requests.get(request_id)
            if req is None:
                req = self.requests[request_id] = Request(request_id, kind, body)
            return req

    def add_attempt(self, req: Request, attempt: Attempt) -> None:
        with self._lock:
            req.attempts.append(attempt)

    def add_cancel(self, req: Request, cancel: Cancel) -> None:
        with self._lock:
            req.cancels.append(cancel)

    def add_release(self, rel: Release) -> None:
        with self._lock:
            self.releases.append(rel)

    def add_event(self, ev: Event) -> None:
        with self._lock:
            self.events.append(ev)

    def add_room(self, sample: RoomSample) -> None:
        with self._lock:
            self.room.append(sample)

    def consumer_index(self) -> dict[str, Request]:
        return {c: r for r in self.requests.values() for c in r.consumers}

    def releases_of(self, consumer: str) -> list[Release]:
        return [r for r in self.releases if r.consumer == consumer]

    def dump(self, path: Path) -> None:
        """The whole history as JSON lines, for reading a failure afterwards."""
        with path.open("w") as f:
            for req in self.requests.values():
                f.write(json.dumps({"type": "request", **asdict(req)}) + "\n")
            for rel in self.releases:
                f.write(json.dumps({"type": "release", **asdict(rel)}) + "\n")
            for ev in self.events:
                f.write(json.dumps({"type": "event", **asdict(ev)}) + "\n")
