"""/traits and /resource_providers/{uuid}/traits: the trait catalogue and provider traits."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.body import read_model
from strato.api.microversion import V1_6, V1_15, Version, require
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.model.names import MAX_NAME_LENGTH
from strato.store import traits as store

router = APIRouter()

# fullmatch: "$" alone would let a trailing newline through.
_CUSTOM_TRAIT_RE = re.compile(r"CUSTOM_[A-Z0-9_]+")

TraitName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]


class SetProviderTraits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    traits: list[TraitName]
    resource_provider_generation: int


def _url(name: str) -> str:
    return f"/traits/{name}"


def _headers(v: Version, found: Iterable[store.Trait]) -> dict[str, str] | None:
    if v < V1_15:
        return None
    # No traits, or only timeless standard ones: "now", as Placement does.
    return cache_headers(max((t.last_modified for t in found if t.last_modified),
                             default=None))


def _check_custom_name(name: str) -> None:
    if len(name) > MAX_NAME_LENGTH or not _CUSTOM_TRAIT_RE.fullmatch(name):
        raise errors.BadRequest(
            "The trait is invalid. A valid trait must be no longer than 255 characters, "
            'start with the prefix "CUSTOM_" and use following characters: "A"-"Z", '
            '"0"-"9" and "_"')


def _name_filter(value: str) -> store.TraitFilters:
    op, sep, arg = value.partition(":")
    if sep and op == "in":
        return store.TraitFilters(name_in=tuple(arg.split(",")))
    if sep and op == "startswith":
        return store.TraitFilters(prefix=arg)
    raise errors.BadRequest(
        "Badly formatted name parameter. Expected name query string parameter in form: "
        f'?name=[in|startswith]:[name1,name2|prefix]. Got: "{value}"')


def _associated_filter(value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise errors.BadRequest(
            'The query parameter "associated" only accepts "true" or "false"')
    return lowered == "true"


def _list_filters(request: Request) -> store.TraitFilters:
    query.check_params(request, ["name", "associated"])
    name = query.single(request, "name")
    f = _name_filter(name) if name is not None else store.TraitFilters()
    associated = query.single(request, "associated")
    if associated is None:
        return f
    return store.TraitFilters(name_in=f.name_in, prefix=f.prefix,
                              associated=_associated_filter(associated))


@router.get("/traits")
def list_traits(request: Request) -> Response:
    deps.authorize(request, "placement:traits:list")
    v = require(request, V1_6)
    filters = _list_filters(request)
    with deps.db(request).read() as conn:
        found = store.list_traits(conn, filters)
    return json_response({"traits": [t.name for t in found]}, headers=_headers(v, found))


@router.get("/traits/{name}")
def get_trait(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:traits:show")
    v = require(request, V1_6)
    with deps.db(request).read() as conn:
        t = store.get_trait(conn, name)
    return Response(status_code=204, headers=_headers(v, [t]))


@router.put("/traits/{name}")
def update_trait(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:traits:update")
    v = require(request, V1_6)
    _check_custom_name(name)
    with deps.db(request).write() as conn:
        t, created = store.ensure_trait(conn, name)
    headers = {"location": _url(t.name), **(_headers(v, [t]) or {})}
    return Response(status_code=201 if created else 204, headers=headers)


@router.delete("/traits/{name}")
def delete_trait(request: Request, name: str) -> Response:
    deps.authorize(request, "placement:traits:delete")
    require(request, V1_6)
    with deps.db(request).write() as conn:
        store.delete_trait(conn, name)
    return Response(status_code=204)


def _provider_body(pt: store.ProviderTraits) -> dict[str, object]:
    return {"traits": [t.name for t in pt.traits],
            "resource_provider_generation": pt.generation}


@router.get("/resource_providers/{uuid}/traits")
def list_provider_traits(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:traits:list")
    v = require(request, V1_6)
    with deps.db(request).read() as conn:
        pt = store.provider_traits(conn, uuid)
    return json_response(_provider_body(pt), headers=_headers(v, pt.traits))


@router.put("/resource_providers/{uuid}/traits")
async def update_provider_traits(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:traits:update")
    v = require(request, V1_6)
    body = await read_model(request, SetProviderTraits)
    pt = await deps.write(request, lambda conn: store.set_provider_traits(
        conn, uuid, body.traits, body.resource_provider_generation))
    return json_response(_provider_body(pt), headers=_headers(v, pt.traits))


@router.delete("/resource_providers/{uuid}/traits")
def delete_provider_traits(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:traits:delete")
    require(request, V1_6)
    with deps.db(request).write() as conn:
        store.set_provider_traits(conn, uuid, [], None)
    return Response(status_code=204)
