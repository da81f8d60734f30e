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

A read never answers wrong: when the consumer was found nowhere but a child
could not be asked, or when a child's usages are missing, the answer is 503
``strato.zone_unavailable`` naming the zones, not an empty or partial body.
Children are asked at microversion 1.39 (the zone protocol's) and the answer
is shaped for the client's microversion by the route.

Not yet: a consumer-to-child index (every lookup asks every child; a tree of
111 zones makes 110 calls), and the other routes of the issue "the tree as
one Placement" (providers, candidates and writes below this zone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import urlencode

from pydantic import Field

from strato.model import errors
from strato.store.children import Child
from strato.zone import protocol
from strato.zone.attempt import Health
from strato.zone.transport import Malformed, Reply, Transport, Unreachable

M = TypeVar("M", bound=protocol._Message)


class Tree(Protocol):
    transport: Transport
    config: Any

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


def _unavailable(what: str, missing: Sequence[str]) -> errors.ServiceUnavailable:
    return errors.ServiceUnavailable(
        f"{what}: part of the tree could not be asked ({', '.join(missing)}); retry",
        retry_after=1.0)


async def _get(tree: Tree, child: Child, path: str
               ) -> tuple[Reply | None, str | None]:
    """(the child's reply, or why there is none)."""
    h = tree.health_of(child.name)
    if not h.due():
        return None, f"{child.name}: failed recently"
    try:
        return await tree.transport.call(child.url, "GET", path, token=child.credential,
                                         timeout=tree.config.child_timeout), None
    except Unreachable as exc:
        h.failed(exc.why, faulty=isinstance(exc, Malformed))
        return None, f"{child.name}: {exc.why}"[:200]


async def _ask_all(tree: Tree, path: str, model: type[M], what: str
                   ) -> tuple[list[tuple[Child, M]], list[str]]:
    """Every child's answer to `GET path`, validated; and why the others have none."""
    kids = await tree.children()
    got = await asyncio.gather(*(_get(tree, c, path) for c in kids))
    answers: list[tuple[Child, M]] = []
    missing = []
    for c, (reply, why) in zip(kids, got, strict=True):
        if reply is None or reply.status != 200:
            missing.append(why or f"{c.name}: answered {reply.status if reply else '?'}")
            continue
        try:
            answers.append((c, protocol._parse(model, reply.body, what)))
        except protocol.Faulty as exc:
            tree.health_of(c.name).failed(f"faulty: {exc.reason}", faulty=True)
            missing.append(f"{c.name}: faulty")
    return answers, missing


async def find_consumer(tree: Tree, consumer: str) -> Found | None:
    """The child whose subtree holds `consumer`, with its allocations there (1.39
    shape); None if no child holds it. Raises 503 if it was found nowhere and
    a child could not say."""
    answers, missing = await _ask_all(tree, f"/allocations/{consumer}", ConsumerAllocations,
                                      "consumer allocations")
    for c, got in answers:
        if got.allocations:
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
    if reply.status == 204:
        return True
    if reply.status == 404:
        return False  # released meanwhile
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


async def usages(tree: Tree, params: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Every child's usages by consumer type (1.38 shape: {type: {class: n,
    consumer_count: n}}) summed. Raises 503 naming the children that could not
    say: a partial count would be wrong (quotas are counted with it)."""
    answers, missing = await _ask_all(tree, "/usages?" + urlencode(dict(params)), _Usages,
                                      "usages")
    if missing:
        raise _unavailable("usages of this zone's subtree", missing)
    total: dict[str, dict[str, int]] = {}
    for _, body in answers:
        for ctype, counts in body.usages.items():
            acc = total.setdefault(ctype, {})
            for k, n in counts.items():
                acc[k] = acc.get(k, 0) + n
    return total
