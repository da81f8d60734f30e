"""POST /reshaper (1.30+): move inventory and allocations atomically."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import Field, RootModel
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.body import read_checked, validate
from strato.api.microversion import V1_30, Version, require
from strato.api.routes.allocations import (
    MAX_PROVIDERS,
    ClassName,
    StrictModel,
    Uuid,
    bounded,
    canonical_uuid,
    post_body_model,
    to_claim,
    too_many_consumers,
    validate_consumer,
)
from strato.model import errors
from strato.model.inventory import MAX_FLOAT, MAX_INT, Inventory
from strato.store import reshaper as store
from strato.store.allocations import ConsumerClaim

router = APIRouter()

_Int = Annotated[int, Field(le=MAX_INT)]


class InventoryRecord(StrictModel):
    total: Annotated[_Int, Field(ge=1)]
    reserved: Annotated[_Int, Field(ge=0)] = 0
    min_unit: Annotated[_Int, Field(ge=1)] = 1
    max_unit: Annotated[_Int, Field(ge=1)] = MAX_INT
    step_size: Annotated[_Int, Field(ge=1)] = 1
    # JSON numbers: an integer ratio is fine too.
    allocation_ratio: Annotated[float | int, Field(le=MAX_FLOAT)] = 1.0


class ProviderInventories(StrictModel):
    resource_provider_generation: int
    inventories: dict[ClassName, InventoryRecord]


class ReshapeBody(StrictModel):
    inventories: Annotated[dict[Uuid, ProviderInventories], Field(min_length=1)]
    # Checked per consumer against the version's model (as POST /allocations).
    allocations: RootModel[dict[Uuid, Any]]


def _inventories(body: ReshapeBody) -> dict[str, store.ProviderInventories]:
    out: dict[str, store.ProviderInventories] = {}
    for rp_uuid, want in body.inventories.items():
        key = canonical_uuid(rp_uuid)
        if key in out:
            raise errors.BadRequest(f"resource provider {key} appears more than once in "
                                    "inventories")
        out[key] = store.ProviderInventories(
            generation=want.resource_provider_generation,
            inventories={rc: Inventory(resource_class=rc, total=r.total, reserved=r.reserved,
                                       min_unit=r.min_unit, max_unit=r.max_unit,
                                       step_size=r.step_size,
                                       allocation_ratio=float(r.allocation_ratio))
                         for rc, r in want.inventories.items()})
    return out


def parsed(data: Any, v: Version
           ) -> tuple[dict[str, store.ProviderInventories], list[ConsumerClaim]]:
    """A reshape's inventories and claims, validated at version `v`."""
    body = validate(ReshapeBody, data)
    if len(body.inventories) > MAX_PROVIDERS:
        raise errors.PayloadTooLarge(
            f"one reshape may name at most {MAX_PROVIDERS} resource providers in inventories; "
            f"this one names {len(body.inventories)}")
    too_many_consumers(len(body.allocations.root))
    model = post_body_model(v)
    claims = bounded([to_claim(canonical_uuid(c), validate_consumer(model, c, b), post=True)
                      for c, b in body.allocations.root.items()])
    return _inventories(body), claims


@router.post("/reshaper")
async def reshape(request: Request) -> Response:
    deps.authorize(request, "placement:reshaper:reshape")
    v = require(request, V1_30)
    inventories, claims = await read_checked(request, lambda data: parsed(data, v))
    await deps.write(request, lambda conn: store.reshape(conn, inventories, claims))
    return Response(status_code=204)
