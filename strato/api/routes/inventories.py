"""/resource_providers/{uuid}/inventories: a provider's inventory, whole or per class."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.body import read_json_later, validate
from strato.api.microversion import V1_5, V1_15, V1_26, version
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.model.inventory import MAX_FLOAT, MAX_INT, Inventory
from strato.store import inventories as store
from strato.store import providers

router = APIRouter()

BASE = "/resource_providers/{uuid}/inventories"
# Placement's pattern for a resource class name in a body.
RC_PATTERN = r"^[A-Z0-9_]+$"
FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


class InventoryFields(BaseModel):
    """One inventory record; omitted fields take Placement's defaults."""

    model_config = ConfigDict(extra="forbid")
    total: int = Field(ge=1, le=MAX_INT)
    reserved: int = Field(default=0, ge=0, le=MAX_INT)
    min_unit: int = Field(default=1, ge=1, le=MAX_INT)
    max_unit: int = Field(default=MAX_INT, ge=1, le=MAX_INT)
    step_size: int = Field(default=1, ge=1, le=MAX_INT)
    # No lower bound in Placement's schema: a ratio of 0 or less is refused
    # only by the capacity it makes (store.inventory_problem).
    allocation_ratio: float = Field(default=1.0, le=MAX_FLOAT)

    def to_inventory(self, resource_class: str) -> Inventory:
        return Inventory(resource_class=resource_class, total=self.total,
                         reserved=self.reserved, min_unit=self.min_unit,
                         max_unit=self.max_unit, step_size=self.step_size,
                         allocation_ratio=self.allocation_ratio)


class InventoryRecord(InventoryFields):
    # Placement's schema lets a record of the whole-set PUT carry a generation,
    # and ignores it; the body's top-level generation is the one checked.
    resource_provider_generation: int | None = None


class UpdateInventory(InventoryFields):
    resource_provider_generation: int


class CreateInventory(InventoryFields):
    resource_class: str = Field(pattern=RC_PATTERN)
    # Accepted and not checked, as in Placement: a POST only adds a new class.
    resource_provider_generation: int | None = None


class UpdateInventories(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resource_provider_generation: int
    inventories: dict[str, InventoryRecord]


def _record(inv: Inventory) -> dict[str, Any]:
    return {f: getattr(inv, f) for f in FIELDS}


def _one(inv: Inventory, generation: int) -> dict[str, Any]:
    return {**_record(inv), "resource_provider_generation": generation}


def _all(invs: dict[str, Inventory], generation: int) -> dict[str, Any]:
    return {"resource_provider_generation": generation,
            "inventories": {rc: _record(i) for rc, i in invs.items()}}


def _headers(request: Request, last_modified: datetime | None) -> dict[str, str] | None:
    return cache_headers(last_modified) if version(request) >= V1_15 else None


def _set_headers(request: Request, invs: dict[str, Inventory],
                 last_modified: datetime | None) -> dict[str, str] | None:
    """As Placement: a set's last-modified is its newest record's, and an empty
    set has none (cache-control only)."""
    headers = _headers(request, last_modified)
    if headers is not None and not invs:
        del headers["last-modified"]
    return headers


def _check(request: Request, provider: providers.Provider, invs: list[Inventory]) -> None:
    """Field rules that depend on the microversion (reserved == total from 1.26)."""
    may_equal = version(request) >= V1_26
    action = "create" if request.method == "POST" else "update"
    for inv in invs:
        store.check_inventory(provider.uuid, inv, reserved_may_equal_total=may_equal,
                              action=action)


def provider_or_404(conn: Connection, uuid: str) -> providers.Provider:
    """The provider named in the URL; 404 before SQL for what cannot be a uuid.

    (A NUL byte, say, would otherwise make PostgreSQL fail with a 500.)
    """
    if not query.is_uuid(uuid):
        raise errors.NotFound(f"No resource provider with uuid {uuid!r} found")
    return providers.get_provider(conn, uuid)


@router.get(BASE)
def list_inventories(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:list")
    with deps.db(request).read() as conn:
        found = store.get_inventory_set(conn, provider_or_404(conn, uuid))
    return json_response(_all(found.inventories, found.generation),
                         headers=_set_headers(request, found.inventories, found.last_modified))


@router.put(BASE)
async def update_inventories(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:update")
    raw = await read_json_later(request)

    def job(conn: Connection) -> tuple[dict[str, Inventory], int]:
        # Placement answers 404 for an unknown provider before reading the body.
        p = provider_or_404(conn, uuid)
        body = validate(UpdateInventories, raw())
        providers.check_generation(p, body.resource_provider_generation)
        invs = {rc: rec.to_inventory(rc) for rc, rec in body.inventories.items()}
        _check(request, p, list(invs.values()))
        return invs, store.replace_inventories(conn, p, invs, body.resource_provider_generation)
    invs, gen = await deps.write(request, job)
    return json_response(_all(invs, gen), headers=_set_headers(request, invs, None))


@router.post(BASE)
async def create_inventory(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:create")
    raw = await read_json_later(request)

    def job(conn: Connection) -> tuple[providers.Provider, Inventory, int]:
        p = provider_or_404(conn, uuid)
        body = validate(CreateInventory, raw())
        inv = body.to_inventory(body.resource_class)
        _check(request, p, [inv])
        return p, inv, store.add_inventory(conn, p, inv)
    p, inv, gen = await deps.write(request, job)
    headers = {"location": f"/resource_providers/{p.uuid}/inventories/{inv.resource_class}",
               **(_headers(request, None) or {})}
    return json_response(_one(inv, gen), 201, headers)


@router.delete(BASE)
def delete_inventories(request: Request, uuid: str) -> Response:
    if version(request) < V1_5:
        # Placement answers 405 here, not 404: the URL exists for other methods.
        raise errors.MethodNotAllowed(
            f"The method DELETE is not allowed for this resource ({request.url.path}) at "
            f"microversion {version(request)}; it needs 1.5 or later")
    deps.authorize(request, "placement:resource_providers:inventories:delete")
    with deps.db(request).write() as conn:
        store.delete_all_inventories(conn, provider_or_404(conn, uuid))
    return Response(status_code=204)


@router.get(BASE + "/{resource_class}")
def get_inventory(request: Request, uuid: str, resource_class: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:show")
    with deps.db(request).read() as conn:
        p = provider_or_404(conn, uuid)
        inv, last_modified = store.get_inventory(conn, p, resource_class)
    return json_response(_one(inv, p.generation), headers=_headers(request, last_modified))


@router.put(BASE + "/{resource_class}")
async def update_inventory(request: Request, uuid: str, resource_class: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:update")
    raw = await read_json_later(request)

    def job(conn: Connection) -> tuple[Inventory, int]:
        p = provider_or_404(conn, uuid)
        body = validate(UpdateInventory, raw())
        providers.check_generation(p, body.resource_provider_generation)
        inv = body.to_inventory(resource_class)
        _check(request, p, [inv])
        return inv, store.update_inventory(conn, p, inv, body.resource_provider_generation)
    inv, gen = await deps.write(request, job)
    return json_response(_one(inv, gen), headers=_headers(request, None))


@router.delete(BASE + "/{resource_class}")
def delete_inventory(request: Request, uuid: str, resource_class: str) -> Response:
    deps.authorize(request, "placement:resource_providers:inventories:delete")
    with deps.db(request).write() as conn:
        store.delete_inventory(conn, provider_or_404(conn, uuid), resource_class)
    return Response(status_code=204)
