"""What zones say to each other: one set of typed, bounded, versioned models.

A parent sends requests down the tree and reads its children's replies; a
child's reply is input like any other. Everything a zone reads from another
zone goes through a ``read_*`` function of this module, which validates the
shape (strict types, bounded strings, lists and numbers: no NaN, no
infinities, no floats where counts belong) and, where a request is known,
the consistency of the reply with it (only the consumers asked, each once,
amounts as asked). Any violation raises ``Faulty`` with a short reason that
names the field: the caller marks the child faulty and discards the reply.

The ``read_*`` functions return plain dicts (the tree works on dicts) holding
only the fields this protocol version knows and that the reply set: a field
a newer child adds is dropped rather than trusted, and a reply keeps its
shape otherwise (no defaults are filled in).
"""

from __future__ import annotations

import ipaddress
import math
import re
import uuid as uuidlib
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from strato.model import errors
from strato.model.schedule import MAX_CONSUMERS, ScheduleRequest
from strato.zone.attempt import part_zone

# Sent as the x-strato-zone-protocol header on every zone-to-zone call. Bump it
# when a message changes incompatibly.
ZONE_PROTOCOL = "2"

# Counts and amounts stay below 2**53: exact in JSON for every client, and far
# above any real inventory, so a larger figure is a lie or a bug.
MAX_COUNT = 2**53
MAX_NAME = 255
MAX_CLASSES = 1_000
MAX_TRAITS = 10_000
MAX_TAGS = 10_000
MAX_CHILDREN = 10_000
MAX_PATH = 32
# A summary names at most this many zones (the ids of the zone processes it
# covers); a larger subtree names its nearest ones.
MAX_ZONE_IDS = 10_000
MAX_PROVIDERS_PER_PLACEMENT = 64
MAX_RULES = 64
# Free-form parts (explain) are capped by their serialised size and depth.
# (generous: an honest explain nests ~4 levels per zone level and lists every
# child it asked; the whole reply is capped by the transport anyway).
MAX_EXPLAIN_BYTES = 1024 * 1024
MAX_EXPLAIN_DEPTH = 96
MAX_TEXT = 4096
# Error details name every child's reason: longer than other texts.
MAX_DETAIL = 64 * 1024

_ZONE_NAME = r"^[^/\s]{1,255}$"
_CLASS = re.compile(r"^[A-Z0-9_]{1,255}$")

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Amount = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Detail = Annotated[str, Field(max_length=MAX_DETAIL)]
ZoneName = Annotated[str, Field(pattern=_ZONE_NAME)]
# A zone process's id, as PATH_HEADER carries it (api/app.py draws it).
ZoneId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
Score = Annotated[float, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_COUNT)]


