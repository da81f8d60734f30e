"""The schedule request and answer: Strato's own wire format (/strato/v1/schedule).

Typed and validated here, once, so that the API, the zone tree (which passes
requests between zones) and the CLI share one definition. Unknown fields are
refused everywhere.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from strato.model import errors
from strato.model.location import LocationError, canonical_tags, parse_location

# A server group's name (GET /strato/v1/groups/{name} takes the same).
GroupName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,255}$")]
# An idempotency key: any printable text (no control characters: PostgreSQL's
# text refuses NUL, and a log line must stay one line).
REQUEST_ID_PATTERN = r"^[^\x00-\x1f\x7f]{1,255}$"
# The type of a consumer's allocations: Placement's rule (microversion 1.38).
ConsumerType = Annotated[str, Field(pattern=r"^[A-Z0-9_]{1,255}$")]
# A trait's name in `required`, as Placement's schema has it.
_TRAIT = re.compile(r"[A-Z0-9_]{1,255}")
MAX_CONSUMERS = 1000
DEFAULT_LEVELS = ("site", "room", "rack", "host")


def _class_names(names: Iterable[str]) -> None:
    """ValueError for the first name that is not a resource class's form."""
    for name in names:
        if not re.fullmatch(r"[A-Z0-9_]{1,255}", name):
            raise ValueError(f"resource class {name[:64]!r} is not a valid name")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _uuid(value: str, field: str) -> str:
    try:
        return str(uuidlib.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"{field} must be a UUID, got {value!r}") from None


