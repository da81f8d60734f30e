"""GET /allocation_candidates: Placement's question, answered by the engine.

The query string is parsed and validated here (per microversion, with
Placement's 400s); the answer comes from the process's engine, which is
created on first use and refreshed from the change log on every request.
Stale providers (silent agents, ../shared/DESIGN.md "Providers report
themselves") are left out of the answer; their allocations stay.
"""

from __future__ import annotations

import re
import threading
import time
import uuid as uuidlib
from collections import OrderedDict, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from strato.api import deps, query
from strato.api.microversion import (
    V1_10,
    V1_12,
    V1_15,
    V1_16,
    V1_17,
    V1_21,
    V1_25,
    V1_27,
    V1_29,
    V1_31,
    V1_33,
    V1_34,
    V1_35,
    V1_36,
    V1_39,
    Version,
    require,
)
from strato.api.responses import cache_headers, json_response
from strato.engine import CandidateRequest, CandidateResult, Engine, EngineConfig, RequestGroup
from strato.engine.candidates import INLINE_COMBINATIONS, Budget, TooBig, budget
from strato.engine.hosts import STALE_TTL_S, HostView
from strato.engine.request import GroupPolicy
from strato.model import errors
from strato.store.db import Database

router = APIRouter()

_SUFFIX = r"[1-9][0-9]*"
_SUFFIX_1_33 = r"[a-zA-Z0-9_-]{1,64}"
_GROUP_KEY = re.compile(rf"^(resources|required|member_of|in_tree)({_SUFFIX})?$")
_GROUP_KEY_1_33 = re.compile(rf"^(resources|required|member_of|in_tree)({_SUFFIX_1_33})?$")
_LIMIT = re.compile(r"^[1-9][0-9]*$")
_engine_lock = threading.Lock()


def get_engine(request: Request) -> Engine:
    """The process's engine, created once (under a lock) on first use."""
    state = request.app.state
    engine: Engine | None = getattr(state, "engine", None)
    if engine is None:
        with _engine_lock:
            engine = getattr(state, "engine", None)
            if engine is None:
                engine = Engine(deps.db(request), EngineConfig.from_env())
                state.engine = engine
    return engine


class StaleProviders:
    """The zone's stale providers for the engine, from the scheduler's host view.

    Asking the store costs a read transaction (~0.15 ms), a tenth of a whole
    answer at 10,000 providers; so the set is reused while the store's change
    sequence (which the engine has just read anyway) is unchanged and for at
    most STALE_TTL_S. Any write, e.g. a heartbeat that revives a provider or
    a PUT of its metadata, moves the sequence and is seen at once; silence
    turns a provider stale within about two TTLs (this one and the view's),
    next to a heartbeat window of 90 s. Called under the engine's lock.
    """

    def __init__(self, db: Database, hosts: HostView) -> None:
        self.db = db
        self.hosts = hosts
        self._cached: tuple[int, float, Collection[str]] | None = None

    def __call__(self, seq: int) -> Collection[str]:
        now = time.monotonic()
        cached = self._cached
        if cached is not None and cached[0] == seq and now - cached[1] < STALE_TTL_S:
            return cached[2]
        with self.db.read() as conn:
            self.hosts.refresh(conn)
            stale = self.hosts.stale(conn)
        self._cached = (seq, now, stale)
        return stale


def stale_providers(request: Request) -> StaleProviders | None:
    """The app's StaleProviders (None without a scheduler: nothing is excluded)."""
    state = request.app.state
    found: StaleProviders | None = getattr(state, "stale_providers", None)
    if found is None:
        hosts: HostView | None = getattr(getattr(state, "scheduler", None), "hosts", None)
        if hosts is None:
            return None
        with _engine_lock:
            found = getattr(state, "stale_providers", None)
            if found is None:
                found = StaleProviders(deps.db(request), hosts)
                state.stale_providers = found
    return found


@router.get("/allocation_candidates")
async def list_allocation_candidates(request: Request) -> Response:
    return await candidates_response(request)


async def candidates_response(request: Request) -> Response:
    """The answer to GET /allocation_candidates, or the Placement error it
    raises. The route's one implementation: api/fast.py calls it too, without
    the framework's routing, and leaves errors to the route."""
    v = require(request, V1_10)
    deps.authorize(request, "placement:allocation_candidates:list")
    parsed = parse_query(request.scope.get("query_string", b""), v)
    if _inline(request, parsed):
        # A query with a limit on a loaded index is answered on the event loop
        # (no hand-off to a worker thread), as the scheduler plans: one that
        # would examine more than INLINE_COMBINATIONS combinations of nested
        # providers is answered again in a worker thread instead.
        try:
            with budget(Budget(INLINE_COMBINATIONS, escalate=True)):
                return _answer(request, parsed, v)
        except TooBig:
            pass
    return await run_in_threadpool(_answer, request, parsed, v)


