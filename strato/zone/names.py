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


class TreeNames:
    """The custom names this zone has made (or found) in its own registry."""

    def __init__(self) -> None:
        self._classes: set[str] = set()
        self._traits: set[str] = set()
        self._pending: tuple[set[str], set[str]] = (set(), set())
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[bool] | None = None

    def note(self, summary: dict[str, Any], db: Database) -> None:
        """A child's summary: make the custom names it lists that are new here
        (in the background)."""
        classes = _custom(summary.get("classes") or ()) - self._classes
        found = _custom(summary.get("traits") or ()) - self._traits
        if not classes and not found:
            return
        self._pending[0].update(classes)
        self._pending[1].update(found)
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
    with db.write() as conn:
        for name in classes:
            try:
                if resource_classes.ensure_class(conn, name)[1]:
                    made.append(name)
            except errors.StratoError as exc:
                log.warning("a child zone lists resource class %r, not made here: %s",
                            name, exc.detail)
        for name in found:
            try:
                if traits.ensure_trait(conn, name)[1]:
                    made.append(name)
            except errors.StratoError as exc:
                log.warning("a child zone lists trait %r, not made here: %s", name, exc.detail)
    return made