class Faulty(Exception):
    """A zone's reply is malformed or inconsistent with what was asked."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Message(BaseModel):
    # strict: no "1" for 1, no 1.0 or true for an int; no NaN or infinity.
    # extra="ignore": a newer zone's additional fields are dropped, not refused,
    # so that a tree can be upgraded one zone at a time.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, allow_inf_nan=False)


def _check_uuid(value: str, what: str) -> str:
    try:
        uuidlib.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"{what} must be a UUID") from None
    return value


def _check_classes(value: Mapping[str, Any]) -> None:
    for name in value:
        if not _CLASS.match(name):
            raise ValueError(f"{name[:40]!r} is not a resource class name")


def _check_free_form(value: Any) -> Any:
    """Explain-like parts: any JSON, but bounded in size and depth."""
    if value is None:
        return None
    depth = _depth(value, 0)
    if depth > MAX_EXPLAIN_DEPTH:
        raise ValueError(f"nested deeper than {MAX_EXPLAIN_DEPTH}")
    try:
        size = len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        raise ValueError("not JSON") from None
    if size > MAX_EXPLAIN_BYTES:
        raise ValueError(f"{size} bytes, more than {MAX_EXPLAIN_BYTES}")
    return value


def _depth(value: Any, level: int) -> int:
    # Stops descending past the limit: a hostile depth costs no more than that.
    if level > MAX_EXPLAIN_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN or infinity")
    return level


# -- summary -----------------------------------------------------------------------------

class ClassUsage(_Message):
    capacity: Count
    used: Count
    largest_free: Count
    # Bounds of a spread score (zone/summary.py); None from an older zone.
    best_share: Annotated[float, Field(ge=0.0, le=1.0, strict=False)] | None = None
    max_capacity: Count | None = None


class ChildRow(_Message):
    name: Name
    healthy: bool
    age_s: Seconds | None = None


class Summary(_Message):
    """GET /strato/v1/summary: a zone's subtree as one resource pool (zone/summary.py)."""

    zone: ZoneName
    location_prefix: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    tags: list[Name] = Field(default_factory=list, max_length=MAX_TAGS)
    health: Name = "ok"
    as_of: Name | None = None
    providers: Count
    classes: dict[str, ClassUsage] = Field(max_length=MAX_CLASSES)
    traits: list[Name] = Field(default_factory=list, max_length=MAX_TRAITS)
    tags_present: list[Name] = Field(default_factory=list, max_length=MAX_TAGS)
    freed: Count = 0
    children: list[ChildRow] = Field(default_factory=list, max_length=MAX_CHILDREN)
    # Zones below that could not be asked (paths relative to this zone).
    unreachable: list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]] = Field(
        default_factory=list, max_length=MAX_CHILDREN)
    # Those of `unreachable` left out because the tree has a cycle through them.
    loops: list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]] = Field(
        default_factory=list, max_length=MAX_CHILDREN)
    # Children whose summaries count a zone counted through another child (a
    # zone registered under both): their figures are maxima, not sums.
    overlaps: list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]] = Field(
        default_factory=list, max_length=MAX_CHILDREN)
    # The zones whose providers it counts, this one first (None: an older
    # zone). A parent that finds its own id there is in a cycle with it.
    zone_ids: list[ZoneId] | None = Field(default=None, max_length=MAX_ZONE_IDS)
    # The zone's clock (Unix time) as it answered (zone/clock.py); None: an
    # older zone.
    clock: Annotated[float, Field(gt=0.0, lt=2.0**40)] | None = None

    @field_validator("classes")
    @classmethod
    def _classes(cls, v: dict[str, ClassUsage]) -> dict[str, ClassUsage]:
        _check_classes(v)
        for rc, c in v.items():
            # One root provider's free room is part of the pool's capacity.
            if c.largest_free > c.capacity:
                raise ValueError(f"{rc}: largest_free {c.largest_free} > capacity "
                                 f"{c.capacity}")
        return v


# -- schedule ----------------------------------------------------------------------------

class Allocation(_Message):
    resources: dict[str, Amount] = Field(min_length=1, max_length=MAX_CLASSES)
    # Set on a part held on a zone's shared pool: that zone's name.
    zone: ZoneName | None = None

    @field_validator("resources")
    @classmethod
    def _classes(cls, v: dict[str, int]) -> dict[str, int]:
        _check_classes(v)
        return v


class PlacementPart(_Message):
    """One consumer's placement in a schedule answer (model/schedule.py Placement)."""

    consumer_uuid: str
    provider: Name
    allocations: dict[str, Allocation] = Field(min_length=1,
                                               max_length=MAX_PROVIDERS_PER_PLACEMENT)
    location: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    score: Score = 0.0
    zone: Annotated[str, Field(min_length=1, max_length=MAX_PATH * 256)]
    shared_zone: ZoneName | None = None

    @field_validator("consumer_uuid")
    @classmethod
    def _consumer(cls, v: str) -> str:
        return _check_uuid(v, "consumer_uuid")

    @field_validator("allocations")
    @classmethod
    def _providers(cls, v: dict[str, Allocation]) -> dict[str, Allocation]:
        for rp in v:
            _check_uuid(rp, "allocations key")
        return v

    @field_validator("zone")
    @classmethod
    def _path(cls, v: str) -> str:
        segs = v.split("/")
        if len(segs) > MAX_PATH or not all(re.match(_ZONE_NAME, s) for s in segs):
            raise ValueError("must be a path of at most 32 zone names")
        return v


