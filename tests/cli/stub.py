"""A stand-in HTTP server for CLI tests: canned answers, every request recorded.

For what a real zone does not do on demand (a child that did not answer, a
server that is not a Strato zone at all) and for checking where a command
sent its request, without starting a zone process.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Canned:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Canned:
        return Canned(status, json.dumps(data).encode(),
                      {"content-type": "application/json", **(headers or {})})


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # with its query
    headers: dict[str, str]


class Stub:
    """`with Stub({"GET /x": Canned.json({...})}) as s:` serves at s.url; a
    request not in the table gets `default`; s.seen lists the requests."""

    def __init__(self, routes: dict[str, Canned] | None = None,
                 default: Canned = Canned(404)) -> None:
        self.routes = dict(routes or {})
        self.default = default
        self.seen: list[Seen] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                stub.seen.append(Seen(self.command, self.path,
                                      {k.lower(): v for k, v in self.headers.items()}))
                path = self.path.split("?", 1)[0]
                canned = stub.routes.get(f"{self.command} {path}", stub.default)
                self.send_response(canned.status)
                for k, v in canned.headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Stub:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]
