"""The audit log: every write a zone is asked for, who asked and what came of it.

One JSON object per line (`--audit-log PATH`, or `-` for standard error):
time, zone, request ids, method, path and route template, the caller (user,
project, roles, system scope, address), the status answered and how long it
took. A write is any POST, PUT, PATCH or DELETE, refused ones included (a 401
names no user; a 403 names who was refused). Lines are written by a thread
of their own (a queue in between), never on the event loop; the file is
made readable by its owner only, and reopened when logrotate moves it.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import os
import queue
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from strato.api import routename
from strato.api.auth import CONTEXT_KEY, Context
from strato.api.responses import REQUEST_ID_KEY, StatusOf

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_listeners: dict[str, tuple[logging.Logger, logging.handlers.QueueListener]] = {}


def open_log(destination: str) -> logging.Logger:
    """A logger that writes its lines to `destination` from a thread of its
    own (one per destination in a process)."""
    found = _listeners.get(destination)
    if found is not None:
        return found[0]
    handler: logging.Handler
    if destination == "-":
        handler = logging.StreamHandler()
    else:
        path = os.path.abspath(os.path.expanduser(destination))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        handler = logging.handlers.WatchedFileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(q, handler)
    listener.start()
    atexit.register(listener.stop)  # what is queued is written at exit
    logger = logging.getLogger(f"strato.audit.{len(_listeners)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(logging.handlers.QueueHandler(q))
    _listeners[destination] = (logger, listener)
    return logger


class AuditLog:
    """ASGI middleware (inside StratoMiddleware: the caller is known)."""

    def __init__(self, app: ASGIApp, destination: str, zone: str) -> None:
        self.app = app
        self.log = open_log(destination)
        self.zone = zone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITES:
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        answered = StatusOf(send)
        try:
            await self.app(scope, receive, answered)
        finally:
            self.log.info(line(scope, answered.status, time.perf_counter() - start,
                               self.zone))


def line(scope: Scope, status: int, seconds: float, zone: str) -> str:
    ctx = scope.get(CONTEXT_KEY)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1", "replace")
               for k, v in scope.get("headers", []) if k.lower() == b"x-openstack-request-id"}
    client = scope.get("client")
    entry: dict[str, Any] = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "zone": zone,
        "request_id": scope.get(REQUEST_ID_KEY),
        "global_request_id": headers.get("x-openstack-request-id", "")[:64] or None,
        "method": scope["method"],
        "path": str(scope.get("path", ""))[:1024],
        "route": routename.template(scope),
        "user": ctx.user_id if isinstance(ctx, Context) else None,
        "project": ctx.project_id if isinstance(ctx, Context) else None,
        "roles": sorted(ctx.roles) if isinstance(ctx, Context) else [],
        "system_scope": ctx.system_scope if isinstance(ctx, Context) else False,
        "remote": f"{client[0]}:{client[1]}" if client else None,
        "status": status,
        "outcome": "done" if status < 400 else "refused" if status < 500 else "failed",
        "ms": round(seconds * 1000, 2),
    }
    return orjson.dumps(entry).decode()