class Relaxed(_Message):
    index: Annotated[int, Field(ge=0, le=MAX_RULES)]
    type: Name
    weight: Score
    rule: Text


class ScheduleAnswer(_Message):
    """POST /strato/v1/schedule answered 200 by a child."""

    placements: list[PlacementPart] = Field(max_length=MAX_CONSUMERS)
    relaxed: list[Relaxed] = Field(default_factory=list, max_length=MAX_RULES)
    retries: Count = 0
    dry_run: bool
    request_id: Annotated[str, Field(min_length=1, max_length=MAX_NAME)] | None = None
    unplaced: list[str] = Field(default_factory=list, max_length=MAX_CONSUMERS)
    explain: dict[str, Any] | None = None
    replayed: bool = False
    detail: Detail | None = None
    zone_summary: Summary | None = None

    @field_validator("unplaced")
    @classmethod
    def _unplaced(cls, v: list[str]) -> list[str]:
        for c in v:
            _check_uuid(c, "unplaced[]")
        return v

    @field_validator("explain")
    @classmethod
    def _explain(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        out: dict[str, Any] | None = _check_free_form(v)
        return out


# -- claims, confirm, release, cancel -----------------------------------------------------

class ClaimedPart(_Message):
    consumer_uuid: str
    zone: ZoneName

    @field_validator("consumer_uuid")
    @classmethod
    def _consumer(cls, v: str) -> str:
        return _check_uuid(v, "consumer_uuid")


class ClaimAnswer(_Message):
    """POST /strato/v1/claims answered 200 (at the owner, passed up unchanged)."""

    claimed: list[str] = Field(max_length=MAX_CONSUMERS)
    providers: list[Name] = Field(default_factory=list,
                                  max_length=MAX_CONSUMERS * MAX_PROVIDERS_PER_PLACEMENT)
    placements: list[ClaimedPart] = Field(default_factory=list, max_length=MAX_CONSUMERS)
    replayed: bool = False
    zone_summary: Summary | None = None
    # Where below the zone asked the claim was made, when that zone found the
    # owner itself (a claim naming providers of a grandchild): the path to
    # confirm or release it by.
    path: list[Name] = Field(default_factory=list, max_length=32)


class ConfirmAnswer(_Message):
    confirmed: list[str] = Field(max_length=MAX_CONSUMERS)


class ReleaseAnswer(_Message):
    released: list[str] = Field(max_length=MAX_CONSUMERS)


class CancelAnswer(_Message):
    """POST /strato/v1/requests/cancel answered 200."""

    request_id: Name
    released: list[str] = Field(default_factory=list, max_length=MAX_CONSUMERS)
    forwarded: list[Name] = Field(default_factory=list, max_length=MAX_CHILDREN)
    deferred: list[Name] = Field(default_factory=list, max_length=MAX_CHILDREN)


class RequestRef(_Message):
    request_id: str = Field(min_length=1, max_length=255)


class RequestsPage(_Message):
    """GET /strato/v1/requests answered 200 (one page)."""

    requests: list[RequestRef] = Field(max_length=10_000)
    next: str | None = Field(default=None, max_length=300)


def read_requests_page(zone: str, body: Any) -> dict[str, Any]:
    """A page of the requests `zone` sent a child: {request_ids, next}. Every
    id must be one of `zone`'s part ids (the child was asked for no other)."""
    page = _parse(RequestsPage, body, "requests page")
    ids = [r.request_id for r in page.requests]
    if any(part_zone(rid) != zone for rid in ids):
        raise Faulty(f"requests page: an id that zone {zone} did not make")
    return {"request_ids": ids, "next": page.next}


# -- server groups -------------------------------------------------------------------------

class GroupMember(_Message):
    consumer: Name
    location: Annotated[str, Field(max_length=MAX_NAME)] | None = None
    zone: Annotated[str, Field(max_length=4 * MAX_NAME)]

    @field_validator("consumer")
    @classmethod
    def _consumer(cls, v: str) -> str:
        return _check_uuid(v, "consumer")


class GroupMembers(_Message):
    """GET /strato/v1/groups/{name} answered 200: the group's members below."""

    group: Name
    members: list[GroupMember] = Field(max_length=MAX_CONSUMERS * 10)
    unreachable: list[Name] = Field(default_factory=list, max_length=MAX_CHILDREN)


def read_group_members(group: str, zone: str, body: Any) -> dict[str, Any]:
    """A child's members of `group`; every zone path starts with the child's name."""
    answer = _parse(GroupMembers, body, "group members")
    if answer.group != group:
        raise Faulty(f"group members: group {answer.group[:40]!r}, not {group[:40]!r}")
    for i, m in enumerate(answer.members):
        if m.zone.split("/")[0] != zone:
            raise Faulty(f"group members: members.{i}.zone does not start with {zone!r}")
    return _dump(answer)


# -- errors and registration --------------------------------------------------------------

class ErrorItem(_Message):
    status: Annotated[int, Field(ge=100, le=599)]
    title: Text = ""
    detail: Detail = ""
    code: Annotated[str, Field(max_length=MAX_NAME)] = ""
    request_id: Annotated[str, Field(max_length=MAX_NAME)] | None = None


class ErrorBody(_Message):
    """Placement's error body; a no-valid-placement answer carries `explain` beside it."""

    errors: list[ErrorItem] = Field(min_length=1, max_length=16)
    explain: dict[str, Any] | None = None

    @field_validator("explain")
    @classmethod
    def _explain(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        out: dict[str, Any] | None = _check_free_form(v)
        return out


# -- addresses and paths ------------------------------------------------------------------

# Sent on every zone-to-zone call made while answering a request: the ids of
# the zones the request passed through, first the one a client asked, comma
# separated. A zone that finds its own id there, or more than MAX_PATH ids,
# refuses the call (508, strato.zone_loop): the tree has a cycle.
PATH_HEADER = "x-strato-zone-path"
# Sent with a subtree read that adds figures up (GET /usages): the ids of the
# zones the asking zone counts through another child already (a zone
# registered under two of its children: a diamond). The zone asked leaves out
# each child whose own id is among them, and passes them on.
COUNTED_HEADER = "x-strato-counted-zones"
_ZONE_ID = re.compile(r"^[0-9a-f]{1,64}$")


def counted_zones(raw: str | None) -> frozenset[str]:
    """COUNTED_HEADER's zone ids (what does not look like one is ignored)."""
    if not raw:
        return frozenset()
    ids = (z.strip() for z in raw.split(",", MAX_ZONE_IDS)[:MAX_ZONE_IDS])
    return frozenset(z for z in ids if _ZONE_ID.match(z))


# Where a zone may be called: over HTTP(S), or inproc://name in an in-process
# tree (strato/zone/inprocess.py).
ZONE_URL_SCHEMES = ("http", "https", "inproc")
_HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})$")
# A path prefix (a zone behind a reverse proxy): RFC 3986 path characters only.
_URL_PATH = re.compile(r"^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*$")


