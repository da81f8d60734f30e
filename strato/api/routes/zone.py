"""The zone tree's routes: summary, children, and claims routed to their owner."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
import uuid as uuidlib
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps
from strato.api.auth import REGISTRATION_ROLE
from strato.api.body import bounded_faults
from strato.api.responses import json_response
from strato.model import errors
from strato.model.location import MAX_TAGS, LocationError, canonical_location, canonical_tags
from strato.model.schedule import REQUEST_ID_PATTERN
from strato.store import children as store
from strato.store import providers, provisional
from strato.zone import attempt, subtree
from strato.zone.protocol import TOKEN_PATTERN, zone_url
from strato.zone.transport import ZONE_PATH
from strato.zone.tree import ZoneTree

log = logging.getLogger("strato.zone")

router = APIRouter(prefix="/strato/v1", tags=["zone tree"])
_ZONE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


def tree_of(request: Request) -> ZoneTree:
    tree: ZoneTree = request.app.state.tree
    return tree


class ChildSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=_ZONE_NAME)
    url: str = Field(min_length=1, max_length=1024,
                     description="http(s)://host[:port][/path prefix] of the child zone "
                     "(inproc://name for the zones of an in-process tree).")
    location_prefix: str | None = None
    # (duplicates are dropped before MAX_TAGS applies; a list this long is refused
    # before its items are looked at)
    tags: list[str] = Field(default_factory=list, max_length=4 * MAX_TAGS)
    credential: str | None = Field(default=None, max_length=1024, pattern=TOKEN_PATTERN,
                                   description="Token this zone sends when calling the child "
                                   "(no control characters: it goes into a header).")
    identity: str | None = Field(
        default=None, min_length=16, max_length=256,
        description="The child zone's own secret identity (sent by `strato serve "
        "--parent`): only the zone holding it may re-register a name that is registered "
        "to a live zone.")
    rejoin: bool = Field(
        default=False,
        description="Sent by a running zone that registers again because it stopped hearing "
        "from this zone (its record here may have been lost): refused (409 "
        "strato.zone_removed) for a zone an operator removed since it last registered.")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            return zone_url(v)
        except ValueError as exc:
            raise ValueError(f"url must be http(s)://host[:port][/path]: {exc} "
                             f"(got {v[:200]!r})") from None

    @field_validator("location_prefix")
    @classmethod
    def _prefix(cls, v: str | None) -> str | None:
        try:
            return canonical_location(v)
        except LocationError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        try:
            return canonical_tags(v)
        except LocationError as exc:
            raise ValueError(str(exc)) from None


class ClaimShare(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    resources: dict[Annotated[str, Field(pattern=r"^[A-Z0-9_]{1,255}$")],
                    Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(min_length=1)


class ClaimPlacement(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    consumer_uuid: str
    allocations: dict[str, ClaimShare] = Field(min_length=1, max_length=64)

    @field_validator("consumer_uuid")
    @classmethod
    def _consumer(cls, v: str) -> str:
        try:
            return str(uuidlib.UUID(v))
        except ValueError:
            raise ValueError(f"consumer_uuid must be a UUID, got {v[:64]!r}") from None

    @field_validator("allocations")
    @classmethod
    def _providers(cls, v: dict[str, ClaimShare]) -> dict[str, ClaimShare]:
        for rp in v:
            try:
                uuidlib.UUID(rp)
            except ValueError:
                raise ValueError(f"allocations: provider {rp[:64]!r} is not a UUID") from None
        return v


class ClaimRequest(BaseModel):
    """Claim exactly these placements at the zone `path` names (relative to this zone)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: list[str] = Field(default_factory=list, max_length=32)
    project_id: str = Field(min_length=1, max_length=255)
    user_id: str = Field(min_length=1, max_length=255)
    consumer_type: str | None = None
    group: str | None = None
    hold_ttl: float | None = Field(default=None, gt=0, le=3600,
                                   description="Hold provisionally (a cross-zone "
                                   "placement): released unless confirmed in time.")
    request_id: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=REQUEST_ID_PATTERN,
        description="Idempotency key: a repeat answers as the first did, and "
        "POST /strato/v1/requests/cancel undoes the claim.")
    placements: list[ClaimPlacement] = Field(min_length=1, max_length=1000)
    deadline: float | None = Field(default=None, gt=0, le=2**40,
                                   description="Unix time after which nothing is claimed.")