class RequestGroupSpec(_Strict):
    """One request group, as in Placement (resources, traits, aggregates, tree)."""

    suffix: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{1,64}$",
                               description="Granular group suffix; omit for the "
                               "unsuffixed group (first group) or to number them.")
    resources: dict[str, Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(min_length=1)
    required: list[str] = Field(default_factory=list,
                                description="Traits; '!TRAIT' forbids one; "
                                "'in:A,B' requires any of A and B.")
    member_of: list[list[str]] = Field(default_factory=list,
                                       description="Each inner list: any of these "
                                       "aggregates; all lists must match. '!uuid' forbids.")
    in_tree: str | None = None

    @field_validator("resources")
    @classmethod
    def _classes(cls, v: dict[str, int]) -> dict[str, int]:
        _class_names(v)
        return v

    @field_validator("required")
    @classmethod
    def _traits(cls, v: list[str]) -> list[str]:
        for t in v:
            names = t[3:].split(",") if t.startswith("in:") else [t.removeprefix("!")]
            if not all(_TRAIT.fullmatch(n) for n in names):
                raise ValueError(f"required: {t[:64]!r} is not a trait, '!TRAIT' or "
                                 "'in:TRAIT1,TRAIT2' (trait names: 1 to 255 of A-Z, 0-9, _)")
        return v

    @field_validator("in_tree")
    @classmethod
    def _tree(cls, v: str | None) -> str | None:
        return None if v is None else _uuid(v, "in_tree")

    @field_validator("member_of")
    @classmethod
    def _aggs(cls, v: list[list[str]]) -> list[list[str]]:
        out = []
        for anyof in v:
            if not anyof:
                raise ValueError("member_of lists must not be empty")
            out.append([("!" + _uuid(a[1:], "member_of")) if a.startswith("!")
                        else _uuid(a, "member_of") for a in anyof])
        return out


class _Rule(_Strict):
    hard: bool = True
    weight: float = Field(default=1.0, gt=0, le=1e6,
                          description="For soft rules: what breaking it costs; soft rules "
                          "are relaxed lowest weight first.")


class LocationRule(_Rule):
    type: Literal["location"]
    pattern: str = Field(description="'dfw/room1/*' (a trailing * matches one or more "
                         "segments, an inner * exactly one) or the pragma form "
                         "'machine1.rack1.room1.dfw', which names exactly that place.")

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        check = v.replace("*", "x")
        try:
            parse_location(check)
        except LocationError as exc:
            raise ValueError(str(exc)) from None
        return v


class TagsRule(_Rule):
    type: Literal["tags"]
    required: list[str] = Field(default_factory=list)
    forbidden: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tags(self) -> TagsRule:
        try:
            canonical_tags(self.required)
            canonical_tags(self.forbidden)
        except LocationError as exc:
            raise ValueError(str(exc)) from None
        if not self.required and not self.forbidden:
            raise ValueError("a tags rule needs required or forbidden tags")
        if set(self.required) & set(self.forbidden):
            raise ValueError("a tag cannot be both required and forbidden")
        return self


class SpreadRuleSpec(_Rule):
    type: Literal["affinity", "anti_affinity", "spread"]
    group: GroupName | None = Field(default=None, description="Server group; defaults to the "
                              "request's `group`. For `spread`, optional: its members "
                              "placed earlier count too.")
    level: str = Field(default="host", description="Failure-domain level: host, rack, "
                       "room, site (names configurable per zone), or `zone` (each child "
                       "zone of the zone that divides the request).")
    max_skew: int = Field(default=1, ge=1, le=MAX_CONSUMERS, description="`spread` only: "
                          "the most instances one domain may hold beyond the emptiest "
                          "domain that could take one (as kube-scheduler's "
                          "PodTopologySpread).")
    max_per_domain: int | None = Field(default=None, ge=1, le=MAX_CONSUMERS,
                                       description="`spread` only: at most this many in "
                                       "one domain.")

    @model_validator(mode="after")
    def _spread_only(self) -> SpreadRuleSpec:
        if self.type != "spread" and (self.max_skew != 1 or self.max_per_domain is not None):
            raise ValueError("max_skew and max_per_domain are for rules of type spread")
        return self


Constraint = Annotated[LocationRule | TagsRule | SpreadRuleSpec, Field(discriminator="type")]


class WeigherSpec(_Strict):
    name: Literal["spread", "pack"] = "spread"
    class_weights: dict[str, Annotated[float, Field(ge=0, le=1e6)]] = Field(
        default_factory=dict)
    spare: bool = Field(
        default=True, description="Keep hosts with a rare feature (a trait, tag or "
        "resource class that at most a quarter of the zone's hosts have) for the requests "
        "that ask for it: a request that does not is placed on them only when nothing "
        "else fits.")

    @field_validator("class_weights")
    @classmethod
    def _classes(cls, v: dict[str, float]) -> dict[str, float]:
        # As a group's resources (a class the zone does not know: check_names).
        _class_names(v)
        return v


class ScheduleRequest(_Strict):
    consumers: list[str] = Field(min_length=1, max_length=MAX_CONSUMERS,
                                 description="One consumer UUID per instance.")
    project_id: str = Field(min_length=1, max_length=255)
    user_id: str = Field(min_length=1, max_length=255)
    consumer_type: ConsumerType | None = None
    groups: list[RequestGroupSpec] = Field(min_length=1, max_length=64)
    group_policy: Literal["none", "isolate"] | None = None
    group: GroupName | None = Field(default=None,
                                    description="Server group the consumers join.")
    constraints: list[Constraint] = Field(default_factory=list, max_length=64)
    weigher: WeigherSpec = Field(default_factory=WeigherSpec)
    atomic: bool = True
    request_id: str | None = Field(default=None, min_length=1, max_length=255,
                                   pattern=REQUEST_ID_PATTERN)
    dry_run: bool = False
    explain: bool = False
    mode: Literal["delegate", "best"] = Field(
        default="delegate", description="Zone tree: `delegate` hands the request to the "
        "most promising child (one round trip per level); `best` asks every child for its "
        "best plan and claims the best of all.")
    good_enough: float | None = Field(
        default=None, ge=0, description="`best` mode: stop waiting for slower children "
        "once a plan scores at least this much.")
    hops: int = Field(default=0, ge=0, le=32, description="Set by parent zones: how many "
                      "zones this request has crossed (loop guard).")
    deadline: float | None = Field(
        default=None, gt=0, le=2**40, description="Unix time after which the caller no "
        "longer waits: a zone gives its children less, never acts on a request past it, "
        "and undoes what it claimed for one that runs out (503 `strato.zone_unavailable`). "
        "Set by parent zones; a client may set it too.")
    hold_ttl: float | None = Field(
        default=None, gt=0, le=3600, description="Set by parent zones for a placement "
        "that spans zones: claim provisionally, released after this many seconds unless "
        "confirmed (POST /strato/v1/claims/confirm).")

    @field_validator("consumers")
    @classmethod
    def _consumers(cls, v: list[str]) -> list[str]:
        out = [_uuid(c, "consumers[]") for c in v]
        if len(set(out)) != len(out):
            raise ValueError("consumers must not repeat")
        return out

    @model_validator(mode="after")
    def _consistent(self) -> ScheduleRequest:
        suffixes = [g.suffix for g in self.groups if g.suffix is not None]
        if len(set(suffixes)) != len(suffixes):
            raise ValueError("groups: suffixes must be unique")
        granular = sum(1 for i, g in enumerate(self.groups) if g.suffix or i > 0)
        if granular > 1 and self.group_policy is None:
            raise ValueError("group_policy is required with more than one granular group")
        for c in self.constraints:
            if (isinstance(c, SpreadRuleSpec) and c.type != "spread"
                    and (c.group or self.group) is None):
                raise ValueError(f"{c.type} needs a group: set `group` on the rule or the "
                                 "request")
        return self

    def suffixed_groups(self) -> list[tuple[str, RequestGroupSpec]]:
        """Groups with their suffixes: the first unnamed is unsuffixed, others numbered."""
        out = []
        for i, g in enumerate(self.groups):
            suffix = g.suffix if g.suffix is not None else ("" if i == 0 else str(i))
            out.append((suffix, g))
        return out


class ClaimFields(_Strict):
    """What a claim of chosen placements (POST /strato/v1/claims) has in common
    with a schedule request, under the same rules."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)
    consumer_type: ConsumerType | None = None
    group: GroupName | None = None


def check_claim(body: Mapping[str, Any]) -> None:
    """400 naming the field when a claim's `consumer_type` or `group` would not
    pass as a schedule request's (worded as the API words a body that does not
    validate, without echoing the value: it may be long)."""
    try:
        ClaimFields.model_validate(body)
    except ValidationError as exc:
        raise errors.BadRequest("; ".join(
            f"body.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False))) from None


class Placement(_Strict):
    consumer_uuid: str
    provider: str = Field(description="Root provider (host) of the placement.")
    allocations: dict[str, dict[str, Any]]
    location: str | None
    score: float
    zone: str = Field(description="Zone path of the owner, from the zone that answered "
                      "(e.g. global/dfw/dfw-r1).")
    shared_zone: str | None = Field(default=None, description="Zone whose shared pool "
                                    "holds part of the allocations, when it is another zone.")


class RelaxedRule(_Strict):
    index: int = Field(description="Position of the rule in the request's constraints.")
    type: str
    weight: float
    rule: str = Field(description="The rule, readable (e.g. 'anti_affinity web@rack').")


class ScheduleAnswer(_Strict):
    placements: list[Placement]
    relaxed: list[RelaxedRule]
    retries: int
    dry_run: bool
    request_id: str | None
    unplaced: list[str] = Field(default_factory=list,
                                description="Consumers left out (atomic=false only).")
    explain: dict[str, Any] | None = None
    replayed: bool = Field(default=False, description="This is the stored answer of an "
                           "earlier request with the same request_id; nothing was claimed.")
    detail: str | None = Field(default=None, description="/explain only: why nothing fits.")
    zone_summary: dict[str, Any] | None = Field(
        default=None, description="To a parent zone (hops > 0): this zone's summary after "
        "the claim, so the parent need not ask for it.")
