"""/allocations: read, replace and remove a consumer's allocations; several at once.

Every write goes through `store.allocations.claim`, the one write path for
allocations. The body schemas change with the microversion; the table
`_PUT_BODIES` / `_POST_BODIES` says which model reads which versions.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StringConstraints,
    ValidationError,
)
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.body import describe, model_of, read_checked, shown, validate
from strato.api.microversion import (
    V1_8,
    V1_12,
    V1_13,
    V1_15,
    V1_28,
    V1_34,
    V1_38,
    Version,
    require,
    version,
)
from strato.api.responses import cache_headers, json_response
from strato.model import errors
from strato.store import allocations as store
from strato.zone import subtree

if TYPE_CHECKING:
    from strato.zone.tree import ZoneTree
from strato.store import providers

router = APIRouter()

# Placement's patterns: resource class and consumer type names, group suffixes.
NAME_PATTERN = r"^[A-Z0-9_]+$"
UUID_PATTERN = (r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                r"[0-9a-fA-F]{12}$")
GROUP_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
# Placement's mappings schema names its group pattern in `patternProperties`
# unanchored and allows other keys: a key containing one such character must
# map to uuids; any other key (the unnamed group's "") is not constrained.
_MAPPED_KEY = re.compile(r"[a-zA-Z0-9_-]{1,64}")

Uuid = Annotated[str, StringConstraints(pattern=UUID_PATTERN)]
ClassName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Amount = Annotated[int, Field(ge=1)]
ExternalId = Annotated[str, StringConstraints(min_length=1, max_length=255)]
Resources = Annotated[dict[ClassName, Amount], Field(min_length=1)]


_UUID = re.compile(UUID_PATTERN)


def _check_mappings(value: dict[str, Any]) -> dict[str, Any]:
    """Placement's mappings schema, in jsonschema's words."""
    for key, uuids in value.items():
        if not _MAPPED_KEY.search(key):
            continue
        if not isinstance(uuids, list):
            raise ValueError(f"{shown(uuids)} is not of type 'array' (mappings {shown(key)})")
        if not uuids:
            raise ValueError(f"[] is too short (mappings {shown(key)})")
        for item in uuids:
            if not isinstance(item, str):
                raise ValueError(f"{shown(item)} is not of type 'string' "
                                 f"(mappings {shown(key)})")
            if not _UUID.match(item):
                raise ValueError(f"{shown(item)} is not a 'uuid'")
    return value


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- Bodies, oldest first --------------------------------------------------

class ProviderRef(StrictModel):
    uuid: Uuid


class ListItem(StrictModel):
    resource_provider: ProviderRef
    resources: Resources


class PutV1_0(StrictModel):
    """List form: [{resource_provider: {uuid}, resources: {...}}]."""

    allocations: Annotated[list[ListItem], Field(min_length=1)]


class PutV1_8(PutV1_0):
    project_id: ExternalId
    user_id: ExternalId


class ProviderResources(StrictModel):
    # Optional and ignored (it is what GET shows); null is not an integer.
    generation: int = 0
    resources: Resources


class PostConsumerV1_13(StrictModel):
    """Dict form keyed by provider uuid; may be empty (remove everything)."""

    allocations: dict[Uuid, ProviderResources]
    project_id: ExternalId
    user_id: ExternalId


class PutV1_12(PostConsumerV1_13):
    allocations: Annotated[dict[Uuid, ProviderResources], Field(min_length=1)]


class PutV1_28(PostConsumerV1_13):
    consumer_generation: int | None


class PutV1_34(PutV1_28):
    # Which provider satisfied which request group; accepted, not stored.
    # Nova echoes the candidate's mappings, the unnamed group under "".
    # Not empty: Placement's schema spelt its minProperties "minProperites"
    # until 8.0.0; its gabbits (allocations-mappings.yaml) now want a 400.
    mappings: Annotated[dict[str, Any], Field(min_length=1),
                        AfterValidator(_check_mappings)] = Field(default_factory=dict)


class PutV1_38(PutV1_34):
    consumer_type: Annotated[str, StringConstraints(pattern=NAME_PATTERN, min_length=1,
                                                    max_length=255)]


ConsumerBody = PutV1_0 | PostConsumerV1_13

_PUT_BODIES: tuple[tuple[Version, type[ConsumerBody]], ...] = (
    (V1_38, PutV1_38), (V1_34, PutV1_34), (V1_28, PutV1_28), (V1_12, PutV1_12),
    (V1_8, PutV1_8), (Version(1, 0), PutV1_0))
_POST_BODIES: tuple[tuple[Version, type[PostConsumerV1_13]], ...] = (
    (V1_38, PutV1_38), (V1_34, PutV1_34), (V1_28, PutV1_28), (V1_13, PostConsumerV1_13))


def _pick(table: tuple[tuple[Version, Any], ...], v: Version) -> Any:
    return next(model for since, model in table if v >= since)


def post_body_model(v: Version) -> type[PostConsumerV1_13]:
    """The model of one consumer's entry in POST /allocations (and the reshaper)."""
    model: type[PostConsumerV1_13] = _pick(_POST_BODIES, v)
    return model