def _view(tree: ZoneTree, c: store.Child, doubt: dict[str, int] | None = None
          ) -> dict[str, Any]:
    cached = tree.cache.get(c.name)
    skew = tree.clocks.get(c.name)
    best = skew.best() if skew else None
    return {"name": c.name, "url": c.url, "location_prefix": c.location_prefix,
            "tags": list(c.tags), "health": tree.health_of(c.name).as_dict(),
            "in_doubt": (doubt or {}).get(c.name, 0),
            # Its clock minus this zone's, as its summaries tell (None: not known).
            "clock_offset_s": None if best is None else round(best.offset, 3),
            "summary": cached.body if cached else None}


@router.get("/summary")
async def get_summary(request: Request, fresh: bool = False) -> Response:
    """This zone's subtree as one resource pool: own providers plus children's summaries
    (`fresh=true`: ask the children again first, down the whole subtree)."""
    deps.require_admin(request, "strato:summary:show")
    # The zones that asked (this one is last): a summary that would count one
    # of them is a 508, the tree has a cycle.
    body = await tree_of(request).summary(fresh=fresh, callers=ZONE_PATH.get()[:-1])
    # Read as it answers, not when the summary was made: its parent tells its
    # clock from this (zone/clock.py).
    return json_response({**body, "clock": time.time()})


@router.get("/groups/{name}")
async def get_group(request: Request, name: str) -> Response:
    """Where the members of a server group are in this zone's subtree (parents
    ask before placing members under rules wider than one child zone)."""
    deps.require_admin(request, "strato:groups:show")
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,255}", name):
        raise errors.BadRequest(f"group name {name[:64]!r} is not valid: 1 to 255 letters, "
                                "digits or _ . : -")
    return json_response(await tree_of(request).group_members(name))


@router.get("/children")
async def list_children(request: Request) -> Response:
    deps.require_admin(request, "strato:children:list")
    tree = tree_of(request)
    kids = await tree.children()
    doubt = await tree.in_doubt_counts()
    return json_response({"children": [_view(tree, c, doubt) for c in kids]})


@router.post("/children", status_code=201, dependencies=[Depends(bounded_faults(ChildSpec))])
async def create_child(request: Request, body: ChildSpec) -> Response:
    """Add (201) or update (200) a child zone; its summary is fetched at once.

    An admin, or a zone registering itself with this zone's registration token
    (role `zone`: it may do this and nothing else, and may not take over a
    name registered with another zone's identity, live or not)."""
    ctx = deps.context(request)
    if not (ctx.is_admin or REGISTRATION_ROLE in ctx.roles):
        raise errors.Forbidden("Policy does not allow strato:children:create to be performed.")
    workers = request.app.state.settings.workers
    if workers > 1:
        raise errors.Conflict(
            f"this zone runs {workers} server processes (strato serve --workers): a zone "
            "with children runs one, since its checks of consumers in flight and of "
            "zone loops are per process; restart it with --workers 1 first")
    tree = tree_of(request)
    _callable_here(tree, body.url)
    _within_prefix(tree, body)
    await _not_this_zone(request, tree, body)
    if await tree.closes_cycle(body.url, body.credential):
        raise errors.Conflict(
            f"url: zone {body.name!r} at {body.url} has this zone ({tree.config.name!r}) in "
            f"its subtree already (its summary counts it): as a child of "
            f"{tree.config.name!r} it would close the cycle {tree.config.name} -> "
            f"{body.name} -> ... -> {tree.config.name}. To make it a child, "
            f"remove the registration that puts {tree.config.name!r} below {body.name!r} "
            "first (DELETE /strato/v1/children/{name} at its parent), or register "
            f"{body.name!r} elsewhere", errors.ZONE_LOOP)
    identity = None if body.identity is None else hashlib.sha256(
        body.identity.encode()).hexdigest()

    def read() -> tuple[store.Child | None, store.Removed | None]:
        with deps.db(request).read() as conn:
            return store.find_child(conn, body.name), store.removed(conn, body.name)
    known, removed = await run_in_threadpool(read)
    if (body.rejoin and known is None and removed is not None
            and _same_zone(store.Child(body.name, removed.url or "", None, (), None,
                                       removed.identity_hash), body.url, identity)):
        # (Only the zone that was removed: another that held the name, removed
        # by mistake, does not lock the name's real zone out.)
        raise errors.Conflict(
            f"name: zone {body.name!r} was removed from zone {tree.config.name!r} by an "
            f"operator at {removed.at.isoformat(timespec='seconds')}Z; it registers again "
            "when it is restarted, or when an admin adds it (strato children add)",
            errors.ZONE_REMOVED)
    if (not ctx.is_admin and known is not None and known.identity_hash is not None
            and known.identity_hash != identity):
        raise errors.Conflict(
            f"name: zone {body.name!r} is registered with another zone's identity; a zone "
            "may register only itself (an admin can remove the name first)")
    if known is not None and not _same_zone(known, body.url, identity) \
            and await tree.answers_as(known):
        raise errors.Conflict(
            f"name: zone {body.name!r} is registered to a live zone at {known.url}; only "
            "that zone (with its own identity) can register the name again. Stop it, or "
            f"remove it first (DELETE /strato/v1/children/{body.name})")

    if known is not None and not _same_zone(known, body.url, identity):
        # (Allowed: the zone registered under the name does not answer, or an
        # admin registers it; said, as the old one may come back to find it taken.)
        log.warning("child zone %r registered again by another zone: %s -> %s%s", body.name,
                    known.url, body.url, " (an admin)" if ctx.is_admin else "")
    elif known is None and body.rejoin:
        # This zone lost its record of the child (a database restored from a
        # backup, or started afresh) while the child kept running.
        log.warning("child zone %r at %s registered again: it had not heard from this zone "
                    "for a while, and this zone had no record of it", body.name, body.url)

    def write() -> tuple[store.Child, bool]:
        with deps.db(request).write() as conn:
            return store.upsert_child(conn, body.name, body.url, body.location_prefix,
                                      body.tags, body.credential, identity)
    child, created = await run_in_threadpool(write)
    tree.forget_children()
    tree.forget_child(child.name)
    if await tree.fetch_summary(child) is not None:
        # A child that comes back registers again: settle what is in doubt there.
        doubt = await tree.in_doubt_counts()
        if doubt.get(child.name):
            tree.spawn(tree.reconcile(child.name))
    return json_response(_view(tree, child), 201 if created else 200)


