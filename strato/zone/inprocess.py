"""A whole zone tree in one process, wired through the in-process transport.

Each zone is a real Strato app with its own database (an SQLite file in a
directory), exactly as in production; only the wire is replaced. Used by the
tree tests and the simulator, which can host hundreds of zones this way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database
from strato.store.migrate import upgrade
from strato.zone.transport import HEADERS, InProcessTransport
from strato.zone.tree import ZoneTree


@dataclass(frozen=True, slots=True)
class ZoneSpec:
    name: str
    parent: str | None = None
    location_prefix: str | None = None
    tags: tuple[str, ...] = ()


@dataclass
class InProcessTree:
    """Zones by name; `client(name)` talks to one as a user would."""

    root_dir: Path
    transport: InProcessTransport = field(default_factory=InProcessTransport)
    apps: dict[str, FastAPI] = field(default_factory=dict)
    dbs: dict[str, Database] = field(default_factory=dict)
    specs: dict[str, ZoneSpec] = field(default_factory=dict)
    _clients: dict[str, httpx.AsyncClient] = field(default_factory=dict)

    @staticmethod
    def url(name: str) -> str:
        return f"inproc://{name}"

    def add(self, spec: ZoneSpec, *, template: Path | None = None,
            settings: Mapping[str, Any] | None = None) -> FastAPI:
        path = self.root_dir / f"{spec.name}.db"
        if template is not None:
            path.write_bytes(template.read_bytes())
        db = Database(f"sqlite:///{path}", sqlite_synchronous="NORMAL")
        if template is None:
            upgrade(db)
        cfg = Settings(db_url=db.url, zone_name=spec.name,
                       location_prefix=spec.location_prefix, zone_tags=spec.tags,
                       **dict(settings or {}))
        app = create_app(cfg, db=db, migrate=False, transport=self.transport)
        self.transport.register(self.url(spec.name), app)
        self.apps[spec.name] = app
        self.dbs[spec.name] = db
        self.specs[spec.name] = spec
        return app

    def client(self, name: str) -> httpx.AsyncClient:
        c = self._clients.get(name)
        if c is None:
            c = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.apps[name]),
                                  base_url=f"http://{name}",
                                  headers={**HEADERS, "x-auth-token": "admin"}, timeout=60)
            self._clients[name] = c
        return c

    async def link(self) -> None:
        """Register every zone with its parent (what `--parent` does at start-up)."""
        for spec in self.specs.values():
            if spec.parent is None:
                continue
            r = await self.client(spec.parent).post("/strato/v1/children", json={
                "name": spec.name, "url": self.url(spec.name),
                "location_prefix": spec.location_prefix, "tags": list(spec.tags)})
            r.raise_for_status()

    def kill(self, name: str) -> None:
        """The zone stops answering (as if its process died or the network split)."""
        self.transport.down.add(self.url(name))

    def revive(self, name: str) -> None:
        self.transport.down.discard(self.url(name))
        self.transport.lose_answers = {k for k in self.transport.lose_answers
                                       if k.split()[0] != self.url(name)}
        self.transport.delays = {k: v for k, v in self.transport.delays.items()
                                 if k.split()[0] != self.url(name)}

    def lose_answers(self, name: str, path: str | None = None) -> None:
        """Calls to the zone (or to one of its routes) run, but their answers are
        lost: a request in doubt, as when a process dies after its commit."""
        self.transport.lose_answers.add(self.url(name) + (f" {path}" if path else ""))

    def delay(self, name: str, seconds: float, path: str | None = None) -> None:
        """Calls to the zone (or one of its routes) reach it `seconds` late: a
        paused or cut-off zone that resumes; its caller may have given up."""
        self.transport.delays[self.url(name) + (f" {path}" if path else "")] = seconds

    def zone_tree(self, name: str) -> ZoneTree:
        tree: ZoneTree = self.apps[name].state.tree
        return tree

    async def aclose(self) -> None:
        for c in self._clients.values():
            await c.aclose()
        await self.transport.aclose()
        for app in self.apps.values():
            app.state.engine.close()
        for db in self.dbs.values():
            db.dispose()


def build(root_dir: Path, zones: Iterable[ZoneSpec], **kw: Any) -> InProcessTree:
    """Every zone of `zones`, each on its own SQLite file (migrated once, then copied)."""
    tree = InProcessTree(root_dir=root_dir)
    template = root_dir / "_template.db"
    src = Database(f"sqlite:///{template}")
    upgrade(src)
    src.dispose()
    for spec in zones:
        tree.add(spec, template=template, **kw)
    return tree


def run(coro: Any) -> Any:
    return asyncio.run(coro)
