"""`/openapi.json` as the API answers: Placement's error codes and bodies.

FastAPI documents a 422 with its own validation body on every route; a zone
never answers 422 (a body that does not validate is Placement's 400, with
Placement's JSON error body). This replaces it with what a client gets: the
error body (`Errors`) for any 4XX, 500 and 503, and the success codes the
Placement routes really use (several answer 204, or 201, rather than the
200 their decorator names)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERRORS: dict[str, Any] = {
    "type": "object",
    "required": ["errors"],
    "properties": {"errors": {"type": "array", "items": {
        "type": "object",
        "required": ["status", "title"],
        "properties": {
            "status": {"type": "integer"},
            "title": {"type": "string"},
            "detail": {"type": "string"},
            "code": {"type": "string"},
            "request_id": {"type": "string"},
        }}}},
    "description": "Placement's error body (an answer to a schedule request that finds "
                   "nothing adds `explain`).",
}
_REF = {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}
_ERROR_CODES = {
    "4XX": "Placement's client errors: 400 invalid (naming the field), 401, 403, 404 "
           "(also for a route newer than the microversion asked), 405, 406, 409 "
           "(conflicts, stale generations, nothing fits), 413 too large, 415.",
    "500": "An unexpected error (a bug): the body names its request id.",
    "503": "Part of the zone tree (or the database) could not be asked; nothing was "
           "changed unless the detail says it may have been. Retry-After says when.",
}
# Success codes besides the decorator's: Placement's writes answer 204 (and
# 201 on creation) at some microversions.
_EXTRA_SUCCESS = {"put": ("200", "204"), "post": ("200", "201", "204"), "delete": ("204",)}


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version,
                             description=app.description, routes=app.routes)
        schema.setdefault("components", {}).setdefault("schemas", {})["Errors"] = ERRORS
        for ops in schema.get("paths", {}).values():
            for method, op in ops.items():
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                for code in _EXTRA_SUCCESS.get(method, ()):
                    responses.setdefault(code, {"description": "Done."})
                for code, what in _ERROR_CODES.items():
                    responses.setdefault(code, {"description": what})
                    responses[code].setdefault("content", _REF)
        schemas = schema["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