# A limit up to this is cheap to answer (the engine keeps the best `limit`).
INLINE_LIMIT = 1000


def _inline(request: Request, parsed: CandidateRequest) -> bool:
    """On the event loop: SQLite with one planner (as zone/scheduler.py's
    plans_inline), the index already loaded, and a limit."""
    state = request.app.state
    engine: Engine | None = getattr(state, "engine", None)
    scheduler = getattr(state, "scheduler", None)
    return (engine is not None and engine.loaded and scheduler is not None
            and bool(getattr(scheduler, "plans_inline", False))
            and parsed.limit is not None and parsed.limit <= INLINE_LIMIT)


def _answer(request: Request, parsed: CandidateRequest, v: Version) -> Response:
    engine = get_engine(request)
    rcs = {rc for g in parsed.groups for rc in g.resource_classes}
    trait_names = {t for g in parsed.groups for anyof in g.required for t in anyof}
    trait_names |= {t for g in parsed.groups for t in g.forbidden}
    trait_names |= {t for anyof in parsed.root_required for t in anyof}
    trait_names |= set(parsed.root_forbidden)
    bad_rcs, bad_traits = engine.unknown_names(rcs, trait_names)
    if bad_rcs:
        raise errors.BadRequest(
            "Invalid resource class in resources parameter: No such resource class "
            f"{', '.join(bad_rcs)}.")
    if bad_traits:
        raise errors.BadRequest(f"No such trait(s): {', '.join(bad_traits)}")
    result = engine.query(parsed, exclude=stale_providers(request) or ())
    headers = cache_headers(None) if v >= V1_15 else None
    body = serialize(result, parsed, v)
    request.app.state.metrics.candidates_returned.observe(len(body["allocation_requests"]))
    return json_response(body, headers=headers)


# -- parsing ------------------------------------------------------------------

@dataclass(slots=True)
class _RawGroup:
    resources: list[str] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    member_of: list[str] = field(default_factory=list)
    in_tree: list[str] = field(default_factory=list)


def _wide_params(v: Version) -> set[str]:
    allowed = set()
    if v >= V1_16:
        allowed.add("limit")
    if v >= V1_25:
        allowed.add("group_policy")
    if v >= V1_35:
        allowed.add("root_required")
    if v >= V1_36:
        allowed.add("same_subtree")
    return allowed


def _group_key(key: str, v: Version) -> tuple[str, str] | None:
    """(kind, suffix) for a request group parameter valid at `v`, else None."""
    if v < V1_25:
        allowed = {"resources"}
        if v >= V1_17:
            allowed.add("required")
        if v >= V1_21:
            allowed.add("member_of")
        return (key, "") if key in allowed else None
    m = (_GROUP_KEY_1_33 if v >= V1_33 else _GROUP_KEY).match(key)
    if m is None or (m.group(1) == "in_tree" and v < V1_31):
        return None
    return m.group(1), m.group(2) or ""


def _unexpected(bad: list[str], v: Version) -> str:
    """jsonschema's words for unknown parameters: from 1.25 the group keys are
    patterns, and the message lists them."""
    names = sorted(set(bad))
    joined = ", ".join(repr(b) for b in names)
    if v < V1_25:
        return (f"Additional properties are not allowed ({joined} "
                f"{'was' if len(names) == 1 else 'were'} unexpected)")
    suffix = f"({_SUFFIX_1_33 if v >= V1_33 else _SUFFIX})?$"
    kinds = ["member_of", "required", "resources"] + (["in_tree"] if v >= V1_31 else [])
    patterns = ", ".join(repr(f"^{k}{suffix}") for k in sorted(kinds))
    return (f"{joined} {'does' if len(names) == 1 else 'do'} not match any of the regexes: "
            f"{patterns}")


# A scheduler asks the same few shapes over and over; a parse costs about as
# much as the rest of the route's own work (60 µs), so the last few shapes'
# parses are kept (a CandidateRequest is immutable). Not a refusal (raised
# again each time), nor a long query string (memory stays bounded).
PARSED_SHAPES = 256
PARSED_MAX_QUERY = 4096
_parsed: OrderedDict[tuple[bytes, Version], CandidateRequest] = OrderedDict()
_parsed_lock = threading.Lock()