def zone_url(url: str, schemes: Collection[str] = ZONE_URL_SCHEMES) -> str:
    """`url` without its trailing slash if a zone can be called there:
    ``scheme://host[:port][/path prefix]`` with a scheme of `schemes`, a host
    name or IP address (IPv6 in brackets), a port from 1 to 65535, and
    nothing else (no user, query or fragment; no space or control
    character: the URL goes into request lines and headers). ValueError
    saying what is wrong otherwise."""
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError("must not contain spaces, control or non-ASCII characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        # urlsplit's own words: "Invalid IPv6 URL", "Port out of range 0-65535".
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in schemes:
        raise ValueError(f"scheme must be {' or '.join(f'{s}://' for s in schemes)}")
    if "@" in parts.netloc:
        raise ValueError("no user or password: the child's token is its credential")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError("no query or fragment")
    host = parts.hostname or ""
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host[:64]!r} is not an IPv6 address") from None
    elif not _HOST.match(host) or ".." in host:
        raise ValueError("a host name or address is required")
    if port == 0 or parts.netloc.endswith(":"):
        raise ValueError("port must be from 1 to 65535")
    if parts.scheme == "inproc" and (port is not None or parts.path.strip("/")):
        raise ValueError("inproc:// names a zone: inproc://name, nothing else")
    if not _URL_PATH.match(parts.path):
        raise ValueError("the path may hold only URL path characters")
    return url.rstrip("/")


