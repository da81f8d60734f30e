"""/resource_providers: create, show, update, delete and list providers."""

from __future__ import annotations

import uuid as uuidlib
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.body import read_json_later, read_model, shown, validate
from strato.api.microversion import (
    V1_1,
    V1_3,
    V1_4,
    V1_6,
    V1_11,
    V1_14,
    V1_15,
    V1_18,
    V1_20,
    V1_37,
    V1_39,
    Version,
    version,
)
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.store import providers as store
from strato.store import resource_classes, traits

router = APIRouter()

UUID_PATTERN = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


def _uuid_like(value: str | None) -> str | None:
    # Placement's 'uuid' format takes "{...}", "urn:uuid:..." and the like;
    # the provider keeps the canonical form (Placement's str(UUID(...))).
    if value is not None and not query.is_uuid_like(value):
        raise ValueError(f"{shown(value)} is not a 'uuid'")
    return value


class CreateProviderV1_0(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # Placement's schema bounds a name's length above only; its create refuses
    # "" (a 400 of its own, see create_resource_provider).
    name: str = Field(max_length=200)
    # Left out: a new uuid. Sent, a string (Placement's schema: a null is a 400).
    uuid: Annotated[str | None, AfterValidator(_uuid_like)] = None

    @field_validator("uuid", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("None is not of type 'string'")
        return value


class CreateProvider(CreateProviderV1_0):
    parent_provider_uuid: Annotated[str | None, AfterValidator(_uuid_like)] = None


class UpdateProvider(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=200)
    parent_provider_uuid: str | None = Field(default=None, pattern=UUID_PATTERN)


class UpdateProviderV1_0(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=200)


def _canonical(u: str | None) -> str | None:
    return None if u is None else str(uuidlib.UUID(u))


def serialize(p: store.Provider, v: Version) -> dict[str, Any]:
    base = f"/resource_providers/{p.uuid}"
    links = [{"rel": "self", "href": base},
             {"rel": "inventories", "href": f"{base}/inventories"},
             {"rel": "usages", "href": f"{base}/usages"}]
    if v >= V1_1:
        links.append({"rel": "aggregates", "href": f"{base}/aggregates"})
    if v >= V1_6:
        links.append({"rel": "traits", "href": f"{base}/traits"})
    if v >= V1_11:
        links.append({"rel": "allocations", "href": f"{base}/allocations"})
    out: dict[str, Any] = {"uuid": p.uuid, "name": p.name, "generation": p.generation,
                           "links": links}
    if v >= V1_14:
        out["parent_provider_uuid"] = p.parent_provider_uuid
        out["root_provider_uuid"] = p.root_provider_uuid
    return out


def _headers(v: Version, p: store.Provider | None = None) -> dict[str, str] | None:
    if v < V1_15:
        return None
    return cache_headers(p.updated_at if p else None)


@router.post("/resource_providers")
async def create_resource_provider(request: Request) -> Response:
    deps.authorize(request, "placement:resource_providers:create")
    v = version(request)
    body: CreateProvider | CreateProviderV1_0 = await read_model(
        request, CreateProvider if v >= V1_14 else CreateProviderV1_0)
    parent = getattr(body, "parent_provider_uuid", None)
    if not body.name:
        raise errors.BadRequest(
            f'Unable to create resource provider "", {_canonical(body.uuid) or "(new)"}: '
            "Object action create failed because: name is required")
    p = await deps.write(request, lambda conn: store.create_provider(
        conn, name=body.name, uuid=_canonical(body.uuid), parent_uuid=_canonical(parent)))
    location = {"location": f"/resource_providers/{p.uuid}"}
    if v >= V1_20:
        headers = {**location, **(_headers(v, p) or {})}
        return json_response(serialize(p, v), 200, headers)
    return Response(status_code=201, headers=location)


@router.get("/resource_providers/{uuid}")
def get_resource_provider(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:show")
    v = version(request)
    with deps.db(request).read() as conn:
        p = store.get_provider(conn, uuid)
    return json_response(serialize(p, v), headers=_headers(v, p))


@router.put("/resource_providers/{uuid}")
async def update_resource_provider(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:update")
    v = version(request)
    raw = await read_json_later(request)

    def job(conn: Connection) -> store.Provider:
        # Placement answers 404 for an unknown provider before reading the body.
        current = store.get_provider(conn, uuid)
        data: UpdateProvider | UpdateProviderV1_0 = (
            validate(UpdateProvider, raw()) if v >= V1_14
            else validate(UpdateProviderV1_0, raw()))
        parent = current.parent_provider_uuid
        if "parent_provider_uuid" in data.model_fields_set:
            parent = _canonical(getattr(data, "parent_provider_uuid", None))
        return store.update_provider(conn, uuid, name=data.name, parent_uuid=parent,
                                     allow_reparent=v >= V1_37)
    p = await deps.write(request, job)
    return json_response(serialize(p, v), headers=_headers(v, p))


@router.delete("/resource_providers/{uuid}")
def delete_resource_provider(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:delete")
    with deps.db(request).write() as conn:
        store.delete_provider(conn, uuid)
    return Response(status_code=204)


def _list_params(v: Version) -> list[str]:
    allowed = ["name", "uuid"]
    if v >= V1_3:
        allowed.append("member_of")
    if v >= V1_4:
        allowed.append("resources")
    if v >= V1_14:
        allowed.append("in_tree")
    if v >= V1_18:
        allowed.append("required")
    return allowed


@router.get("/resource_providers")
def list_resource_providers(request: Request) -> Response:
    deps.authorize(request, "placement:resource_providers:list")
    v = version(request)
    query.check_params(request, _list_params(v))
    uuid = query.single(request, "uuid")
    if uuid is not None and not query.is_uuid(uuid):
        raise errors.BadRequest(
            f"Invalid query string parameters: 'uuid' is not a valid UUID: {uuid!r}")
    in_tree = query.single(request, "in_tree")
    if in_tree is not None and not query.is_uuid(in_tree):
        raise errors.BadRequest(
            f"Invalid query string parameters: 'in_tree' is not a valid UUID: {in_tree!r}")
    member_values = request.query_params.getlist("member_of")
    member_of, not_member_of = query.parse_member_of(member_values, v)
    # Repeating `required` (AND) arrived with 1.39; before, the last one counts.
    required_values = request.query_params.getlist("required")
    if v < V1_39:
        required_values = required_values[-1:]
    required, forbidden = query.parse_required(required_values, v)
    res_value = query.single(request, "resources")
    resources = query.parse_resources(res_value) if res_value is not None else ()
    filters = store.ProviderFilters(
        name=query.single(request, "name"), uuid=_canonical(uuid), in_tree=in_tree,
        member_of=member_of, forbidden_member_of=not_member_of,
        required_traits=required, forbidden_traits=forbidden, resources=resources)
    with deps.db(request).read() as conn:
        if resources:
            try:
                resource_classes.ids_by_name(conn, [rc for rc, _ in resources])
            except errors.BadRequest as exc:
                raise errors.BadRequest(
                    "Invalid resource class in resources parameter: "
                    + exc.detail.split(": ", 1)[-1]) from None
        traits.ids_by_name(conn, {t for g in required for t in g} | set(forbidden))
        found = store.list_providers(conn, filters)
    last = max((p.updated_at for p in found if p.updated_at), default=None)
    return json_response({"resource_providers": [serialize(p, v) for p in found]},
                         headers=_headers(v) if last is None else (
                             cache_headers(last) if v >= V1_15 else None))