@router.delete("/children/{name}")
async def delete_child(request: Request, name: str) -> Response:
    deps.require_admin(request, "strato:children:delete")
    tree = tree_of(request)

    def write() -> None:
        with deps.db(request).write() as conn:
            store.delete_child(conn, name)
    await run_in_threadpool(write)
    tree.forget_children()
    tree.forget_child(name)
    return Response(status_code=204)


def _callable_here(tree: ZoneTree, url: str) -> None:
    """400 unless this zone's transport calls zones at `url` (inproc:// only
    in an in-process tree)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme not in tree.transport.schemes:
        raise errors.BadRequest(
            f"url: this zone calls its children over "
            f"{' or '.join(sorted(tree.transport.schemes))}, not {scheme}:// "
            f"(got {url[:200]!r})")


def _within_prefix(tree: ZoneTree, body: ChildSpec) -> None:
    """400 for a child whose location prefix is outside this zone's: a request
    pinned there would never be sent to it (as for a provider here)."""
    own = canonical_location(tree.config.location_prefix)
    loc = body.location_prefix
    if own and loc is not None and loc != own and not loc.startswith(own + "/"):
        raise errors.BadRequest(
            f"location_prefix: {loc!r} is outside this zone's location prefix {own!r}: a "
            f"child zone here must be at {own!r} or below it ('{own}/...'), or have "
            "none")


async def _not_this_zone(request: Request, tree: ZoneTree, body: ChildSpec) -> None:
    """400 if `body` is this zone itself (by name, by its advertised address,
    or by a call to the URL that comes back here): its calls to its children
    would come back to it, round and round."""
    if body.name == tree.config.name:
        raise errors.BadRequest(f"name: {body.name!r} is this zone's own name; a zone cannot "
                                "be its own child (give each zone its own name: strato serve "
                                "--zone NAME; both are 'local' without it)"
                                if body.name == "local" else
                                f"name: {body.name!r} is this zone's own name; a zone cannot "
                                "be its own child")
    advertised = request.app.state.settings.advertise_url
    if advertised and body.url.lower() == advertised.rstrip("/").lower():
        raise errors.BadRequest(f"url: {body.url} is this zone's own address; a zone cannot "
                                "be its own child")
    if await tree.is_this_zone(body.url, body.credential):
        raise errors.BadRequest(f"url: {body.url} answers as this zone itself; a zone cannot "
                                "be its own child")


def _same_zone(known: store.Child, url: str, identity: str | None) -> bool:
    """A registration from the zone already known by this name: same identity,
    or (for a zone registered without one) the same address."""
    if known.identity_hash is not None and identity is not None:
        return hmac.compare_digest(known.identity_hash, identity)
    return known.url == url


class PendingRequest(BaseModel):
    """Held parts of a cross-zone placement, at the zone `path` names."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: list[str] = Field(default_factory=list, max_length=32)
    consumers: list[str] = Field(min_length=1, max_length=1000)

    @field_validator("consumers")
    @classmethod
    def _consumers(cls, v: list[str]) -> list[str]:
        try:
            return [str(uuidlib.UUID(c)) for c in v]
        except ValueError:
            raise ValueError("consumers: every item must be a consumer UUID") from None