class _PostBody(RootModel[dict[Uuid, Any]]):
    """POST /allocations: consumer uuid -> that consumer's body (checked per version)."""


def validate_consumer(model: type[PostConsumerV1_13], consumer_uuid: str, data: Any
                      ) -> PostConsumerV1_13:
    try:
        return model_of(model, data)
    except ValidationError as exc:
        # Name the consumer the problem is in.
        raise errors.BadRequest("JSON does not validate: " + describe(exc, consumer_uuid)
                                ) from None


# --- From bodies to claims -------------------------------------------------

def canonical_uuid(value: str) -> str:
    return str(uuidlib.UUID(value))


def _allocations_of(body: ConsumerBody) -> dict[str, dict[str, int]]:
    if isinstance(body, PutV1_0):
        # Later entries for the same provider win, as in Placement.
        return {canonical_uuid(item.resource_provider.uuid): dict(item.resources)
                for item in body.allocations}
    out: dict[str, dict[str, int]] = {}
    for rp_uuid, share in body.allocations.items():
        key = canonical_uuid(rp_uuid)
        if key in out:
            raise errors.BadRequest(
                f"resource provider {key} appears more than once in the allocations")
        out[key] = dict(share.resources)
    return out


def to_claim(consumer_uuid: str, body: ConsumerBody, *, post: bool = False
             ) -> store.ConsumerClaim:
    """The claim that makes `body` the consumer's complete allocations
    (`post`: written through POST /allocations)."""
    allocations = _allocations_of(body)
    return store.ConsumerClaim(
        consumer_uuid=consumer_uuid,
        allocations=allocations,
        bump_emptied=post and not allocations,
        project_id=getattr(body, "project_id", None),
        user_id=getattr(body, "user_id", None),
        consumer_type=getattr(body, "consumer_type", None),
        generation=(body.consumer_generation if isinstance(body, PutV1_28)
                    else store.ANY_GENERATION),
    )


# The most consumers, and the most providers, one write may name (413 past
# them): a claim's statements name them all in IN lists, and one statement
# binds at most 65,535 values on PostgreSQL (32,766 on SQLite). Nova names a
# few; the 16 MiB body limit alone lets through some 70,000.
MAX_CONSUMERS = 10_000
MAX_PROVIDERS = 10_000


def bounded(claims: list[store.ConsumerClaim]) -> list[store.ConsumerClaim]:
    """`claims`, or a 413 if they name more than one write may."""
    too_many_consumers(len(claims))
    named = {u for c in claims for u in c.allocations}
    if len(named) > MAX_PROVIDERS:
        raise errors.PayloadTooLarge(
            f"one write may name at most {MAX_PROVIDERS} resource providers; this one names "
            f"{len(named)}")
    return claims


def too_many_consumers(count: int) -> None:
    if count > MAX_CONSUMERS:
        raise errors.PayloadTooLarge(
            f"one write may name at most {MAX_CONSUMERS} consumers; this one names {count}")


