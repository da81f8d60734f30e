"""The route template a request took (`/resource_providers/{uuid}`), for
metrics labels and the audit log.

The router puts the route in the scope; requests answered before it (the
lean paths of api/fast.py, and a zone's routing to its children in
api/below.py) are matched here against the app's routes, once per method
and path while the cache has room (bounded: paths hold uuids)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.routing import Match
from starlette.types import Scope

CACHE_MAX = 4096
_cache: dict[tuple[str, str], str | None] = {}


@dataclass(frozen=True)
class Named:
    """What the lean paths put in the scope, as the router puts its route."""

    path: str


def template(scope: Scope) -> str | None:
    """The template of the route `scope` takes; None for a path no route has."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    key = (str(scope.get("method", "")), str(scope.get("path", "")))
    if key in _cache:
        return _cache[key]
    found = None
    for route in getattr(getattr(scope.get("app"), "router", None), "routes", ()):
        try:
            match, _ = route.matches({"type": "http", "method": key[0], "path": key[1],
                                      "root_path": ""})
        except Exception:  # a route that cannot say (a mount of another app)
            continue
        if match is not Match.NONE:  # (PARTIAL: the path's route, another method)
            found = getattr(route, "path", None)
            break
    if len(_cache) >= CACHE_MAX:
        _cache.clear()
    _cache[key] = found
    return found