def parse_query(query_string: bytes, v: Version) -> CandidateRequest:
    """`parse_request` of a raw query string, from the kept parses when it can."""
    key = (query_string, v)
    with _parsed_lock:
        found = _parsed.get(key)
        if found is not None:
            _parsed.move_to_end(key)
            return found
    parsed = parse_request(QueryParams(query_string).multi_items(), v)
    if len(query_string) <= PARSED_MAX_QUERY:
        with _parsed_lock:
            _parsed[key] = parsed
            while len(_parsed) > PARSED_SHAPES:
                _parsed.popitem(last=False)
    return parsed


def parse_request(items: list[tuple[str, str]], v: Version) -> CandidateRequest:
    """A validated CandidateRequest from the query string, or a 400 as Placement."""
    wide_allowed = _wide_params(v)
    raw: dict[str, _RawGroup] = defaultdict(_RawGroup)
    wide: dict[str, list[str]] = defaultdict(list)
    bad: list[str] = []
    for key, value in items:
        if key in wide_allowed:
            wide[key].append(value)
            continue
        kind = _group_key(key, v)
        if kind is None:
            bad.append(key)
            continue
        getattr(raw[kind[1]], kind[0]).append(value)
    if bad:
        raise errors.BadRequest(f"Invalid query string parameters: {_unexpected(bad, v)}")
    if v < V1_25 and not raw[""].resources:
        raise errors.BadRequest("Invalid query string parameters: 'resources' is a required "
                                "property")
    # Placement's order: the schema (limit, group_policy), the request-wide
    # parameters, each group in query order, then the checks across groups.
    limit = _parse_limit(wide.get("limit", []))
    policy_values = _check_group_policy(wide.get("group_policy", []))
    root_required, root_forbidden = _parse_root_required(wide.get("root_required", []), v)
    same_subtree = _parse_same_subtree(wide.get("same_subtree", []))
    parsed = {suffix: _parse_group(suffix, g, v) for suffix, g in raw.items()}
    groups = tuple(parsed[suffix] for suffix in sorted(parsed))
    _check_resourceless([parsed[suffix] for suffix in raw], same_subtree, v)
    conflicts = sorted(c for g in groups
                       for c in query.conflicting_traits(g.suffix, g.required, g.forbidden))
    if conflicts:
        raise errors.BadRequest("Conflicting required and forbidden traits found in the "
                                f"following traits keys: {', '.join(conflicts)}")
    return CandidateRequest(
        groups=groups, group_policy=_group_policy(policy_values, groups), limit=limit,
        root_required=root_required, root_forbidden=root_forbidden,
        same_subtree=same_subtree, nested_aware=v >= V1_29)


def _parse_group(suffix: str, raw: _RawGroup, v: Version) -> RequestGroup:
    resources: tuple[tuple[str, int], ...] = ()
    if raw.resources:
        resources = query.parse_resources(raw.resources[-1], f"resources{suffix}")
    # Repeating `required` (AND) arrived with 1.39; before, the last one counts.
    req_values = raw.required if v >= V1_39 else raw.required[-1:]
    required, forbidden = query.parse_required(req_values, v, f"required{suffix}")
    member_of, forbidden_aggs = query.parse_member_of(raw.member_of, v, f"member_of{suffix}")
    in_tree = raw.in_tree[-1] if raw.in_tree else None
    if in_tree is not None:
        if not query.is_uuid(in_tree):
            raise errors.BadRequest(
                f"Invalid query string parameters: Expected 'in_tree{suffix}' parameter to "
                f"be a format of uuid. Got: {in_tree}")
        in_tree = _canonical(in_tree)
    return RequestGroup(suffix=suffix, resources=resources, required=required,
                        forbidden=forbidden, member_of=_canonical_sets(member_of),
                        forbidden_aggs=tuple(_canonical(a) for a in forbidden_aggs),
                        in_tree=in_tree)


def _canonical(u: str) -> str:
    return str(uuidlib.UUID(u))


def _canonical_sets(sets: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(_canonical(u) for u in s) for s in sets)