async def _forward(tree: ZoneTree, route: str, payload: dict[str, Any]) -> Response:
    """Pass a claim message one level down the zone path (see
    ZoneTree.forward_claim: recorded as a part of its request first)."""
    reply = await tree.forward_claim(route, payload)
    return json_response(reply.body, reply.status)


@router.post("/claims", dependencies=[Depends(bounded_faults(ClaimRequest))])
async def create_claim(request: Request, body: ClaimRequest) -> Response:
    """Claim the given placements at their owner: here if `path` is empty, else
    forwarded to the child `path[0]` (all or nothing; 409 if they no longer fit)."""
    deps.require_admin(request, "strato:claims:create")
    tree = tree_of(request)
    payload = body.model_dump(mode="json")
    if body.path:
        return await _forward(tree, "/strato/v1/claims", payload)
    owner = await _owner_below(request, tree, body)
    if owner is not None:
        # Providers of a zone below (a parent writing allocations across zones
        # knows only which child has them): claimed there, and the answer
        # says the path, for the confirm or release that follows.
        reply = await tree.forward_claim("/strato/v1/claims", {**payload, "path": [owner]})
        answer = reply.body
        if reply.status == 200 and isinstance(answer, dict):
            below = answer.get("path")
            answer = {**answer, "path": [owner, *(below if isinstance(below, list) else [])]}
        return json_response(answer, reply.status)
    answer = await run_in_threadpool(tree.local.claim_placements, payload)
    if body.deadline is not None and body.hold_ttl is None and not answer.get("replayed"):
        # A parent zone claimed a plan here (it sends a deadline; a held share
        # is confirmed or released next): room moved, and the answer carries
        # this zone's summary, as a schedule answer does.
        answer = {**answer, "zone_summary": await tree.summary()}
    return json_response(answer)


async def _owner_below(request: Request, tree: ZoneTree, body: ClaimRequest) -> str | None:
    """The child whose subtree has the providers `body` names, when none is
    this zone's; None when they are this zone's (or it has no children).
    400 when they are of several zones, or of none."""
    named = sorted({rp for p in body.placements for rp in p.allocations})
    if not named or not await tree.children():
        return None

    def here() -> set[str]:
        with deps.db(request).read() as conn:
            return set(providers.providers_by_uuid(conn, named))
    local = await run_in_threadpool(here)
    if len(local) == len(named):
        return None
    if local:
        raise errors.BadRequest("placements: the providers named are of this zone and of "
                                "zones below it; claim each zone's part there")
    owner = await subtree.owner_of(tree, tree.provider_zones, set(named), "1.39")
    if owner.child is None:
        raise errors.BadRequest(
            f"placements: provider {owner.unknown} is in no zone here or below"
            if owner.unknown else "placements: the providers named are of several zones "
            f"below ({', '.join(owner.zones)}); claim each zone's part there")
    return owner.child.name


@router.post("/claims/confirm", dependencies=[Depends(bounded_faults(PendingRequest))])
async def confirm_claims(request: Request, body: PendingRequest) -> Response:
    """Make held parts permanent (idempotent). 404 `strato.claim_expired` if any had
    expired and was released: the coordinator then undoes the other parts."""
    deps.require_admin(request, "strato:claims:confirm")
    tree = tree_of(request)
    if body.path:
        return await _forward(tree, "/strato/v1/claims/confirm", body.model_dump(mode="json"))

    def work() -> tuple[list[str], list[str]]:
        with deps.db(request).write() as conn:
            return provisional.confirm(conn, body.consumers)
    confirmed, gone = await run_in_threadpool(work)
    if gone:
        raise errors.NotFound(f"held claims expired and were released: {', '.join(gone)}",
                              "strato.claim_expired")
    return json_response({"confirmed": confirmed})


