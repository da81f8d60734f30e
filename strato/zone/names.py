"""Custom resource classes and traits: one registry for the tree, both ways.

A name made at a zone with children is made in every child too
(`api/below.py`, `_registry`). A name made in a child (a cell's operator, or
an Ironic or Cyborg service that talks to its cell) comes up in the child's
summaries, whose `classes` and `traits` list what its providers have: the
parent makes it in its own registry, since it checks the names of every
request (`GET /allocation_candidates?resources=CUSTOM_X:1`) against its own
before it asks its children. Only `CUSTOM_` names are learned this way (a
standard name is in every zone's registry); a name a child stops listing is
not removed (names are never in the way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.model.names import MAX_NAME_LENGTH, is_custom_name
from strato.store import resource_classes, traits
from strato.store.db import Database

log = logging.getLogger("strato.zone")


# At most this many new names are made from one summary (the rest at the next
# ones), this many in one transaction (the write lock is short), and this
# many in all by one process: a child that lists names without end (a bug, or
# another organisation's zone) cannot flood this zone's registry or hold its
# writes.
PER_SUMMARY = 200
PER_TRANSACTION = 50
MAX_LEARNED = 10_000


class TreeNames:
    """The custom names this zone has made (or found) in its own registry."""

    def __init__(self) -> None:
        self._classes: set[str] = set()
        self._traits: set[str] = set()
        self._pending: tuple[set[str], set[str]] = (set(), set())
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[bool] | None = None
        self._full = False

    def note(self, summary: dict[str, Any], db: Database) -> None:
        """A child's summary: make the custom names it lists that are new here
        (in the background)."""
        classes = _custom(summary.get("classes") or ()) - self._classes
        found = _custom(summary.get("traits") or ()) - self._traits
        if not classes and not found:
            return
        room = min(PER_SUMMARY, MAX_LEARNED - self.size() - sum(map(len, self._pending)))
        if room <= 0:
            if not self._full:
                self._full = True
                log.warning("child zones list more than %d custom class and trait names this "
                            "zone does not have: no more are made here (create them with "
                            "PUT /traits/{name} or /resource_classes/{name})", MAX_LEARNED)
            return
        self._pending[0].update(sorted(classes)[:room])
        self._pending[1].update(sorted(found)[:max(0, room - len(classes))])
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.make(db))

    def size(self) -> int:
        return len(self._classes) + len(self._traits)

    async def settle(self, db: Database) -> None:
        """Until every name noted so far is made."""
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait([task])
        await self.make(db)

    async def make(self, db: Database) -> bool:
        """Make the names noted so far; whether any was new to the registry."""
        async with self._lock:
            classes, found = self._pending
            if not classes and not found:
                return False
            self._pending = (set(), set())
            try:
                made = await run_in_threadpool(_ensure, db, sorted(classes), sorted(found))
            except Exception:  # a database outage: noted again at the next summary
                log.exception("could not make the custom names of a child zone here")
                return False
            self._classes.update(classes)
            self._traits.update(found)
            if made:
                log.info("made %s, listed by a child zone, in this zone's registry",
                         ", ".join(made[:10]) + (" ..." if len(made) > 10 else ""))
            return bool(made)


def _custom(names: Iterable[Any]) -> set[str]:
    return {n for n in names
            if isinstance(n, str) and len(n) <= MAX_NAME_LENGTH and is_custom_name(n)}


def _ensure(db: Database, classes: list[str], found: list[str]) -> list[str]:
    made: list[str] = []
    work = [(True, n) for n in classes] + [(False, n) for n in found]
    for i in range(0, len(work), PER_TRANSACTION):
        with db.write() as conn:
            for is_class, name in work[i:i + PER_TRANSACTION]:
                try:
                    if (resource_classes.ensure_class(conn, name) if is_class
                            else traits.ensure_trait(conn, name))[1]:
                        made.append(name)
                except errors.StratoError as exc:
                    log.warning("a child zone lists %s %r, not made here: %s",
                                "resource class" if is_class else "trait", name, exc.detail)
    return made
