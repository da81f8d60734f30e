"""The Placement API at a zone with children, for what lies below it.

A consumer placed through a parent lives in the database of the zone that
owns its providers. So that a client of the parent (Nova, osc-placement, a
script) can see and release it there, a routing zone answers these
Placement routes for its whole subtree:

* ``GET /allocations/{consumer}``: its own providers first; otherwise it asks
  its children (each answers for its own subtree in turn), in parallel, and
  answers with the one that holds the consumer.
* ``DELETE /allocations/{consumer}``: sent to the child that holds it.
* ``GET /usages``: its own usages plus every child's.
* ``GET /resource_providers``: its own providers plus every child's, with
  the client's filters and microversion; a child that cannot be asked is
  named in the ``x-strato-incomplete`` header (the listing is partial, and
  says so).
* ``GET /resource_providers/{uuid}`` and its ``inventories``, ``traits``,
  ``aggregates``, ``usages`` and ``allocations``: a provider that is not
  this zone's is asked of the child that owns it. The owners are kept in a
  routing table (`Owners`) fed by every listing and lookup through this zone;
  a provider it does not know is looked for in every child once.

A read never answers wrong: when the consumer was found nowhere but a child
could not be asked, or when a child's usages are missing, the answer is 503
``strato.zone_unavailable`` naming the zones, not an empty or partial body.
Children are asked at microversion 1.39 (the zone protocol's) and the answer
is shaped for the client's microversion by the route.

Consumers placed, found or written through this zone are indexed by child
(`ZoneTree.consumer_zones`): a lookup asks that child alone, and every child
only for a consumer the index does not know (it is in memory: after a
restart, each consumer's first lookup asks every child).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import parse_qsl, urlencode

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from strato.model import errors
from strato.model.names import MAX_NAME_LENGTH, is_custom_name
from strato.store import resource_classes as classes_store
from strato.store import traits as traits_store
from strato.store.children import Child
from strato.zone import protocol
from strato.zone.attempt import Health
from strato.zone.transport import COUNTED, Malformed, Reply, Transport, Unreachable

log = logging.getLogger("strato.zone")
# The response header naming the zones a partial answer could not ask (a
# child's own answer may name zones below it: passed on, as paths).
INCOMPLETE = "x-strato-incomplete"
# At most this many names are read from a child's header.
MAX_INCOMPLETE = 100

M = TypeVar("M", bound=protocol._Message)


class Tree(Protocol):
    transport: Transport
    config: Any
    consumer_zones: Owners
    cache: Any  # child name -> its last summary (`.body`)

    async def children(self) -> list[Child]: ...

    def health_of(self, name: str) -> Health: ...


# -- what children say ------------------------------------------------------------------

Count = Annotated[int, Field(ge=0, le=protocol.MAX_COUNT)]
Id = Annotated[str, Field(max_length=protocol.MAX_NAME)]


class _Share(protocol._Message):
    generation: Count | None = None
    resources: dict[Id, Count]


class ConsumerAllocations(protocol._Message):
    """GET /allocations/{consumer} at microversion 1.39."""

    allocations: dict[Id, _Share] = Field(max_length=protocol.MAX_CHILDREN)
    project_id: Id | None = None
    user_id: Id | None = None
    consumer_generation: Count | None = None
    consumer_type: Id | None = None


class _Usages(protocol._Message):
    usages: dict[Id, dict[Id, Count]] = Field(max_length=protocol.MAX_CHILDREN)


@dataclass(frozen=True, slots=True)
class Found:
    child: Child
    body: dict[str, Any]


def _unavailable(what: str, missing: Sequence[Missing]) -> errors.ServiceUnavailable:
    if all(m.loop for m in missing):
        return errors.LoopBelow(f"{what}: the zone tree has a cycle below this zone "
                                f"({', '.join(m.why for m in missing)})")
    return errors.ServiceUnavailable(
        f"{what}: part of the tree could not be asked "
        f"({', '.join(m.why for m in missing)}); retry", retry_after=1.0)


async def _get(tree: Tree, child: Child, path: str, version: str | None = None
               ) -> tuple[Reply | None, str | None]:
    """(the child's reply, or why there is none). `version`: the client's
    microversion, passed on (else the zone protocol's)."""
    h = tree.health_of(child.name)
    if not h.due():
        return None, f"{child.name}: " + (str(h.last_error) if h.looped else "failed recently")
    try:
        return await tree.transport.call(child.url, "GET", path, token=child.credential,
                                         timeout=tree.config.child_timeout,
                                         version=version), None
    except Unreachable as exc:
        h.failed(exc.why, faulty=isinstance(exc, Malformed))
        return None, f"{child.name}: {exc.why}"[:200]


@dataclass(frozen=True, slots=True)
class Missing:
    """A child without an answer, and why; `loop`: because the tree has a cycle
    there (it answered 508 strato.zone_loop, or is marked as leading round one)."""

    child: str
    why: str
    loop: bool = False


def _missing(tree: Tree, child: Child, reply: Reply | None, why: str | None) -> Missing:
    """Why `child` gave no answer (`_get`'s reply and reason)."""
    if reply is None:
        return Missing(child.name, why or f"{child.name}: no answer",
                       loop=tree.health_of(child.name).looped)
    if protocol.is_loop(reply.status, reply.body):
        detail = str(_first_error(reply.body).get("detail", ""))[:300]
        return Missing(child.name, f"{child.name}: loop: {detail}", loop=True)
    return Missing(child.name, f"{child.name}: answered {reply.status}")


async def _ask_all(tree: Tree, path: str, model: type[M], what: str,
                   version: str | None = None, kids: Sequence[Child] | None = None,
                   told: Mapping[str, frozenset[str]] | None = None
                   ) -> tuple[list[tuple[Child, M]], list[Missing]]:
    """Every child's (or `kids`') answer to `GET path`, validated; and why the
    others have none. `told`: the zones each child is to leave out, counted
    elsewhere (COUNTED_HEADER)."""
    if kids is None:
        kids = await tree.children()

    async def one(c: Child) -> tuple[Reply | None, str | None]:
        # Each call runs in its own task (gather), so this is its own.
        COUNTED.set((told or {}).get(c.name, frozenset()))
        reply, why = await _get(tree, c, path, version)
        if reply is not None and reply.status == 400 and await _teach(tree, c, reply):
            reply, why = await _get(tree, c, path, version)  # once, knowing the names
        return reply, why
    got = await asyncio.gather(*(one(c) for c in kids))
    answers: list[tuple[Child, M]] = []
    missing = []
    for c, (reply, why) in zip(kids, got, strict=True):
        if reply is None or reply.status != 200:
            missing.append(_missing(tree, c, reply, why))
            continue
        try:
            answers.append((c, protocol._parse(model, reply.body, what)))
        except protocol.Faulty as exc:
            tree.health_of(c.name).failed(f"faulty: {exc.reason}", faulty=True)
            missing.append(Missing(c.name, f"{c.name}: faulty"))
            continue
        for n in below(c, reply):
            # A path that comes back to a zone on it went round a cycle.
            parts = [tree.config.name, *n.split("/")]
            missing.append(Missing(n, f"{n}: not asked by {c.name}",
                                   loop=len(set(parts)) < len(parts)))
    return answers, missing


# A child's 400 for a custom name of the query it does not know (Placement's
# words: a trait in `required`, a class in `resources`).
_UNKNOWN_TRAITS = re.compile(r"No such trait\(s\): ((?:CUSTOM_[A-Z0-9_]{1,248}(?:, )?)+)")
_UNKNOWN_CLASS = re.compile(r"No such resource class (CUSTOM_[A-Z0-9_]{1,248})")
MAX_TAUGHT = 20


async def _teach(tree: Tree, child: Child, reply: Reply) -> bool:
    """A child refused a query (that this zone's own route took) for custom
    traits or resource classes it does not know, made in another zone (a
    cell's nova-compute or agent makes them where it points): make them in
    the child, as a name made here is made in every child, so that the query
    can be asked again. Without this, `required=!CUSTOM_X` at the root left
    out every provider of a cell that never heard of CUSTOM_X (a 400 there),
    where Placement lists them all. Only names this zone knows are made.
    Whether the child now knows them all."""
    try:
        text = str(reply.body["errors"][0]["detail"])[:4000]
    except (KeyError, IndexError, TypeError):
        return False
    traits = [t for m in _UNKNOWN_TRAITS.finditer(text) for t in m.group(1).split(", ") if t]
    classes = [m.group(1) for m in _UNKNOWN_CLASS.finditer(text)]
    db = getattr(tree, "db", None)
    if db is None or not (traits or classes) or len(traits) + len(classes) > MAX_TAUGHT:
        return False

    def known() -> bool:
        with db.read() as conn:
            return (all(traits_store.get_trait_or_none(conn, t) is not None for t in traits)
                    and all(classes_store.get_class_or_none(conn, rc) is not None
                            for rc in classes))
    if not await run_in_threadpool(known):
        return False
    calls = [("/traits/" + t, "1.6") for t in traits]
    calls += [("/resource_classes/" + rc, "1.7") for rc in classes]
    for path, version in calls:
        try:
            made = await tree.transport.call(child.url, "PUT", path, token=child.credential,
                                             timeout=tree.config.child_timeout,
                                             version=version)
        except Unreachable as exc:
            tree.health_of(child.name).failed(exc.why)
            return False
        if made.status not in (200, 201, 204):
            return False
    return True


def below(child: Child, reply: Reply) -> list[str]:
    """The zones under `child` that its answer says it could not ask (its
    INCOMPLETE header), as paths from this zone's children: `cell` below
    `region` is `region/cell`."""
    raw = reply.headers.get(INCOMPLETE)
    if not raw:
        return []
    names = [n.strip() for n in raw.split(",", MAX_INCOMPLETE)[:MAX_INCOMPLETE]]
    return [f"{child.name}/{n}"[:300] for n in names if n and n.isprintable()]


async def find_consumer(tree: Tree, consumer: str) -> Found | None:
    """The child whose subtree holds `consumer`, with its allocations there (1.39
    shape); None if no child holds it. Raises 503 if it was found nowhere and
    a child could not say. The child the index names is asked first, alone."""
    index = tree.consumer_zones
    known = index.get(consumer)
    if known is not None:
        kid = next((c for c in await tree.children() if c.name == known), None)
        if kid is not None:
            reply, _ = await _get(tree, kid, f"/allocations/{consumer}")
            if reply is not None and reply.status == 200:
                try:
                    got = protocol._parse(ConsumerAllocations, reply.body,
                                          "consumer allocations")
                except protocol.Faulty as exc:
                    tree.health_of(kid.name).failed(f"faulty: {exc.reason}", faulty=True)
                else:
                    if got.allocations:
                        return Found(kid, protocol._dump(got))
        index.forget(consumer)
    answers, missing = await _ask_all(tree, f"/allocations/{consumer}", ConsumerAllocations,
                                      "consumer allocations")
    for c, got in answers:
        if got.allocations:
            index.learn(consumer, c.name)
            return Found(c, protocol._dump(got))
    if missing:
        raise _unavailable(f"consumer {consumer} is not in this zone", missing)
    return None


async def delete_consumer(tree: Tree, consumer: str) -> bool:
    """Delete `consumer`'s allocations in the child that holds them: False if no
    child does. Raises the child's error (or 503) otherwise."""
    found = await find_consumer(tree, consumer)
    if found is None:
        return False
    child = found.child
    try:
        reply = await tree.transport.call(child.url, "DELETE", f"/allocations/{consumer}",
                                          token=child.credential,
                                          timeout=tree.config.child_timeout)
    except Unreachable as exc:
        tree.health_of(child.name).failed(exc.why)
        detail = ("the delete may have been done; GET it again to see" if exc.maybe_delivered
                  else "nothing was done")
        raise errors.ServiceUnavailable(
            f"consumer {consumer} is in zone {child.name}, which did not answer: {detail}",
            retry_after=1.0) from None
    if reply.status in (204, 404):
        tree.consumer_zones.forget(consumer)
        return reply.status == 204  # (404: released meanwhile)
    err = _first_error(reply.body)
    detail = f"zone {child.name}: {str(err.get('detail', ''))[:300]}"
    if reply.status == 409:
        raise errors.Conflict(detail, str(err.get("code", errors.DEFAULT)))
    raise errors.ServiceUnavailable(f"{detail} (answered {reply.status})", retry_after=1.0)


def _first_error(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        first = body["errors"][0]
        if isinstance(first, dict):
            return first
    return {}


# -- providers below ------------------------------------------------------------------------

class Owners:
    """Which child owns a provider: uuid -> child name, the most recently
    seen `MAX` of them (a routing table, fed by the children's answers)."""

    MAX = 200_000

    def __init__(self) -> None:
        self._of: OrderedDict[str, str] = OrderedDict()

    def get(self, uuid: str) -> str | None:
        return self._of.get(uuid)

    def learn(self, uuid: str, child: str) -> None:
        self._of[uuid] = child
        self._of.move_to_end(uuid)
        while len(self._of) > self.MAX:
            self._of.popitem(last=False)

    def forget(self, uuid: str) -> None:
        self._of.pop(uuid, None)

    def __len__(self) -> int:
        return len(self._of)


_NAME = re.compile(r"[A-Z0-9_]{1,255}")


class _Traits(protocol._Message):
    traits: list[protocol.Name] = Field(max_length=protocol.MAX_COUNT)


class _Classes(protocol._Message):
    resource_classes: list[dict[str, Any]] = Field(max_length=protocol.MAX_COUNT)


async def registry_names(tree: Tree, path: str, version: str,
                         kids: Sequence[Child] | None = None
                         ) -> tuple[list[list[str]], list[str]]:
    """Every child's (or `kids`') answer to `GET /traits?...` or `GET
    /resource_classes` (`path`), as its names: (one list a child, the
    children that could not say)."""
    if path.startswith("/traits"):
        traits, missing = await _ask_all(tree, path, _Traits, "trait listing", version,
                                         kids)
        return ([[n for n in t.traits if _NAME.fullmatch(n)] for _, t in traits],
                [m.child for m in missing])
    classes, missing = await _ask_all(tree, path, _Classes, "resource class listing", version,
                                      kids)
    out: list[list[str]] = []
    for _, c in classes:
        names = [e.get("name") for e in c.resource_classes]
        out.append([n for n in names if isinstance(n, str) and is_custom_name(n)
                    and len(n) <= MAX_NAME_LENGTH])
    return out, [m.child for m in missing]


class _MetaList(protocol._Message):
    providers: list[dict[str, Any]] = Field(max_length=protocol.MAX_COUNT)


async def meta_lists(tree: Tree, path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every child's `GET /strato/v1/providers?...` (`path`): their rows,
    each with `zone`, its path from this zone down (as a placement's); and the children
    that could not say."""
    answers, missing = await _ask_all(tree, path, _MetaList, "provider metadata listing")
    rows: list[dict[str, Any]] = []
    for c, listing in answers:
        for row in listing.providers:
            # A child with children of its own names them from itself down.
            zone = row.get("zone")
            deeper = (isinstance(zone, str) and zone.startswith(c.name + "/")
                      and len(zone) <= 300 and zone.isprintable())
            rows.append({**row, "zone": f"{tree.config.name}/{zone if deeper else c.name}"})
    return rows, [m.child for m in missing]


class _Listed(protocol._Message):
    uuid: Id


class _Listing(protocol._Message):
    resource_providers: list[dict[str, Any]] = Field(max_length=protocol.MAX_COUNT)


async def list_providers(tree: Tree, owners: Owners, query: str, version: str, *,
                         skip_loops: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every child's `GET /resource_providers?query` at the client's `version`:
    (their providers, the children that could not say; `skip_loops`: not
    those that could not because the tree has a cycle through them, whose
    zones are counted along another path)."""
    path = "/resource_providers" + (f"?{query}" if query else "")
    answers, missing = await _ask_all(tree, path, _Listing, "provider listing", version)
    out: list[dict[str, Any]] = []
    names = [m.child for m in missing if not (skip_loops and m.loop)]
    listed: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for c, listing in answers:
        try:
            uuids = [protocol._parse(_Listed, {"uuid": p.get("uuid")}, "provider").uuid
                     for p in listing.resource_providers]
        except protocol.Faulty as exc:
            tree.health_of(c.name).failed(f"faulty: {exc.reason}", faulty=True)
            names.append(c.name)
            continue
        for uuid, p in zip(uuids, listing.resource_providers, strict=True):
            listed.setdefault(uuid, []).append((c.name, p))
    for uuid, where in listed.items():
        if len(where) > 1:
            # Two children list one provider (it moved between them as they
            # answered, or one of them lies): the owner known so far keeps
            # it, so a child cannot take another's providers' writes by
            # listing them; it is listed once.
            known = owners.get(uuid)
            where = [next((w for w in where if w[0] == known), where[0])]
            log.warning("provider %s is listed by child zones %s; kept in %s", uuid,
                        ", ".join(n for n, _ in listed[uuid]), where[0][0])
        if owners.get(uuid) is None:
            # Only where no owner is known: a listing does not move one (a
            # provider that moved is found again when its old zone says 404).
            owners.learn(uuid, where[0][0])
        out.append(where[0][1])
    return out, names


async def provider_route(tree: Tree, owners: Owners, uuid: str, path: str, version: str
                         ) -> Reply | None:
    """`GET path` (a route of provider `uuid`) answered by the child that owns
    the provider, as it answered; None if no child does. Raises 503 when no
    child that answered has it and some child could not be asked."""
    kids = {c.name: c for c in await tree.children()}
    known = owners.get(uuid)
    if known is not None and known in kids:
        reply, _ = await _get(tree, kids[known], path, version)
        if reply is not None and reply.status != 404:
            return reply
        owners.forget(uuid)
    # Unknown here: look for it in every child, once.
    probe = f"/resource_providers/{uuid}"
    order = list(kids.values())
    got = await asyncio.gather(*(_get(tree, c, probe, version) for c in order))
    missing = []
    for c, (reply, why) in zip(order, got, strict=True):
        if reply is not None and reply.status == 200:
            owners.learn(uuid, c.name)
            if path == probe:
                return reply
            routed, why = await _get(tree, c, path, version)
            if routed is None:
                raise errors.ServiceUnavailable(
                    f"resource provider {uuid} is in zone {c.name}, which did not answer: "
                    f"{why}", retry_after=1.0)
            return routed
        if reply is None or reply.status != 404:
            missing.append(_missing(tree, c, reply, why))
    if missing:
        raise _unavailable(f"resource provider {uuid} is not in this zone", missing)
    return None


async def provider_write(tree: Tree, owners: Owners, uuid: str, method: str, path: str,
                         body: Any, version: str) -> Reply | None:
    """A write to a route of provider `uuid` sent to the child that owns it: its
    answer, as it answered; None if no child has the provider. 503 when it
    could be in a child that did not answer, or when its owner did not
    answer (saying whether the write may have been made)."""
    kids = {c.name: c for c in await tree.children()}
    probe = f"/resource_providers/{uuid}"
    for _ in range(2):
        if owners.get(uuid) not in kids:
            found = await provider_route(tree, owners, uuid, probe, version)
            if found is None:
                return None
        child = kids.get(owners.get(uuid) or "")
        if child is None:
            return None
        reply = await send_to(tree, child, method, path, body, version,
                              f"resource provider {uuid}")
        if reply.status != 404:
            return reply
        if method == "DELETE" and path == probe:
            owners.forget(uuid)  # gone
            return reply
        # Not there: a 404 about something else of the provider (an
        # inventory), or the provider moved away (deleted there and made in
        # another child) since this zone learned where it was: then it is
        # looked for again, once.
        there, _ = await _get(tree, child, probe, version)
        if there is None or there.status != 404:
            return reply
        owners.forget(uuid)
    return reply


class _Candidates(protocol._Message):
    allocation_requests: list[dict[str, Any]] = Field(max_length=protocol.MAX_COUNT)
    provider_summaries: dict[Id, dict[str, Any]] = Field(max_length=protocol.MAX_COUNT)


def _items(areq: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(provider, class, amount) of an allocation request, either shape
    (a dict by provider from 1.12, a list before)."""
    alloc = areq.get("allocations")
    out = []
    if isinstance(alloc, dict):
        for u, share in alloc.items():
            for rc, n in (share or {}).get("resources", {}).items():
                out.append((str(u), str(rc), int(n)))
    elif isinstance(alloc, list):
        for share in alloc:
            u = share.get("resource_provider", {}).get("uuid")
            for rc, n in share.get("resources", {}).items():
                out.append((str(u), str(rc), int(n)))
    return out


def _score(areq: Mapping[str, Any], summaries: Mapping[str, Any], scorer: Any) -> float:
    """The zone's weigher on the candidate, from the room its summaries give."""
    rcs, free, caps = [], [], []
    for u, rc, n in _items(areq):
        entry = summaries.get(u)
        res = entry.get("resources") if isinstance(entry, dict) else None
        one = res.get(rc) if isinstance(res, dict) else None
        if not isinstance(one, dict):
            continue
        try:
            cap = float(one.get("capacity", 0))
            left = cap - float(one.get("used", 0)) - n
        except (TypeError, ValueError):
            continue  # a child's odd summary: no score from it
        rcs.append(rc)
        free.append(left)
        caps.append(cap)
    return float(scorer.items(rcs, free, caps)) if rcs else 0.0


Source = tuple[list[dict[str, Any]], dict[str, Any]]


async def candidates(tree: Tree, own: dict[str, Any], query: str, version: str,
                     limit: int | None, scorer: Any, extra: Sequence[Source] = ()
                     ) -> tuple[dict[str, Any], list[str]]:
    """This zone's `GET /allocation_candidates` answer (`own`) merged with its
    children's for the same query and microversion (and with `extra`, the
    candidates `pooled` made): every candidate scored by this zone's weigher
    from its own answer's summaries, best first (ties: this zone's, then the
    children's in order, each in its own order), cut at `limit`; the
    summaries of the providers the kept candidates use (and of their trees).
    (the body, the children that could not say)."""
    path = "/allocation_candidates" + (f"?{query}" if query else "")
    sources: list[Source] = [
        (own.get("allocation_requests", []), own.get("provider_summaries", {})), *extra]
    missing: list[str] = []
    kids = await tree.children()
    demand = _plain_demand(query) if limit and scorer.config.name == "spread" else None
    if demand is None:
        waves = [list(kids)]
        bounds: dict[str, float] = {}
    else:
        # Best bound first, a few at a time, until no child left could rank.
        bounds = {c.name: _child_bound(tree, c.name, demand, scorer) for c in kids}
        order = sorted((c for c in kids if bounds[c.name] > NO_ROOM),
                       key=lambda c: (-bounds[c.name], c.name))
        # The best child alone first: when its candidates already score what
        # any other could (the usual case in a tree of alike cells), no other
        # is asked; otherwise the rest follow, WAVE at a time.
        waves = [order[:FIRST_WAVE]] + [order[i:i + WAVE]
                                        for i in range(FIRST_WAVE, len(order), WAVE)]
        waves = [w for w in waves if w]
    ranked = _ranked(sources, scorer, limit)
    for w, wave in enumerate(waves):
        answers, lacking = await _ask_all(tree, path, _Candidates, "allocation candidates",
                                          version, wave)
        missing += [m.child for m in lacking]
        for c, body in answers:
            try:
                for areq in body.allocation_requests:
                    _items(areq)  # well-formed
            except (AttributeError, TypeError, ValueError) as exc:
                tree.health_of(c.name).failed(f"faulty: {exc}"[:200], faulty=True)
                missing.append(c.name)
                continue
            sources.append((body.allocation_requests, body.provider_summaries))
        ranked = _ranked(sources, scorer, limit)
        rest = [bounds[c.name] for later in waves[w + 1:] for c in later]
        if (demand is not None and limit is not None and len(ranked) >= limit and rest
                and -ranked[limit - 1][0] + 1e-9 >= max(rest)):
            break  # no child left could give a candidate better than the limit-th
    if not any(areqs for areqs, _ in sources[1:]):
        return own, missing  # nothing below: this zone's answer, as its route made it
    used: dict[int, set[str]] = {}
    for _, s, _, areq in ranked:
        used.setdefault(s, set()).update(u for u, _, _ in _items(areq))
    summaries_out: dict[str, Any] = {}
    for s, (_, summaries) in enumerate(sources):
        mine = used.get(s, set())
        roots = {summaries.get(u, {}).get("root_provider_uuid") for u in mine} - {None}
        for u, entry in summaries.items():
            if u in mine or (isinstance(entry, dict)
                             and entry.get("root_provider_uuid") in roots):
                summaries_out[u] = entry
    return {"allocation_requests": [t[3] for t in ranked],
            "provider_summaries": summaries_out}, missing


async def pooled(tree: Tree, query: str, version: str, scorer: Any,
                 pools: Callable[[dict[str, int]], Awaitable[list[Pool]]],
                 pooled_here: Callable[[Collection[str]], Awaitable[set[str]]],
                 own_ask: Callable[[str], Awaitable[dict[str, Any] | None]]
                 ) -> tuple[list[Source], list[str]]:
    """Candidates that take some classes (e.g. DISK_GB) from a sharing
    provider here (MISC_SHARES_VIA_AGGREGATE) and the rest from a child's
    providers in that provider's aggregates, as Placement combines a sharing
    provider with a compute node: (the sources to merge, the children that
    could not say). A request of one unnamed group only. The pool takes the
    classes no child has, and those a sharing provider here has (a compute
    with disk of its own in the pool's aggregate is offered both ways, as
    Placement does). `member_of` and `limit` go to the children with the rest
    of the request; forbidden traits (`!TRAIT`) to the pool too (no provider
    of a candidate may have one); a required trait the pool has is met by it
    (the children are asked for the others), as any provider of a candidate
    meets the unnamed group's traits in Placement. `pools(classes)`: this
    zone's sharing providers with room for `classes`, best first, with their
    aggregates and traits; `pooled_here(classes)`: which of `classes` a
    sharing provider here has; `own_ask(query)`: this zone's own candidates
    for a query (the pools', with their summaries in the client's
    microversion)."""
    parsed = _pool_query(query)
    major, _, minor = version.partition(".")
    if parsed is None or not (major.isdigit() and minor.isdigit()):
        return [], []
    asked = (int(major), int(minor))
    demand, others = parsed
    if asked < MANY_MEMBER_OF and any(k == "member_of" for k, _ in others):
        return [], []  # one member_of only before 1.24: the pool's cannot be added
    offered: set[str] = set()
    for cached in tree.cache.values():
        classes = (cached.body or {}).get("classes")
        if isinstance(classes, dict):
            offered.update(classes)
    if len(demand) < 2:
        return [], []  # a class from a pool, the rest from a child: two at least
    here = await pooled_here(demand)
    shared = {rc: n for rc, n in demand.items() if rc not in offered or rc in here}
    rest = {rc: n for rc, n in demand.items() if rc not in shared}
    if not shared or not rest:
        return [], []
    kids = [c for c in await tree.children()
            if _child_bound(tree, c.name, rest, scorer) > NO_ROOM]
    if not kids:
        return [], []
    chosen = [(p, aggs, traits) for p, aggs, traits in (await pools(shared))
              if aggs][:MAX_POOLS]
    if not chosen:
        return [], []
    forbidden = [t for k, v in others if k == "required" and not v.startswith("in:")
                 for t in v.split(",") if t.startswith("!")]
    mine = await own_ask(urlencode([("resources", _amounts(shared)),
                                    *([("required", ",".join(forbidden))] if forbidden
                                      else [])]))
    offers = {next(iter(_items(a)))[0] for a in (mine or {}).get("allocation_requests", [])
              if len({u for u, _, _ in _items(a)}) == 1}
    chosen = [c for c in chosen if c[0] in offers]
    summaries_here = (mine or {}).get("provider_summaries", {})

    async def one(provider: str, aggs: tuple[str, ...], traits: frozenset[str]
                  ) -> tuple[list[Source], list[str]]:
        # member_of came with 1.21: children are asked at least at that, and
        # their answers put back in the client's shape.
        q = urlencode([("resources", _amounts(rest)), *_unmet(others, traits),
                       ("member_of", "in:" + ",".join(aggs))])
        answers, lacking = await _ask_all(tree, f"/allocation_candidates?{q}", _Candidates,
                                          "allocation candidates",
                                          ".".join(map(str, max(asked, MEMBER_OF))), kids)
        missing = [m.child for m in lacking]
        summary = {u: e for u, e in summaries_here.items() if u == provider}
        out: list[Source] = []
        for c, body in answers:
            try:
                for a in body.allocation_requests:
                    _items(a)  # well-formed, as candidates() checks its own
                areqs = [_older(_with_pool(a, provider, shared), asked)
                         for a in body.allocation_requests]
            except (AttributeError, TypeError, ValueError, KeyError):
                tree.health_of(c.name).failed("faulty: allocation candidates", faulty=True)
                missing.append(c.name)
                continue
            summaries = body.provider_summaries
            if asked < TRAITS_IN_SUMMARIES:
                summaries = {u: {k: v for k, v in e.items() if k != "traits"}
                             for u, e in summaries.items()}
            if areqs:
                out.append((areqs, {**summaries, **summary}))
        return out, missing
    sources: list[Source] = []
    missing: list[str] = []
    for got, lacking in await asyncio.gather(*(one(*c) for c in chosen)):
        sources += got
        missing += [m for m in lacking if m not in missing]
    return sources, missing


MAX_POOLS = 3
# A suffixed group's parameter (Placement's suffixes: 1.25 numbers, 1.33
# strings of up to 64 of these characters).
_SUFFIXED = re.compile(r"^(?:resources|required|member_of|in_tree)[A-Za-z0-9_-]{1,64}$")
MANY_MEMBER_OF = (1, 24)
# A sharing provider: (uuid, its aggregates, its traits).
Pool = tuple[str, tuple[str, ...], frozenset[str]]


def _unmet(others: Sequence[tuple[str, str]], traits: frozenset[str]
           ) -> list[tuple[str, str]]:
    """The parameters for the children of a candidate whose pool has
    `traits`: a required trait the pool has is met (a `required=in:` list
    too, when the pool has one of it); forbidden ones stay (no provider of a
    candidate may have one)."""
    out: list[tuple[str, str]] = []
    for k, v in others:
        if k != "required":
            out.append((k, v))
        elif v.startswith("in:"):
            if not traits & set(v[3:].split(",")):
                out.append((k, v))
        else:
            left = [t for t in v.split(",") if t.startswith("!") or t not in traits]
            if left:
                out.append((k, ",".join(left)))
    return out


MEMBER_OF = (1, 21)
TRAITS_IN_SUMMARIES = (1, 17)
DICT_ALLOCATIONS = (1, 12)


def _older(areq: dict[str, Any], version: tuple[int, int]) -> dict[str, Any]:
    """A candidate as a client of `version` reads it (before 1.12, a list)."""
    alloc = areq["allocations"]
    if version >= DICT_ALLOCATIONS or not isinstance(alloc, dict):
        return areq
    return {"allocations": [{"resource_provider": {"uuid": u},
                             "resources": dict(share["resources"])}
                            for u, share in alloc.items()]}


def _amounts(amounts: Mapping[str, int]) -> str:
    return ",".join(f"{rc}:{n}" for rc, n in sorted(amounts.items()))


def _pool_query(query: str) -> tuple[dict[str, int], list[tuple[str, str]]] | None:
    """(the amounts of the unnamed group, the other parameters the children
    get) of a request whose unnamed group has resources; None for anything
    else. Only the unnamed group's classes are taken from a pool; suffixed
    groups (Nova's for a port's minimum bandwidth, say), `same_subtree` and
    `group_policy` (about suffixed groups) go to the children as they are,
    and so does `root_required`, about the root of the candidate's
    (non-sharing) tree, a child's (Nova sends
    `root_required=!COMPUTE_STATUS_DISABLED` with every boot). An unnamed
    `in_tree` is not combined with a pool."""
    return _one_group(query, ("limit", "required", "member_of", "root_required",
                              "group_policy", "same_subtree"), suffixed=True)


def _one_group(query: str, others_allowed: Sequence[str], *, suffixed: bool = False
               ) -> tuple[dict[str, int], list[tuple[str, str]]] | None:
    """(the amounts, the other parameters) of a request of one unnamed group
    whose other parameters are all `others_allowed` (and, with `suffixed`,
    any of a suffixed group's); None for anything else."""
    demand: dict[str, int] | None = None
    others: list[tuple[str, str]] = []
    for k, v in parse_qsl(query):
        if k == "resources":
            if demand is not None:
                return None
            try:
                demand = {rc: int(n) for rc, n in (p.split(":") for p in v.split(","))}
            except ValueError:
                return None
        elif k in others_allowed or (suffixed and _SUFFIXED.match(k)):
            others.append((k, v))
        else:
            return None
    return None if demand is None else (demand, others)


def _with_pool(areq: Mapping[str, Any], provider: str, shared: Mapping[str, int]
               ) -> dict[str, Any]:
    """A child's candidate with the pool's share added, in its own shape."""
    alloc = areq["allocations"]
    out = dict(areq)
    if isinstance(alloc, dict):
        out["allocations"] = {**alloc, provider: {"resources": dict(shared)}}
    else:
        out["allocations"] = [*alloc, {"resource_provider": {"uuid": provider},
                                       "resources": dict(shared)}]
    mappings = areq.get("mappings")
    if isinstance(mappings, dict):
        out["mappings"] = {**mappings, "": sorted({*mappings.get("", []), provider})}
    return out


# Children asked at once while merging candidates best bound first (the
# first wave, then each later one).
FIRST_WAVE = 1
WAVE = 2
NO_ROOM = -1.0


def _ranked(sources: Sequence[tuple[list[dict[str, Any]], dict[str, Any]]], scorer: Any,
            limit: int | None) -> list[tuple[float, int, int, dict[str, Any]]]:
    ranked = []
    for s, (areqs, summaries) in enumerate(sources):
        for i, areq in enumerate(areqs):
            ranked.append((-_score(areq, summaries, scorer), s, i, areq))
    ranked.sort(key=lambda t: (t[0], t[1], t[2]))
    return ranked[:limit] if limit is not None else ranked


def _plain_demand(query: str) -> dict[str, int] | None:
    """The amounts of a request of one unnamed group (`resources=` and
    filters that do not change scores); None for anything else."""
    found = _one_group(query, ("limit", "required", "member_of", "in_tree", "root_required"))
    return None if found is None else found[0]


def _child_bound(tree: Tree, name: str, demand: Mapping[str, int], scorer: Any) -> float:
    """The best score a candidate of child `name` could have under the spread
    weigher, from its summary: per class, its best free share less the amount
    over its largest capacity (an upper bound for every provider). No summary
    or an older zone's: infinity (ask it); a class it does not have: NO_ROOM."""
    cached = tree.cache.get(name)
    classes = (cached.body or {}).get("classes") if cached is not None else None
    if not isinstance(classes, dict):
        return float("inf")
    num = den = 0.0
    for rc, amount in demand.items():
        c = classes.get(rc)
        if not isinstance(c, dict):
            return NO_ROOM
        share, most = c.get("best_share"), c.get("max_capacity")
        if share is None or not most:
            return float("inf")
        w = scorer.weight(rc)
        num += w * min(max(float(share) - amount / float(most), 0.0), 1.0)
        den += w
    return num / den if den else float("inf")


def named_providers(body: Any) -> set[str] | None:
    """The providers an allocations write names (PUT /allocations/{c}: its
    `allocations`; POST /allocations: every consumer's), either shape; None
    when the body is not one (the route answers that itself)."""
    if not isinstance(body, dict):
        return None
    if "allocations" in body:
        return {u for u, _, _ in _items(body)} | _empty_shares(body)
    out: set[str] = set()
    for one in body.values():  # POST /allocations: {consumer: {...}}
        if not isinstance(one, dict):
            return None
        out |= {u for u, _, _ in _items(one)} | _empty_shares(one)
    return out


def _empty_shares(body: Mapping[str, Any]) -> set[str]:
    alloc = body.get("allocations")
    return {str(u) for u in alloc} if isinstance(alloc, dict) else set()


@dataclass(frozen=True, slots=True)
class Owner:
    """Where a set of providers is: `child` if one child owns them all;
    `unknown`, a provider in no zone below; else they are in several."""

    child: Child | None = None
    unknown: str | None = None
    zones: tuple[str, ...] = ()


async def owner_of(tree: Tree, owners: Owners, uuids: set[str], version: str) -> Owner:
    kids = {c.name: c for c in await tree.children()}
    where = set()
    for u in sorted(uuids):
        if owners.get(u) not in kids:
            found = await provider_route(tree, owners, u, f"/resource_providers/{u}", version)
            if found is None:
                return Owner(unknown=u)
        where.add(str(owners.get(u)))
    if len(where) != 1:
        return Owner(zones=tuple(sorted(where)))
    return Owner(child=kids.get(where.pop()))


async def send_to(tree: Tree, child: Child, method: str, path: str, body: Any,
                  version: str, what: str) -> Reply:
    """A client's write passed on to `child`; 503 saying whether it may have
    been made when the child did not answer."""
    try:
        return await tree.transport.call(child.url, method, path, token=child.credential,
                                         json=body, timeout=tree.config.child_timeout,
                                         version=version)
    except Unreachable as exc:
        tree.health_of(child.name).failed(exc.why)
        detail = ("the change may have been made; read it again to see" if exc.maybe_delivered
                  else "nothing was changed")
        raise errors.ServiceUnavailable(
            f"{what} is in zone {child.name}, which did not answer: {detail}",
            retry_after=1.0) from None


async def tell_children(tree: Tree, method: str, path: str, body: Any, version: str
                        ) -> list[str]:
    """The same call to every child (a registry entry made here): the names of
    those that did not take it."""
    kids = await tree.children()

    async def one(c: Child) -> list[str]:
        try:
            reply = await tree.transport.call(c.url, method, path, token=c.credential,
                                              json=body, timeout=tree.config.child_timeout,
                                              version=version)
        except Unreachable as exc:
            tree.health_of(c.name).failed(exc.why)
            return [c.name]
        if reply.status not in (200, 201, 204, 409):
            return [c.name]
        return below(c, reply)
    got = await asyncio.gather(*(one(c) for c in kids))
    return [n for names in got for n in names]


def learn_placements(tree: Tree, answer: Mapping[str, Any]) -> None:
    """Index where a schedule answer of this zone put its consumers: the child
    is the second step of each placement's zone path."""
    for p in answer.get("placements", []):
        path = str(p.get("zone") or "").split("/")
        if len(path) > 1 and path[0] == tree.config.name and p.get("consumer_uuid"):
            tree.consumer_zones.learn(str(p["consumer_uuid"]), path[1])


async def usages(tree: Tree, params: Mapping[str, str],
                 counted: frozenset[str] = frozenset()) -> dict[str, dict[str, int]]:
    """Every child's usages by consumer type (1.38 shape: {type: {class: n,
    consumer_count: n}}) summed. Raises 503 naming the children that could not
    say: a partial count would be wrong (quotas are counted with it).

    Each zone is counted once, also one registered under two children (a
    diamond): a child whose own id is in `counted` (zones the caller counts
    elsewhere) or in the subtree of a child before it is not asked, and each
    child asked is told which zones of its subtree (its summary's zone_ids)
    are counted already, to leave them out in turn. A child whose summary is
    not known yet is told only `counted`."""
    kids = await tree.children()
    seen = set(counted)
    asked: list[Child] = []
    told: dict[str, frozenset[str]] = {}
    for c in kids:
        ids = _zone_ids(tree.cache.get(c.name))
        if ids and ids[0] in seen:
            continue  # counted through another child, or by the caller
        told[c.name] = frozenset(seen.intersection(ids)) if ids else counted
        seen.update(ids)
        asked.append(c)
    answers, missing = await _ask_all(tree, "/usages?" + urlencode(dict(params)), _Usages,
                                      "usages", kids=asked, told=told)
    if missing:
        raise _unavailable("usages of this zone's subtree", missing)
    total: dict[str, dict[str, int]] = {}
    for _, body in answers:
        for ctype, counts in body.usages.items():
            acc = total.setdefault(ctype, {})
            for k, n in counts.items():
                acc[k] = acc.get(k, 0) + n
    return total


def _zone_ids(cached: Any) -> list[str]:
    """A cached child summary's zone ids, its own first; [] if unknown."""
    body = getattr(cached, "body", None)
    ids = body.get("zone_ids") if isinstance(body, dict) else None
    return [z for z in ids if isinstance(z, str)] if isinstance(ids, list) else []
