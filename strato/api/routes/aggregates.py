"""/resource_providers/{uuid}/aggregates: the aggregates a provider belongs to (1.1+)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import AfterValidator, BaseModel, ConfigDict, RootModel
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.body import read_json_later, shown, validate
from strato.api.microversion import V1_1, V1_15, V1_19, Version, require
from strato.api.responses import cache_headers, json_response
from strato.api.routes.inventories import provider_or_404
from strato.api.routes.resource_providers import UUID_PATTERN
from strato.model import errors
from strato.store import aggregates as store

router = APIRouter()

PATH = "/resource_providers/{uuid}/aggregates"

_UUID_RE = re.compile(UUID_PATTERN)


def _uuid(value: str) -> str:
    # Stored as given (Placement does not normalise them); the column holds 36 chars.
    if not _UUID_RE.fullmatch(value):
        raise ValueError(f"{shown(value)} is not a 'uuid'")
    return value


AggregateUuid = Annotated[str, AfterValidator(_uuid)]


class AggregateList(RootModel[list[AggregateUuid]]):
    """Before 1.19 the PUT body is a bare list of aggregate uuids."""


class UpdateAggregates(BaseModel):
    model_config = ConfigDict(extra="forbid")
    aggregates: list[AggregateUuid]
    resource_provider_generation: int


def _refuse_duplicates(uuids: list[str]) -> None:
    # Placement's schema says uniqueItems: a repeated uuid is a 400, not merged.
    dups = sorted(u for u, n in Counter(uuids).items() if n > 1)
    if dups:
        raise errors.BadRequest(
            f"JSON does not validate: aggregates: has non-unique elements ({', '.join(dups)})")


def _answer(v: Version, uuids: list[str], generation: int) -> Response:
    body: dict[str, Any] = {"aggregates": uuids}
    if v >= V1_19:
        body["resource_provider_generation"] = generation
    # Placement keeps no time for memberships, so last-modified is now.
    return json_response(body, headers=cache_headers(None) if v >= V1_15 else None)


@router.get(PATH)
def list_aggregates(request: Request, uuid: str) -> Response:
    v = require(request, V1_1)
    deps.authorize(request, "placement:resource_providers:aggregates:list")
    with deps.db(request).read() as conn:
        p = provider_or_404(conn, uuid)
        found = store.get_aggregates(conn, p)
    return _answer(v, found, p.generation)


@router.put(PATH)
async def update_aggregates(request: Request, uuid: str) -> Response:
    v = require(request, V1_1)
    deps.authorize(request, "placement:resource_providers:aggregates:update")
    raw = await read_json_later(request)

    def job(conn: Connection) -> tuple[list[str], int]:
        # Placement answers 404 for an unknown provider before reading the body.
        p = provider_or_404(conn, uuid)
        generation: int | None = None
        if v >= V1_19:
            body = validate(UpdateAggregates, raw())
            uuids, generation = body.aggregates, body.resource_provider_generation
        else:
            uuids = validate(AggregateList, raw()).root
        _refuse_duplicates(uuids)
        return uuids, store.set_aggregates(conn, p, uuids, generation=generation)
    uuids, gen = await deps.write(request, job)
    return _answer(v, uuids, gen)