def claims_of(data: Any, v: Version, consumer: str | None = None
              ) -> list[store.ConsumerClaim]:
    """The claims an allocations write makes, validated at version `v`: `PUT
    /allocations/{consumer}` with `consumer`, else `POST /allocations` (1.13+)."""
    if consumer is not None:
        body: ConsumerBody = validate(_pick(_PUT_BODIES, v), data)
        return bounded([to_claim(consumer, body)])
    bodies = validate(_PostBody, data).root
    if not bodies:
        raise errors.BadRequest("JSON does not validate: body: at least one consumer is "
                                "required (minProperties 1)")
    too_many_consumers(len(bodies))
    model = post_body_model(v)
    # Validated once more per consumer, against this version's model.
    return bounded([to_claim(canonical_uuid(c), validate_consumer(model, c, b), post=True)
                    for c, b in bodies.items()])


def _consumer_path_uuid(value: str) -> str:
    if not query.is_uuid(value):
        raise errors.BadRequest(f"Malformed consumer_uuid: {value}")
    return canonical_uuid(value)


# --- Serialisation ---------------------------------------------------------

def serialize_consumer(found: store.ConsumerAllocations, v: Version) -> dict[str, Any]:
    out: dict[str, Any] = {"allocations": {
        rp_uuid: {"generation": share.generation, "resources": share.resources}
        for rp_uuid, share in found.allocations.items()}}
    # Owner fields only describe a consumer that holds something.
    if found.allocations and v >= V1_12:
        out["project_id"] = found.project_id
        out["user_id"] = found.user_id
        if v >= V1_28:
            out["consumer_generation"] = found.generation
        if v >= V1_38:
            out["consumer_type"] = found.consumer_type
    return out


def serialize_provider(found: store.ProviderAllocations, generation: int, v: Version
                       ) -> dict[str, Any]:
    allocs: dict[str, Any] = {}
    for consumer_uuid, share in found.allocations.items():
        entry: dict[str, Any] = {"resources": share.resources}
        if v >= V1_28:
            entry["consumer_generation"] = share.generation
        allocs[consumer_uuid] = entry
    return {"allocations": allocs, "resource_provider_generation": generation}


def _headers(v: Version, last_modified: datetime | None) -> dict[str, str] | None:
    return cache_headers(last_modified) if v >= V1_15 else None


# --- Routes ----------------------------------------------------------------

def _read_consumer(request: Request, key: str) -> store.ConsumerAllocations:
    with deps.db(request).read() as conn:
        return store.get_consumer_allocations(conn, key)


async def _below(request: Request) -> ZoneTree | None:
    """This zone's tree when it has children (their subtrees are answered for)."""
    tree: ZoneTree | None = getattr(request.app.state, "tree", None)
    if tree is None or not await tree.children():
        return None
    return tree


def _from_child(key: str, body: dict[str, Any]) -> store.ConsumerAllocations:
    return store.ConsumerAllocations(
        consumer_uuid=key,
        allocations={rp: store.ProviderShare(generation=int(a.get("generation") or 0),
                                             resources=dict(a["resources"]))
                     for rp, a in body["allocations"].items()},
        project_id=body.get("project_id"), user_id=body.get("user_id"),
        generation=body.get("consumer_generation"), consumer_type=body.get("consumer_type"),
        last_modified=None)


def _merged(here: store.ConsumerAllocations, below: store.ConsumerAllocations
            ) -> store.ConsumerAllocations:
    """A consumer's allocations here (a sharing pool) and below (its compute)."""
    if not here.allocations:
        return below
    return store.ConsumerAllocations(
        consumer_uuid=here.consumer_uuid, allocations={**below.allocations,
                                                       **here.allocations},
        project_id=here.project_id, user_id=here.user_id, generation=here.generation,
        consumer_type=here.consumer_type, last_modified=here.last_modified)


@router.get("/allocations/{consumer_uuid}")
async def get_allocations(request: Request, consumer_uuid: str) -> Response:
    deps.authorize(request, "placement:allocations:list")
    v = version(request)
    # Placement never 404s here: an unknown consumer simply holds nothing,
    # and one that is no uuid is unknown (every write takes uuids only; and
    # a NUL byte is a query PostgreSQL refuses).
    if not query.is_uuid(consumer_uuid):
        return json_response(serialize_consumer(store.ConsumerAllocations(
            consumer_uuid=consumer_uuid, allocations={}, project_id=None, user_id=None,
            generation=None, consumer_type=None, last_modified=None), v),
            headers=_headers(v, None))
    key = canonical_uuid(consumer_uuid)
    found = await run_in_threadpool(_read_consumer, request, key)
    if tree := await _below(request):
        # Placed through this zone into a child's subtree (and perhaps on a
        # sharing pool here too): answer with all of it.
        below = await subtree.find_consumer(tree, key)
        if below is not None:
            found = _merged(found, _from_child(key, below.body))
    return json_response(serialize_consumer(found, v),
                         headers=_headers(v, found.last_modified))