def _check_resourceless(groups: list[RequestGroup],
                        same_subtree: tuple[tuple[str, ...], ...], v: Version) -> None:
    """Placement's checks of groups without resources (in query order)."""
    resourceless = [g for g in groups if not g.resources]
    if v >= V1_36:
        if len(resourceless) == len(groups):
            raise errors.BadRequest(
                "There must be at least one resources or resources[$S] parameter.",
                errors.QUERYPARAM_MISSING_VALUE)
        in_subtree = {s for sub in same_subtree for s in sub}
        stray = [g.suffix for g in resourceless if g.suffix not in in_subtree]
        if stray:
            raise errors.BadRequest(
                "Resourceless suffixed group request should be specified in `same_subtree` "
                f"query param: bad group(s) - {stray}.", errors.QUERYPARAM_BAD_VALUE)
        known = [g.suffix for g in groups]
        unknown = [s for s in dict.fromkeys(s for sub in same_subtree for s in sub)
                   if s not in known]
        if unknown:
            raise errors.BadRequest(
                f"Real suffixes should be specified in `same_subtree`: {unknown} not found in "
                f"{known}.", errors.QUERYPARAM_BAD_VALUE)
        return
    orphans = [f"required{g.suffix}" for g in resourceless if g.required or g.forbidden]
    if orphans:
        raise errors.BadRequest(
            "All traits parameters must be associated with resources.  Found the following "
            f"orphaned traits keys: {', '.join(orphans)}")
    orphans = [f"member_of{g.suffix}" for g in resourceless if g.member_of or g.forbidden_aggs]
    if orphans:
        raise errors.BadRequest(
            "All member_of parameters must be associated with resources. Found the following "
            f"orphaned member_of keys: {', '.join(orphans)}")
    if resourceless:
        raise errors.BadRequest("All request groups must specify resources.")
    if not groups:
        raise errors.BadRequest(
            "At least one request group (`resources` or `resources{$S}`) is required.")


def _check_group_policy(values: list[str]) -> list[str]:
    """As `limit`: every value must be valid (the first one counts)."""
    for value in values:
        if value not in ("none", "isolate"):
            raise errors.BadRequest(
                f"Invalid query string parameters: {value!r} is not one of ['none', "
                "'isolate']")
    return values


def _group_policy(values: list[str], groups: tuple[RequestGroup, ...]) -> GroupPolicy:
    if not values:
        if sum(1 for g in groups if g.granular) > 1:
            raise errors.BadRequest(
                'The "group_policy" parameter is required when specifying more than one '
                '"resources{N}" parameter.')
        return GroupPolicy.NONE
    return GroupPolicy(values[0])


def _parse_limit(values: list[str]) -> int | None:
    """The first `limit` counts (as in Placement); each must be a positive integer."""
    if not values:
        return None
    for value in values:
        if not _LIMIT.match(value):
            raise errors.BadRequest(
                f"Invalid query string parameters: {value!r} does not match "
                f"{_LIMIT.pattern!r} (Failed validating 'pattern' in "
                "schema['properties']['limit'])")
    return query.capped_int(values[0])


def _parse_root_required(values: list[str], v: Version
                         ) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """As Placement: once only, parsed as a `required` value without `in:`."""
    if not values:
        return (), ()
    if len(values) > 1:
        raise errors.BadRequest("Query parameter 'root_required' may be specified only once.",
                                errors.ILLEGAL_DUPLICATE_QUERYPARAM)
    required, forbidden = query.parse_required(values, v, "root_required", any_of=False)
    conflict = sorted({n for (n,) in required} & set(forbidden))
    if conflict:
        raise errors.BadRequest(
            "Conflicting required and forbidden traits found in root_required: "
            f"{', '.join(conflict)}", errors.QUERYPARAM_BAD_VALUE)
    return required, forbidden


def _parse_same_subtree(values: list[str]) -> tuple[tuple[str, ...], ...]:
    out: list[tuple[str, ...]] = []
    for value in values:
        suffixes = [s.strip() for s in value.split(",")]
        if "" in suffixes:
            raise errors.BadRequest(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
                errors.QUERYPARAM_BAD_VALUE)
        out.append(tuple(dict.fromkeys(suffixes)))
    return tuple(out)


# -- the answer ---------------------------------------------------------------

def serialize(result: CandidateResult, req: CandidateRequest, v: Version) -> dict[str, Any]:
    areqs: list[dict[str, Any]] = []
    for ar in result.allocation_requests:
        if v >= V1_12:
            item: dict[str, Any] = {"allocations": {
                u: {"resources": res} for u, res in ar.allocations.items()}}
            if v >= V1_34:
                item["mappings"] = ar.mappings
        else:
            item = {"allocations": [{"resource_provider": {"uuid": u}, "resources": res}
                                    for u, res in ar.allocations.items()]}
        areqs.append(item)
    requested = {rc for g in req.groups for rc in g.resource_classes}
    summaries: dict[str, Any] = {}
    for s in result.provider_summaries:
        entry: dict[str, Any] = {"resources": {
            rc: {"capacity": r.capacity, "used": r.used} for rc, r in s.resources.items()
            if v >= V1_27 or rc in requested}}
        if v >= V1_17:
            entry["traits"] = list(s.traits)
        if v >= V1_29:
            entry["parent_provider_uuid"] = s.parent_uuid
            entry["root_provider_uuid"] = s.root_uuid
        summaries[s.uuid] = entry
    return {"allocation_requests": areqs, "provider_summaries": summaries}