# A token that is sent as a header value: no control character (a CR or LF
# would let a registering zone write headers of its own into our calls).
TOKEN_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class Registration(_Message):
    """POST {parent}/strato/v1/children: a child introduces itself."""

    model_config = ConfigDict(extra="forbid")
    name: ZoneName
    url: Annotated[str, Field(min_length=1, max_length=1024)]
    location_prefix: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    tags: list[Name] = Field(default_factory=list, max_length=MAX_TAGS)
    credential: Annotated[str, Field(max_length=1024, pattern=TOKEN_PATTERN)] | None = None
    identity: Annotated[str, Field(min_length=16, max_length=256)] | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        zone_url(v)
        return v


# -- reading replies ----------------------------------------------------------------------

M = TypeVar("M", bound=_Message)


def _parse(model: type[M], body: Any, what: str) -> M:
    if not isinstance(body, dict):
        raise Faulty(f"{what}: not a JSON object ({type(body).__name__})")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise Faulty(f"{what}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    """The first problem, naming the field (`placements.0.allocations...`)."""
    errs = exc.errors(include_url=False, include_input=False)
    if not errs:
        return "invalid"
    e = errs[0]
    where = ".".join(str(p) for p in e["loc"]) or "body"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{where}: {e['msg']}"[:300] + more


def _dump(m: BaseModel) -> dict[str, Any]:
    # Only what the reply set: the caller sees the reply's own shape.
    return m.model_dump(mode="json", exclude_unset=True)


def read_summary(body: Any) -> dict[str, Any]:
    """A child's summary, validated. Raises Faulty."""
    return _dump(_parse(Summary, body, "summary"))


def demand(req: ScheduleRequest) -> dict[str, int]:
    """What one instance of `req` asks for, per resource class (all groups)."""
    out: dict[str, int] = {}
    for g in req.groups:
        for rc, n in g.resources.items():
            out[rc] = out.get(rc, 0) + n
    return out


def read_schedule_answer(req: ScheduleRequest, body: Any, zone: str) -> dict[str, Any]:
    """A child's 200 answer to `req`, validated and checked against it.

    `zone` is the child's own name: every placement's zone path starts with it.
    Raises Faulty on a malformed answer, a consumer not asked or given twice,
    consumers left unaccounted for, a partial answer to an atomic request, or
    allocations that do not add up to what the request asks per instance.
    """
    answer = _parse(ScheduleAnswer, body, "schedule answer")
    # Plain loops, not Counters: this runs on every answer at every routing
    # hop, and a few consumers are the common case.
    asked = set(req.consumers)
    seen: dict[str, int] = {}
    for c in [*(p.consumer_uuid for p in answer.placements), *answer.unplaced]:
        seen[c] = seen.get(c, 0) + 1
    for c, n in seen.items():
        if c not in asked:
            raise Faulty(f"schedule answer: placements: consumer {c} was not asked")
        if n > 1:
            raise Faulty(f"schedule answer: placements: consumer {c} answered {n} times")
    if len(seen) < len(asked):
        missing = asked.difference(seen)
        raise Faulty(f"schedule answer: {len(missing)} consumer(s) neither placed nor "
                     f"unplaced (e.g. {min(missing)})")
    if req.atomic and answer.unplaced:
        raise Faulty(f"schedule answer: unplaced: {len(answer.unplaced)} consumer(s) left "
                     "out of an atomic request")
    if answer.dry_run != req.dry_run:
        raise Faulty(f"schedule answer: dry_run is {str(answer.dry_run).lower()} for a "
                     f"request with dry_run {str(req.dry_run).lower()}")
    want = demand(req)
    for i, p in enumerate(answer.placements):
        if p.zone.split("/", 1)[0] != zone:
            raise Faulty(f"schedule answer: placements.{i}.zone: {p.zone[:80]!r} does not "
                         f"start with {zone!r}")
        allocs = list(p.allocations.values())
        if len(allocs) == 1:
            got = allocs[0].resources
        else:
            got = {}
            for a in allocs:
                for rc, n in a.resources.items():
                    got[rc] = got.get(rc, 0) + n
        if got != want:
            raise Faulty(f"schedule answer: placements.{i}.allocations: {dict(got)} is not "
                         f"what one instance asks ({want})")
    return _dump(answer)


def read_claim_answer(consumers: Collection[str], body: Any) -> dict[str, Any]:
    """A 200 answer to POST /strato/v1/claims: exactly the consumers claimed."""
    answer = _parse(ClaimAnswer, body, "claim answer")
    claimed = Counter(answer.claimed)
    if set(claimed) != set(consumers) or any(n > 1 for n in claimed.values()):
        extra = sorted(set(claimed) - set(consumers))
        why = (f"consumer {extra[0]} was not asked" if extra
               else "not exactly the consumers asked")
        raise Faulty(f"claim answer: claimed: {why}")
    return _dump(answer)


def _subset(model: type[M], body: Any, what: str, field: str,
            consumers: Collection[str]) -> dict[str, Any]:
    answer = _parse(model, body, what)
    listed = getattr(answer, field)
    stray = set(listed) - set(consumers)
    if stray:
        raise Faulty(f"{what}: {field}: consumer {min(stray)} was not asked")
    return _dump(answer)


def read_confirm_answer(consumers: Collection[str], body: Any) -> dict[str, Any]:
    """A 200 answer to POST /strato/v1/claims/confirm: only consumers asked."""
    return _subset(ConfirmAnswer, body, "confirm answer", "confirmed", consumers)


def read_release_answer(consumers: Collection[str], body: Any) -> dict[str, Any]:
    """A 200 answer to POST /strato/v1/claims/release: only consumers asked."""
    return _subset(ReleaseAnswer, body, "release answer", "released", consumers)


def read_cancel_answer(request_id: str, body: Any) -> dict[str, Any]:
    """A 200 answer to POST /strato/v1/requests/cancel, for `request_id`."""
    answer = _parse(CancelAnswer, body, "cancel answer")
    if answer.request_id != request_id:
        raise Faulty("cancel answer: request_id is not the one cancelled")
    return _dump(answer)


def read_error(body: Any) -> dict[str, Any]:
    """A non-2xx answer's error body (Placement's shape). Raises Faulty."""
    return _dump(_parse(ErrorBody, body, "error body"))


def is_loop(status: int, body: Any) -> bool:
    """Whether a zone's answer refuses a cycle of the tree: 508 with the code
    strato.zone_loop (its own, or passed up from a zone below it)."""
    if status != errors.LoopDetected.status:
        return False
    try:
        return any(e.get("code") == errors.ZONE_LOOP for e in read_error(body)["errors"])
    except Faulty:
        return False


def read_registration(body: Any) -> dict[str, Any]:
    """A child's registration body. Raises Faulty."""
    return _dump(_parse(Registration, body, "registration"))
