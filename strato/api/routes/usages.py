"""Usages: per provider, and per project/user (grouped by consumer type from 1.38)."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.microversion import V1_9, V1_15, V1_38, Version, require, version
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.store import providers
from strato.store import usages as store
from strato.zone import protocol, subtree

router = APIRouter()

# Placement's pattern for ?consumer_type= (a type name, or all / unknown). It is
# searched, not matched whole, exactly as Placement's JSON schema does.
_CONSUMER_TYPE_QUERY = re.compile(r"^[A-Z0-9_]+$|^all|^unknown$")
_MAX_ID = 255


def _headers(v: Version) -> dict[str, str] | None:
    # "What is the usage now?": last-modified is now, as in Placement.
    return cache_headers(None) if v >= V1_15 else None


@router.get("/resource_providers/{uuid}/usages")
def get_provider_usages(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:usages")
    v = version(request)
    with deps.db(request).read() as conn:
        rp = providers.get_provider_or_none(conn, uuid)
        if rp is None:
            raise errors.NotFound(f"No resource provider with uuid {uuid} found")
        found = store.provider_usages(conn, rp.id)
    return json_response({"resource_provider_generation": rp.generation, "usages": found},
                         headers=_headers(v))


def _id_param(request: Request, name: str, *, required: bool) -> str | None:
    value = query.single(request, name)
    if value is None:
        if required:
            raise errors.BadRequest(
                f"Invalid query string parameters: '{name}' is a required property")
        return None
    if not 1 <= len(value) <= _MAX_ID:
        # Placement's words (jsonschema's), then the limit.
        word, validator = ("too short", "minLength") if not value else ("too long", "maxLength")
        raise errors.BadRequest(
            f"Invalid query string parameters: {value!r} is {word} (Failed validating "
            f"'{validator}' in schema['properties']['{name}']): '{name}' must be 1 to "
            f"{_MAX_ID} characters long, got {len(value)}")
    return value


def _consumer_type_param(request: Request) -> str | None:
    value = query.single(request, "consumer_type")
    if value is None:
        return None
    if not 1 <= len(value) <= _MAX_ID or not _CONSUMER_TYPE_QUERY.search(value):
        raise errors.BadRequest(
            f"Invalid query string parameters: '{value}' does not match "
            f"'{_CONSUMER_TYPE_QUERY.pattern}'")
    return value


@router.get("/usages")
async def get_total_usages(request: Request) -> Response:
    deps.authorize(request, "placement:usages", request.query_params.get("project_id"))
    v = require(request, V1_9)
    by_type = v >= V1_38
    query.check_params(request, ["project_id", "user_id"] + (["consumer_type"] if by_type
                                                             else []))
    project_id = _id_param(request, "project_id", required=True)
    assert project_id is not None
    user_id = _id_param(request, "user_id", required=False)
    consumer_type = _consumer_type_param(request) if by_type else None

    spanning: dict[str, int] = {}

    def read() -> dict[str, Any]:
        with deps.db(request).read() as conn:
            if by_type:
                grouped = store.usages_by_consumer_type(conn, project_id, user_id,
                                                        consumer_type)
                spanning.update((t, u.spanning) for t, u in grouped.items())
                return {"usages": {t: {**u.resources, "consumer_count": u.consumer_count}
                                   for t, u in grouped.items()}}
            return {"usages": store.project_usages(conn, project_id, user_id)}
    body = await run_in_threadpool(read)
    tree = getattr(request.app.state, "tree", None)
    if tree is not None and await tree.children():
        # The subtree's usages too: consumers placed through this zone live in
        # its children's databases (strato/zone/subtree.py).
        params = {"project_id": project_id, **({"user_id": user_id} if user_id else {}),
                  **({"consumer_type": consumer_type} if consumer_type else {})}
        # Zones counted elsewhere: only a parent zone says (its call carries
        # the zone path); a client's header is not one.
        counted = (protocol.counted_zones(request.headers.get(protocol.COUNTED_HEADER))
                   if request.headers.get(protocol.PATH_HEADER) else frozenset())
        below = await subtree.usages(tree, params, counted)
        body = _add_usages(body, below, by_type)
        for ctype, n in spanning.items():
            # A consumer with a part here (a disk on this zone's pool) and
            # one below (its host) is one consumer: counted below.
            entry = body["usages"].get(ctype)
            if n and isinstance(entry, dict):
                entry["consumer_count"] = max(0, entry["consumer_count"] - n)
    return json_response(body, headers=_headers(v))


def _add_usages(body: dict[str, Any], below: dict[str, dict[str, int]], by_type: bool
                ) -> dict[str, Any]:
    """This zone's usages plus its children's (given by consumer type)."""
    usages: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                              for k, v in body["usages"].items()}
    for ctype, counts in below.items():
        if by_type:
            acc = usages.setdefault(ctype, {})
            for k, n in counts.items():
                acc[k] = acc.get(k, 0) + n
        else:
            for k, n in counts.items():
                if k != "consumer_count":
                    usages[k] = usages.get(k, 0) + n
    return {"usages": usages}
