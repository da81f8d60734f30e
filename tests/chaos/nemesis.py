"""The nemesis: one fault at a time, seeded, each healed before the next.

Faults: kill -9 a cell, a mid or the root and restart it on the same port
and database; SIGSTOP a mid or a cell then SIGCONT it; cut the namespaced
cell's link and bring it back; restart a cell with its wall clock 10-25 s
off (libfaketime; left out where it is not installed) and, some seconds
later, with the true time again. One at a time keeps each heal time
unambiguous for the liveness figures; the workload runs throughout (while
the root is down its clients get connection errors: attempts without an
answer, retried with the same request id).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from tests.chaos.cluster import FAKETIME_LIB, Cluster
from tests.chaos.history import Event, History

KINDS = ("kill_cell", "kill_mid", "kill_root", "pause_mid", "pause_cell", "partition",
         *(("skew_cell",) if FAKETIME_LIB.exists() else ()))


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, *, seed: int, duration: float,
                 kinds: tuple[str, ...] = KINDS, first_after: float = 3.0,
                 gap: tuple[float, float] = (3.0, 6.0), shuffle: bool = True,
                 log: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = random.Random(f"{seed}-nemesis")
        self.duration = duration
        self.kinds = kinds
        self.first_after = first_after
        self.gap = gap
        self.shuffle = shuffle
        self.log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop starting faults, heal the one in progress, wait for the thread."""
        self._stop.set()
        self._thread.join(90)

    def _run(self) -> None:
        try:
            begin = time.monotonic()
            if self._stop.wait(self.first_after):
                return
            # Every kind once, in a seeded order (or as given), then seeded
            # picks: a short run still sees each fault.
            order = list(self.kinds)
            if self.shuffle:
                self.rng.shuffle(order)
            while not self._stop.is_set():
                left = self.duration - (time.monotonic() - begin)
                if left < 8.0:
                    return
                kind = order.pop(0) if order else self.rng.choice(self.kinds)
                self._fault(kind)
                if self._stop.wait(self.rng.uniform(*self.gap)):
                    return
        except BaseException as exc:  # reported by the runner, never swallowed
            self.error = exc
            self.log(f"nemesis failed: {exc!r}")

    def _fault(self, kind: str) -> None:
        rng = self.rng
        cl = self.cluster
        if kind in ("kill_cell", "pause_cell"):
            zone = rng.choice(cl.cells)
        elif kind == "skew_cell":
            # Not the namespaced cell: `ip netns exec` would run under the
            # fake clock too.
            zone = rng.choice([c for c in cl.cells if c != cl.partitioned_cell])
        elif kind == "kill_root":
            zone = cl.root.name
        elif kind in ("kill_mid", "pause_mid"):
            zone = rng.choice(["mid1", "mid2"])
        else:
            zone = cl.partitioned_cell
        z = cl.zones[zone]
        ev = Event(kind, zone, self.history.now())
        self.history.add_event(ev)
        if kind == "skew_cell":
            skew = f"{rng.choice('+-')}{rng.randint(10, 25)}s"
            ev.note = f"clock {skew}"
            z.kill()
            z.clock_skew = skew
            try:
                _restart(z.start)
                self._stop.wait(rng.uniform(5.0, 9.0))
                z.kill()
            finally:
                z.clock_skew = None
            _restart(z.start)
        elif kind.startswith("kill"):
            z.kill()
            self._stop.wait(rng.uniform(1.0, 3.0))
            _restart(z.start)
        elif kind.startswith("pause"):
            z.pause()
            self._stop.wait(rng.uniform(2.0, 5.0))
            z.resume()
        elif cl.netns is not None:
            cl.netns.partition()
            self._stop.wait(rng.uniform(3.0, 6.0))
            cl.netns.heal()
        else:
            ev.note = "SIGSTOP instead of a partition (no netns)"
            z.pause()
            self._stop.wait(rng.uniform(3.0, 6.0))
            z.resume()
        ev.healed = self.history.now()
        self.log(f"nemesis: {ev.line()}")


def _restart(start: Callable[[], object], attempts: int = 3) -> None:
    """The port may linger briefly after kill -9; try again a few times."""
    for n in range(attempts):
        try:
            start()
            return
        except RuntimeError:
            if n == attempts - 1:
                raise
            time.sleep(1.0)
