"""A lean load generator's HTTP client for the benchmarks."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


class KeepAlive:
    """One keep-alive HTTP/1.1 connection (the standard library's): a load
    generator that costs ~0.2 CPU-ms a call where httpx cost ~1.2, so on a
    2-core machine the clients leave the server its core."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                               timeout=300)
        self.headers = {**(HEADERS if headers is None else headers),
                        "content-type": "application/json"}

    def call(self, method: str, path: str, payload: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """(status, the JSON answer or None)."""
        self.conn.request(method, path,
                          body=None if payload is None else json.dumps(payload),
                          headers=self.headers if headers is None
                          else {**self.headers, **headers})
        r = self.conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None

    def get(self, path: str) -> tuple[int, Any]:
        return self.call("GET", path)

    def post(self, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        return self.call("POST", path, payload)

    def delete(self, path: str) -> int:
        return self.call("DELETE", path)[0]

    def close(self) -> None:
        self.conn.close()