@router.post("/claims/release", dependencies=[Depends(bounded_faults(PendingRequest))])
async def release_claims(request: Request, body: PendingRequest) -> Response:
    """Undo held parts now rather than at their expiry (permanent ones stay)."""
    deps.require_admin(request, "strato:claims:release")
    tree = tree_of(request)
    if body.path:
        return await _forward(tree, "/strato/v1/claims/release", body.model_dump(mode="json"))

    def work() -> list[str]:
        with deps.db(request).write() as conn:
            return provisional.release(conn, body.consumers)
    return json_response({"released": await run_in_threadpool(work)})


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    request_id: str = Field(min_length=1, max_length=255, pattern=REQUEST_ID_PATTERN)


@router.post("/requests/cancel", dependencies=[Depends(bounded_faults(CancelRequest))])
async def cancel_request(request: Request, body: CancelRequest) -> Response:
    """A parent lost the answer to `request_id` and placed it elsewhere: undo
    what the request placed in this zone's subtree, or refuse it if it arrives
    later (idempotent). Children get the cancel as `{request_id}@{this zone}`;
    those that do not answer get it when they answer again.

    Only the zone that sent the request may cancel it: the parent, with its
    link token, for the requests it sends (ids it made, `…@parent#…`, never
    this zone's own parts), or an admin; a service user may not cancel
    another caller's request."""
    ctx = deps.require_admin(request, "strato:requests:cancel")
    maker = attempt.part_zone(body.request_id)
    if "admin" not in ctx.roles and not (deps.is_parent(ctx) and maker is not None
                                         and maker != tree_of(request).config.name):
        raise errors.Forbidden(
            "Policy does not allow strato:requests:cancel to be performed: a request is "
            "cancelled only by the zone that sent it (its parent zone) or an admin")
    return json_response(await tree_of(request).cancel(body.request_id))


_CURSOR = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\|(.{1,255})$", re.S)
_MAX_AGE_S = 10 * 366 * 86400.0


@router.get("/requests")
async def list_requests(request: Request, made_by: str, newer_than: float,
                        older_than: float = 0.0, after: str | None = None,
                        limit: int = 1000) -> Response:
    """The requests this zone holds, or may hold something for, that zone
    `made_by` sent (its part ids, ``…@made_by#xxxxxxxx``): those recorded
    between `newer_than` and `older_than` seconds ago (this zone's clock:
    ages, so that the two zones' clocks need not agree), oldest first, at
    most `limit`, after the cursor `after` (the previous page's `next`).

    A zone restarting asks its children for this (zone/sweep.py): a part it
    recorded without waiting for the disk, lost with the machine, shows up
    here and is cancelled. Only that zone (its parent link) or an admin may
    ask."""
    ctx = deps.require_admin(request, "strato:requests:list")
    tree = tree_of(request)
    if not re.match(_ZONE_NAME, made_by):
        raise errors.BadRequest("made_by: a zone name ([A-Za-z0-9_.-], at most 63)")
    if "admin" not in ctx.roles and (made_by == tree.config.name
                                     or not deps.is_parent(ctx)):
        raise errors.Forbidden(
            "Policy does not allow strato:requests:list to be performed: a zone lists "
            "only the requests its parent sent, for that parent, or for an admin")
    for name, value in (("newer_than", newer_than), ("older_than", older_than)):
        if not 0.0 <= value <= _MAX_AGE_S:
            raise errors.BadRequest(f"{name}: seconds, from 0 to {_MAX_AGE_S:.0f}")
    if not 1 <= limit <= 10_000:
        raise errors.BadRequest("limit: from 1 to 10000")
    cursor: tuple[datetime, str] | None = None
    if after is not None:
        found = _CURSOR.match(after)
        if found is None:
            raise errors.BadRequest("after: the `next` of an earlier page")
        try:
            cursor = (datetime.fromisoformat(found.group(1)), found.group(2))
        except ValueError:
            raise errors.BadRequest("after: the `next` of an earlier page") from None
    now = datetime.now(UTC).replace(tzinfo=None)  # utcnow() drops the fraction
    rows = await run_in_threadpool(
        tree.made_by, made_by, now - timedelta(seconds=newer_than),
        now - timedelta(seconds=older_than), cursor, limit)
    last = rows[-1] if len(rows) == limit else None
    return json_response({
        # Exactly that zone's (SQLite's LIKE ignores case).
        "requests": [{"request_id": rid} for rid, _ in rows
                     if attempt.part_zone(rid) == made_by],
        "next": None if last is None
        else f"{last[1].replace(microsecond=0).isoformat()}|{last[0]}"})
