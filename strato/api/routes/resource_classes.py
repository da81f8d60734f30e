"""/resource_classes: list, show, create, update (rename or ensure) and delete classes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.body import describe, read_model
from strato.api.microversion import V1_2, V1_7, V1_15, Version, require
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.model.names import MAX_NAME_LENGTH
from strato.store import resource_classes as store

router = APIRouter()

CUSTOM_RC_PATTERN = r"^CUSTOM_[A-Z0-9_]+$"


class ResourceClassName(BaseModel):
    """Body of POST, and of PUT before 1.7: a custom class name."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=MAX_NAME_LENGTH, pattern=CUSTOM_RC_PATTERN)


def _url(name: str) -> str:
    return f"/resource_classes/{name}"


def serialize(rc: store.ResourceClass) -> dict[str, Any]:
    return {"name": rc.name, "links": [{"rel": "self", "href": _url(rc.name)}]}


def _headers(v: Version, *classes: store.ResourceClass) -> dict[str, str] | None:
    if v < V1_15:
        return None
    # Standard classes carry no timestamps: then "now", as Placement does.
    return cache_headers(max((c.last_modified for c in classes if c.last_modified),
                             default=None))


def _validate_path_name(name: str) -> None:
    """From 1.7 the name in the path is validated as a POST body's name would be."""
    try:
        ResourceClassName.model_validate({"name": name}, strict=True)
    except ValidationError as exc:
        raise errors.BadRequest("JSON does not validate: " + describe(exc)) from None


@router.get("/resource_classes")
def list_resource_classes(request: Request) -> Response:
    deps.authorize(request, "placement:resource_classes:list")
    v = require(request, V1_2)
    with deps.db(request).read() as conn:
        found = store.list_classes(conn)
    return json_response({"resource_classes": [serialize(rc) for rc in found]},
                         headers=_headers(v, *found))


@router.get("/resource_classes/{name}")
def get_resource_class(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:resource_classes:show")
    v = require(request, V1_2)
    with deps.db(request).read() as conn:
        rc = store.get_class(conn, name)
    return json_response(serialize(rc), headers=_headers(v, rc))


@router.post("/resource_classes")
async def create_resource_class(request: Request) -> Response:
    deps.authorize(request, "placement:resource_classes:create")
    require(request, V1_2)
    body = await read_model(request, ResourceClassName)
    rc = await deps.write(request, lambda conn: store.create_class(conn, body.name))
    return Response(status_code=201, headers={"location": _url(rc.name)})


@router.put("/resource_classes/{name}")
async def update_resource_class(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:resource_classes:update")
    v = require(request, V1_2)
    if v >= V1_7:
        return await _ensure_resource_class(request, name)
    body = await read_model(request, ResourceClassName)
    rc = await deps.write(request, lambda conn: store.rename_class(conn, name, body.name))
    return json_response(serialize(rc))


async def _ensure_resource_class(request: Request, name: str) -> Response:
    """PUT from 1.7: no body; 201 if it was created, 204 if it already existed."""
    _validate_path_name(name)
    rc, created = await deps.write(request, lambda conn: store.ensure_class(conn, name))
    return Response(status_code=201 if created else 204, headers={"location": _url(rc.name)})


@router.delete("/resource_classes/{name}")
def delete_resource_class(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:resource_classes:delete")
    require(request, V1_2)
    with deps.db(request).write() as conn:
        store.delete_class(conn, name)
    return Response(status_code=204)