@router.put("/allocations/{consumer_uuid}")
async def update_allocations(request: Request, consumer_uuid: str) -> Response:
    deps.authorize(request, "placement:allocations:update")
    v = version(request)
    key = _consumer_path_uuid(consumer_uuid)
    claims = await read_checked(request, lambda data: claims_of(data, v, key))
    await _write_here(request, claims)
    return Response(status_code=204)


@router.post("/allocations")
async def create_allocations(request: Request) -> Response:
    deps.authorize(request, "placement:allocations:manage")
    v = require(request, V1_13)
    claims = await read_checked(request, lambda data: claims_of(data, v))
    await _write_here(request, claims)
    return Response(status_code=204)


async def _write_here(request: Request, claims: list[store.ConsumerClaim], *,
                      release: bool = False) -> bool:
    """Write `claims` here, with the claims and releases of requests at work
    at once (SQLite: on the event loop, one transaction and one fsync for all
    of them, or in the writer thread's group commit when something else
    writes or the write is big, see `Database.written_here`; PostgreSQL: a
    pool thread); the
    scheduler's index takes what moved without reading it back. A `release`
    of a consumer that holds nothing here writes nothing and answers False."""
    job, applied = request.app.state.scheduler.write_job(claims, release=release)
    db = deps.db(request)
    if _rows(claims) > IN_PLACE_ROWS:
        # Too long a job for the event loop: the writer thread's.
        big: bool = await db.written(job, applied)
        return big
    done: bool = await db.written_here(job, applied)
    return done


# The most rows (consumers and their allocations) a write makes on the event
# loop (`Database.written_here`); a bigger one goes to the writer thread. Each
# costs about 0.15 ms: 10,000 consumers in one POST held every other request
# for 1.5 s.
IN_PLACE_ROWS = 64


def _rows(claims: list[store.ConsumerClaim]) -> int:
    return sum(1 + sum(len(r) for r in c.allocations.values()) for c in claims)


async def _delete_here(request: Request, key: str) -> bool:
    """Remove `key`'s allocations here (False: it held none)."""
    return await _write_here(request, [store.ConsumerClaim(consumer_uuid=key)], release=True)


@router.delete("/allocations/{consumer_uuid}")
async def delete_allocations(request: Request, consumer_uuid: str) -> Response:
    deps.authorize(request, "placement:allocations:delete")
    if not query.is_uuid(consumer_uuid):
        # Every write takes uuids only: nothing to look for (and a NUL byte
        # is a query PostgreSQL refuses).
        raise errors.NotFound(f"No allocations for consumer '{consumer_uuid}'")
    key = canonical_uuid(consumer_uuid)
    # Below first (it may fail, 503, with nothing here deleted), then here.
    below = bool((tree := await _below(request)) and await subtree.delete_consumer(tree, key))
    here = await _delete_here(request, key)
    if not (here or below):
        raise errors.NotFound(f"No allocations for consumer '{consumer_uuid}'")
    return Response(status_code=204)


@router.get("/resource_providers/{uuid}/allocations")
def list_provider_allocations(request: Request, uuid: str) -> Response:
    deps.authorize(request, "placement:resource_providers:allocations:list")
    v = version(request)
    with deps.db(request).read() as conn:
        rp = providers.get_provider_or_none(conn, uuid)
        if rp is None:
            raise errors.NotFound(f"Resource provider '{uuid}' not found: No resource "
                                  f"provider with uuid {uuid} found")
        found = store.get_provider_allocations(conn, rp.id)
    return json_response(serialize_provider(found, rp.generation, v),
                         headers=_headers(v, found.last_modified))
