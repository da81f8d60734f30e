"""Placement's provider reads at a zone with children, for the whole subtree.

An ASGI middleware inside `StratoMiddleware` (authentication, microversion
and request id are done). A zone without children is untouched. At a zone
with children, for `GET`:

* ``/resource_providers``: the zone's own answer (its route, its policy),
  then every child's answer to the same query at the client's microversion,
  merged (the zone's own first, a provider once). A child that could not be
  asked is named in ``x-strato-incomplete``: the listing is partial, and
  says so.
* ``/resource_providers/{uuid}`` and its ``inventories``, ``traits``,
  ``aggregates``, ``usages`` and ``allocations``, and Strato's
  ``/strato/v1/providers/{uuid}/meta`` (location, tags): when the zone's own route
  answers 404, the child that owns the provider answers instead
  (`zone/subtree.py`: a routing table, and a lookup in every child for a
  provider it does not know yet); 503 when it could be in a child that did
  not answer.

Writes to a provider below (`PUT`, `POST`, `DELETE` on those routes, and
`PUT`/`DELETE /resource_providers/{uuid}`) go the same way: the zone's own
route first (its policy, its body checks); a 404 there is sent to the owning
child with the body and the client's microversion, and its answer (a 409 on
a stale generation included) is the answer. A child that did not answer is a
503 saying whether the change may have been made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid as uuidlib
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strato.api import deps, microversion
from strato.api.body import validate
from strato.api.middleware import replay_body
from strato.api.query import capped_int
from strato.api.responses import (
    ERROR_CODES,
    REQUEST_ID_KEY,
    error_media_type,
    error_response,
    strato_error_response,
)
from strato.api.routes import allocations as allocation_routes
from strato.api.routes import reshaper as reshaper_routes
from strato.api.routes import resource_providers as provider_routes
from strato.model import errors
from strato.store import allocations, providers
from strato.zone import split, subtree, writes
from strato.zone.transport import Reply

_ITEM = re.compile(r"^/resource_providers/([0-9a-fA-F-]{32,36})"
                   r"(?:/(?:inventories(?:/[A-Za-z0-9_]{1,255})?|traits|aggregates|usages|"
                   r"allocations))?$")
# Strato's own metadata of a provider (location, tags) follows its provider.
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                   r"[0-9a-fA-F]{12}")
# Consumers looked for below at once by one write that names many.
LOOKUPS_AT_ONCE = 16
# An x-strato-incomplete header says at most this much (the names it cuts are
# counted).
MAX_INCOMPLETE_CHARS = 2000
_META = re.compile(r"^/strato/v1/providers/([0-9a-fA-F-]{32,36})/meta$")
INCOMPLETE = subtree.INCOMPLETE
_CONSUMER = re.compile(r"^/allocations/([0-9a-fA-F-]{32,36})$")
# The store's refusal of an allocation on a provider it does not have.
_NO_PROVIDER = re.compile(rb"Allocation for resource provider '([0-9a-fA-F-]{32,36})' "
                          rb"that does not exist\.")
# Custom traits and resource classes: one registry for the tree.
_REGISTRY = re.compile(r"^/(?:traits/[A-Z0-9_]{1,255}|resource_classes(?:/[A-Z0-9_]{1,255})?)$")


class ProvidersBelow:
    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state
        # One allocations write per consumer at a time through this zone, from
        # the look for it elsewhere to the write (`_refuse_elsewhere`).
        self._consumer_locks = split.GroupLocks()
        # One create or rename of a provider name (or uuid) at a time (`_create`).
        self._name_locks = split.GroupLocks()

    @property
    def owners(self) -> subtree.Owners:
        owners: subtree.Owners = self.state.tree.provider_zones
        return owners

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _REGISTRY.match(scope["path"]) and scope["method"] in ("PUT", "POST"):
            await self._registry(scope, receive, send)
            return
        if ((scope["method"] == "PUT" and _CONSUMER.match(scope["path"]))
                or (scope["method"] == "POST" and scope["path"] == "/allocations")):
            await self._allocations(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == "/strato/v1/providers":
            await self._meta_list(scope, receive, send)
            return
        if scope["method"] == "POST" and scope["path"] == "/reshaper":
            await self._reshape(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] in ("/traits", "/resource_classes"):
            await self._registry_list(scope, receive, send)
            return
        if scope["path"] == "/allocation_candidates" and scope["method"] == "GET":
            await self._candidates(scope, receive, send)
            return
        if not (scope["path"].startswith("/resource_providers")
                or _META.match(scope["path"])):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST" and scope["path"] == "/resource_providers":
            await self._create(scope, receive, send)
            return
        if scope["method"] in ("PUT", "POST", "DELETE"):
            await self._write(scope, receive, send)
            return
        if scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        item = _ITEM.match(path) or _META.match(path)
        if path != "/resource_providers" and item is None:
            await self.app(scope, receive, send)
            return
        tree = self.state.tree
        if not await tree.children():
            await self.app(scope, receive, send)
            return
        status, headers, body = await _capture(self.app, scope, receive)
        if item is None:
            status, headers, body = await self._named_below(scope, status, headers, body)
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            if item is None:
                if status != 200:
                    await _replay(status, headers, body, scope, receive, send)
                    return
                await self._listing(body, headers, query, version, scope, receive, send)
                return
            if status != 404 or await self._here(item.group(1)):
                await _replay(status, headers, body, scope, receive, send)
                return
            full = path + (f"?{query}" if query else "")
            reply = await subtree.provider_route(tree, self.owners, item.group(1).lower(),
                                                 full, version)
        except errors.StratoError as exc:
            resp: Response = _refusal(exc, scope)
            await resp(scope, receive, send)
            return
        if reply is None:
            await _replay(status, headers, body, scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _named_below(self, scope: Scope, status: int, headers: list[tuple[bytes, bytes]],
                           body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """This zone's answer to a GET; when it is a 400 for a custom resource
        class or trait this zone's registry does not have, the children's
        names are learned (a cell made it: `zone/names.py`) and, if that
        brought any, the question is asked again."""
        if status == 400 and b"No such " in body and await self.state.tree.learn_names():
            return await _capture(self.app, scope, _no_body)
        return status, headers, body

    async def _write(self, scope: Scope, receive: Receive, send: Send) -> None:
        item = _ITEM.match(scope["path"]) or _META.match(scope["path"])
        if item is None or not await self.state.tree.children():
            await self.app(scope, receive, send)
            return
        try:
            body = await _read(receive)
        except errors.StratoError as exc:  # too large: the limit's 413
            await _refusal(exc, scope)(scope, receive, send)
            return
        new_name = None
        if scope["method"] == "PUT" and scope["path"] == f"/resource_providers/{item.group(1)}":
            try:
                deps.authorize(Request(scope), "placement:resource_providers:update")
            except errors.StratoError as exc:
                await _refusal(exc, scope)(scope, receive, send)
                return
            renamed = _parsed_or_none(body)
            new_name = (renamed.get("name") if isinstance(renamed, dict)
                        and _valid_here(scope, _update_model(scope), renamed) else None)
        # One create or rename of a name at a time through this zone, from
        # the look for it in the tree to the write.
        async with self._name_locks.hold([f"name:{new_name}"] if isinstance(new_name, str)
                                         else []):
            await self._write_item(scope, receive, send, item, body, new_name)

    async def _write_item(self, scope: Scope, receive: Receive, send: Send,
                          item: re.Match[str], body: bytes, new_name: Any) -> None:
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        uuid = item.group(1).lower()
        if isinstance(new_name, str):
            # A rename: the name must be free in the whole subtree, as in one
            # Placement (each zone checks its own providers only).
            try:
                current = await self._current_name(uuid, version)
                if current is not None and current[0] != new_name:
                    await self._refuse_taken(version, name=new_name, renamed=uuid,
                                             here_too=not current[1])
            except errors.StratoError as exc:
                await _refusal(exc, scope)(scope, receive, send)
                return
        status, headers, answer = await _capture(self.app, scope, replay_body(body, receive))
        if status != 404 or await self._here(item.group(1)):
            await _replay(status, headers, answer, scope, receive, send)
            return
        try:
            parsed = _json_body(scope, body) if body else None
        except errors.StratoError as exc:  # 415 or 400, as this zone's own route
            await _refusal(exc, scope)(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            reply = await subtree.provider_write(
                self.state.tree, self.owners, uuid, scope["method"],
                scope["path"] + (f"?{query}" if query else ""), parsed, version)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        if reply is None:
            await _replay(status, headers, answer, scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _current_name(self, uuid: str, version: str) -> tuple[str, bool] | None:
        """Provider `uuid`'s name and whether it is this zone's; None if no
        zone has it (its write is then this zone's route's 404)."""
        db = self.state.db

        def look() -> str | None:
            with db.read() as conn:
                p = providers.get_provider_or_none(conn, uuid)
            return None if p is None else p.name
        here = await run_in_threadpool(look)
        if here is not None:
            return here, True
        reply = await subtree.provider_route(self.state.tree, self.owners, uuid,
                                             f"/resource_providers/{uuid}", version)
        if reply is None or reply.status != 200 or not isinstance(reply.body, dict):
            return None
        name = reply.body.get("name")
        return (name, False) if isinstance(name, str) else None

    async def _create(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`POST /resource_providers` at a zone with children, as one Placement:
        409 when a provider anywhere below has its name or uuid (each zone
        checks only its own), 503 when a child could not say; a provider
        whose parent is below is made in the zone that owns the parent (as
        Neutron and nova-compute make nested providers); any other is made
        here."""
        tree = self.state.tree
        if not await tree.children():
            await self.app(scope, receive, send)
            return
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        raw = await _authorized_body(scope, receive, send,
                                     "placement:resource_providers:create")
        if raw is None:
            return
        try:
            body = _json_body(scope, raw)
        except errors.StratoError:
            body = None  # this zone's route says what is wrong with it
        if not isinstance(body, dict) or not body.get("name") or not _valid_here(
                scope, _create_model(scope), body):
            # This zone's route says what is wrong with it, before any look
            # below (a 409 or a 503 for a body Placement refuses: 400).
            await self.app(scope, replay_body(raw, receive), send)
            return
        keys = [f"{k}:{body.get(k)}" for k in ("name", "uuid") if isinstance(body.get(k), str)]
        async with self._name_locks.hold(keys):
            await self._create_checked(scope, receive, send, body, raw, version)

    async def _create_checked(self, scope: Scope, receive: Receive, send: Send,
                              body: dict[str, Any], raw: bytes, version: str) -> None:
        tree = self.state.tree
        parent = body.get("parent_provider_uuid")
        below = (isinstance(parent, str) and _UUID.fullmatch(parent) is not None
                 and not await self._here(parent))
        try:
            await self._refuse_taken(version, name=body.get("name"), uuid=body.get("uuid"),
                                     here_too=below)
            reply = (await subtree.provider_write(tree, self.owners, parent.lower(), "POST",
                                                  "/resource_providers", body, version)
                     if below and isinstance(parent, str) else None)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        if reply is None:  # made here (or this zone's route says why not)
            await self.app(scope, replay_body(raw, receive), send)
            return
        await _answer(reply, scope, receive, send)

    async def _reshape(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`POST /reshaper` for providers below (nova-compute's reshape of its
        tree, in the cell that holds it): validated as this zone's route does,
        then sent to the zone that owns them all; a reshape naming providers
        of several zones is a 400 (it is one zone's transaction)."""
        tree = self.state.tree
        if not await tree.children():
            await self.app(scope, receive, send)
            return
        found = scope.get(microversion.SCOPE_KEY)
        v = found if isinstance(found, microversion.Version) else microversion.MIN_VERSION
        raw = await _authorized_body(scope, receive, send, "placement:reshaper:reshape")
        if raw is None:
            return
        try:
            if v < microversion.V1_30:
                raise _Local
            body = _json_body(scope, raw)
            inventories, claims = reshaper_routes.parsed(body, v)
            if not _sendable(body):
                raise _Local
        except (_Local, errors.StratoError):
            await self.app(scope, replay_body(raw, receive), send)  # its answer
            return
        named = set(inventories) | {u for c in claims for u in c.allocations}
        here = {u for u in named if await self._here(u)}
        try:
            if here == named:
                raise _Local
            owner = await subtree.owner_of(tree, self.owners, named - here, str(v))
            if owner.unknown is not None:
                raise _Local  # in no zone: this zone's route says so
            if here or owner.child is None:
                zones = (["this zone"] if here else []) + [f"zone {z}" for z in owner.zones]
                raise errors.BadRequest(
                    "a reshape is made in one zone, and these providers are in "
                    f"{', '.join(zones) or 'several zones'}: reshape each zone's providers "
                    "apart")
            reply = await subtree.send_to(tree, owner.child, "POST", "/reshaper", body,
                                          str(v), "the providers of this reshape")
        except _Local:
            await self.app(scope, replay_body(raw, receive), send)
            return
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _refuse_taken(self, version: str, *, name: Any = None, uuid: Any = None,
                            renamed: str | None = None, here_too: bool = False) -> None:
        """409 when a provider below (or here, `here_too`) has `name` (other
        than provider `renamed`) or, for a new provider, `uuid`; 503 when a
        child could not say. Values this zone's route would refuse anyway
        are not looked for."""
        looks: list[tuple[str, str]] = []
        if isinstance(uuid, str) and _UUID.fullmatch(uuid):
            looks.append(("uuid", str(uuidlib.UUID(uuid))))
        if isinstance(name, str) and 0 < len(name) <= 200 and name.isprintable():
            looks.append(("name", name))
        if not looks:
            return
        if here_too:
            db = self.state.db

            def taken_here() -> str | None:
                with db.read() as conn:
                    for key, value in looks:
                        if (providers.get_provider_or_none(conn, value) is not None
                                if key == "uuid" else providers.name_taken(conn, value)):
                            return key
                return None
            key = await run_in_threadpool(taken_here)
            if key is not None:
                raise errors.Conflict(f"Conflicting resource provider {key}: "
                                      f"{dict(looks)[key]} already exists.",
                                      errors.DUPLICATE_NAME)
        got = await asyncio.gather(*(subtree.list_providers(
            self.state.tree, self.owners, urlencode({key: value}), version, skip_loops=True)
            for key, value in looks))
        for (key, value), (found, missing) in zip(looks, got, strict=True):
            if any(str(p.get("uuid", "")).lower() != renamed for p in found):
                raise errors.Conflict(f"Conflicting resource provider {key}: {value} already "
                                      "exists.", errors.DUPLICATE_NAME)
            if missing:
                raise errors.ServiceUnavailable(
                    f"could not check that no resource provider below has {key} {value}: "
                    f"zone(s) {', '.join(missing)} did not answer; retry", retry_after=1.0)

    async def _registry(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A custom trait or resource class made here is made in every child too
        (each zone checks names against its own registry: a trait made at the
        root must be known where the root sends a provider's traits). A child
        that could not be told is named in x-strato-incomplete; the call
        is idempotent, so the client may repeat it."""
        if not await self.state.tree.children():
            await self.app(scope, receive, send)
            return
        try:
            body = await _read(receive)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(
                scope, receive, send)
            return
        status, headers, answer = await _capture(self.app, scope, replay_body(body, receive))
        if status not in (200, 201, 204):
            await _replay(status, headers, answer, scope, receive, send)
            return
        # This zone's route accepted the call: a body it ignored (Placement
        # ignores the body of PUT /traits/{name} and, from 1.7, of PUT
        # /resource_classes/{name}) is not sent on.
        parsed = _parsed_or_none(body) if body else None
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        missing = await subtree.tell_children(self.state.tree, scope["method"], scope["path"],
                                              parsed, version)
        if missing:
            headers = [*headers, _incomplete(missing)]
        await _replay(status, headers, answer, scope, receive, send)

    async def _own_merged(self, scope: Scope, receive: Receive, send: Send
                          ) -> tuple[list[tuple[bytes, bytes]], Any] | None:
        """A GET whose answer merges the children's with this zone's own: this
        zone's headers and parsed 200 answer; None when the request has been
        answered already (no children: this zone's route; not a 200: as is)."""
        if not await self.state.tree.children():
            await self.app(scope, receive, send)
            return None
        status, headers, body = await _capture(self.app, scope, receive)
        if status != 200:
            await _replay(status, headers, body, scope, receive, send)
            return None
        return headers, json.loads(body)

    async def _meta_list(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`GET /strato/v1/providers` (`strato providers list`) for the whole
        subtree: this zone's providers, then each child's for the same query,
        each row naming its zone (`zone`: `child`, or deeper, `child/cell`);
        a child that could not say is named in x-strato-incomplete."""
        tree = self.state.tree
        got = await self._own_merged(scope, receive, send)
        if got is None:
            return
        headers, own = got
        for row in own["providers"]:
            row["zone"] = tree.config.name
        query = scope.get("query_string", b"").decode("latin-1")
        rows, missing = await subtree.meta_lists(
            tree, "/strato/v1/providers" + (f"?{query}" if query else ""))
        own["providers"] += rows
        await _rewritten(headers, json.dumps(own).encode(), missing, send)

    async def _registry_list(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`GET /traits` and `GET /resource_classes` for the whole tree: this
        zone's answer with the names its children's add (a custom class or
        trait made in a cell); `associated=true`, a trait a provider anywhere
        has; `associated=false`, one no provider anywhere has. A child that
        could not say is named in x-strato-incomplete."""
        tree = self.state.tree
        got = await self._own_merged(scope, receive, send)
        if got is None:
            return
        headers, own = got
        query = scope.get("query_string", b"").decode("latin-1")
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        path: str = scope["path"]
        if path == "/resource_classes":
            lists, missing = await subtree.registry_names(tree, path, version)
            known = {e["name"] for e in own["resource_classes"]}
            extra = sorted({n for names in lists for n in names} - known)
            own["resource_classes"] += [
                {"name": n, "links": [{"rel": "self", "href": f"/resource_classes/{n}"}]}
                for n in extra]
        else:
            params = parse_qsl(query, keep_blank_values=True)
            unassociated = any(k == "associated" and v.lower() == "false" for k, v in params)
            if unassociated:
                rest = [(k, v) for k, v in params if k != "associated"]
                (every, lacking), (used, missing) = await asyncio.gather(
                    subtree.registry_names(tree, "/traits?" + urlencode(rest), version),
                    subtree.registry_names(
                        tree, "/traits?" + urlencode([*rest, ("associated", "true")]),
                        version))
                missing += [m for m in lacking if m not in missing]
                q = urlencode([*rest, ("associated", "true")]).encode()
                said, _, here = await _capture(self.app, {**scope, "query_string": q},
                                               _no_body)
                taken = {n for names in used for n in names}
                if said == 200:
                    taken.update(json.loads(here)["traits"])
                names = ({*own["traits"], *(n for names in every for n in names)}) - taken
            else:
                lists, missing = await subtree.registry_names(
                    tree, "/traits" + (f"?{query}" if query else ""), version)
                names = {*own["traits"], *(n for names in lists for n in names)}
            own["traits"] = sorted(names)
        await _rewritten(headers, json.dumps(own).encode(), missing, send)

    async def _candidates(self, scope: Scope, receive: Receive, send: Send) -> None:
        """This zone's candidates merged with its children's (`subtree.candidates`)."""
        if not await self.state.tree.children():
            await self.app(scope, receive, send)
            return
        status, headers, body = await _capture(self.app, scope, receive)
        status, headers, body = await self._named_below(scope, status, headers, body)
        if status != 200:
            await _replay(status, headers, body, scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        # The first `limit` counts, as at the route (and in Placement).
        first = next((v for k, v in parse_qsl(query) if k == "limit"), None)
        limit = capped_int(first) if first and first.isascii() and first.isdigit() else None
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        own = json.loads(body)
        tree = self.state.tree
        scorer = self.state.engine.scorer

        async def pools(classes: dict[str, int]) -> list[subtree.Pool]:
            found: list[subtree.Pool] = await run_in_threadpool(
                tree.local.sharing_pools, classes, 1)
            return found

        async def pooled_here(classes: Collection[str]) -> set[str]:
            # On the loop when nothing changed since it was last asked (most
            # requests: a thread hop each cost the root 8 clients' throughput).
            found = tree.local.pooled_classes_nowait(classes)
            if found is None:
                found = await run_in_threadpool(tree.local.pooled_classes, classes)
            return found

        async def own_ask(q: str) -> dict[str, Any] | None:
            status, _, answer = await _capture(self.app, {**scope, "query_string": q.encode()},
                                               _no_body)
            return json.loads(answer) if status == 200 else None
        extra, lacking = await subtree.pooled(tree, query, version, scorer, pools, pooled_here,
                                              own_ask)
        merged, missing = await subtree.candidates(tree, own, query, version, limit, scorer,
                                                   extra)
        missing += [m for m in dict.fromkeys(lacking) if m not in missing]
        content = body if merged is own else json.dumps(merged).encode()
        await _rewritten(headers, content, missing, send)

    async def _allocations(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`PUT /allocations/{consumer}` and `POST /allocations` naming providers
        below: sent to the zone that owns them all (consumer generations are
        that zone's to check); a write that names providers of several zones,
        or of this zone and one below, is made all or nothing across them
        (`_across`). An empty `PUT` (a release) goes to the zone that holds
        the consumer."""
        tree = self.state.tree
        if not await tree.children():
            await self.app(scope, receive, send)
            return
        try:
            # The route's own policy, before anything is sent below (a child
            # is called with this zone's credential, not the caller's).
            deps.authorize(Request(scope), "placement:allocations:update"
                           if scope["method"] == "PUT" else "placement:allocations:manage")
            raw = await _read(receive)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        valid = _valid_claims(scope, raw)
        if valid is None:
            # Bad input (media type, JSON, schema): this zone's route says so
            # (its 415 or 400) before anything is sent below.
            await self.app(scope, replay_body(raw, receive), send)
            return
        body, claims = valid
        try:
            named = subtree.named_providers(body)
        except (AttributeError, TypeError, ValueError):
            named = None  # not an allocations body: the route's 400
        if not named:
            consumer = _CONSUMER.match(scope["path"])
            if named is not None and consumer is None and body:
                await self._empty_all(body, raw, scope, receive, send)
                return
            if named is None or consumer is None:
                await self.app(scope, replay_body(raw, receive), send)
                return
            await self._release(consumer.group(1).lower(), body, raw, scope, receive, send)
            return
        here = {u for u in named if await self._here(u)}
        if here == named:
            try:
                for c in _emptied(scope["path"], body):
                    if await self._spans(c):
                        raise errors.BadRequest(
                            f"consumer {c}: its allocations span this zone and one below; "
                            "remove them with DELETE /allocations/{consumer} or an empty "
                            "PUT, not in a POST that writes others")
            except errors.StratoError as exc:
                await _refusal(exc, scope)(scope, receive, send)
                return
            # A consumer of a zone below is not given allocations here too
            # (nor made here while a write makes it below).
            made = [c.consumer_uuid for c in claims if c.allocations]
            async with self._consumer_locks.hold([c.consumer_uuid for c in claims]):
                with contextlib.ExitStack() as stack:
                    try:
                        stack.enter_context(tree.writing(made))
                        await self._refuse_elsewhere(claims, None, here_ok=True)
                    except errors.StratoError as exc:
                        await _refusal(exc, scope)(scope, receive, send)
                        return
                    await self.app(scope, replay_body(raw, receive), send)
            return
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        if not _sendable(body):
            await _refusal(errors.BadRequest(
                "JSON does not validate: an integer past 64 bits (an amount or a "
                "generation) cannot be sent to the zone below that has these providers"),
                scope)(scope, receive, send)
            return
        try:
            owner = await subtree.owner_of(tree, self.owners,
                                           {u.lower() for u in named - here}, version)
            if owner.unknown is not None:
                # In no zone: this zone's route says so, as Placement does
                # (its checks, in its order), naming the provider that is in
                # no zone, not the first this zone lacks (one of a child).
                status, headers, answer = await _capture(self.app, scope,
                                                         replay_body(raw, receive))
                if status == 400:
                    unknown = owner.unknown.encode()
                    answer = _NO_PROVIDER.sub(
                        lambda m: m.group(0).replace(m.group(1), unknown), answer, count=1)
                    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                    headers.append((b"content-length", str(len(answer)).encode()))
                await _replay(status, headers, answer, scope, receive, send)
                return
            target = None if here or owner.child is None else owner.child.name

            def zone_of(rp: str) -> str:
                return ("this zone" if rp in here or rp.lower() in here
                        else f"zone {self.owners.get(rp.lower())}")
            async with self._consumer_locks.hold([c.consumer_uuid for c in claims]):
                with tree.writing([c.consumer_uuid for c in claims if c.allocations]):
                    await self._refuse_elsewhere(claims, target, zone_of=zone_of)
                    if target is None:
                        await self._across(scope, body, here)
                        await Response(status_code=204)(scope, receive, send)
                        return
                    assert owner.child is not None
                    reply = await subtree.send_to(tree, owner.child, scope["method"],
                                                  scope["path"], body, version,
                                                  "a provider of these allocations")
                    if reply.status == 204:
                        for c in _consumers(scope["path"], body):
                            tree.consumer_zones.learn(c, owner.child.name)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _refuse_elsewhere(self, claims: list[allocations.ConsumerClaim],
                                target: str | None, *, here_ok: bool = False,
                                zone_of: Callable[[str], str] | None = None) -> None:
        """Refuse a write that would leave a consumer allocated in two zones:
        one that has allocations in another zone than `target` (the child the
        write goes to; None: a write across zones, which makes new consumers
        only) may not get allocations in `target`. Placement's consumer
        generation check (1.28) comes first, against the generation
        GET /allocations/{consumer} here shows: a stale one (null for a
        consumer that exists, a number for one found nowhere) is a 409, as
        Placement answers; otherwise an existing consumer is a 400: it is
        changed where it is (Placement would move it; below 1.28, where
        Placement checks no generation, that is the answer too).
        Children that cannot be asked are not waited for (a dead child never
        stops writes elsewhere): the consumer is looked for where it can be.
        `here_ok`: the write is made here, so a consumer of this zone is
        changed where it is (its generation checked by this zone's route),
        unless it has allocations below too (written across zones): those
        would be left behind. Every consumer's generation is checked before
        any 400, and the 400 names every existing consumer the write cannot
        change and the zone that holds it (`zone_of`: a provider's zone, as
        the message names it)."""
        held: list[tuple[allocations.ConsumerClaim, list[str]]] = []
        for claim in claims:
            release = not claim.allocations
            if release and target is None and not here_ok:
                continue  # a write across zones refuses it, saying why (zone/writes.py)
            c = claim.consumer_uuid
            where: str | None = None
            current: int | None = None
            asked = True  # every zone that could hold it said
            here = await self._generation_here(c)
            if here is not None:
                current = here
                if here_ok:
                    if release:
                        continue  # this zone's route empties it (a spanning one is refused)
                    below = await self._below_too(c)
                    if below is None:
                        continue
                    where = f"this zone and zone {below}"
                else:
                    try:
                        below = await self._below_too(c)
                    except errors.ServiceUnavailable:
                        below = None  # named as this zone's: refused all the same
                    where = "this zone" if below is None else f"this zone and zone {below}"
            else:
                try:
                    found = await subtree.find_consumer(self.state.tree, c)
                except errors.ServiceUnavailable:
                    found, asked = None, False
                if found is not None:
                    if found.child.name == target:
                        continue  # its zone checks its generation
                    where = f"zone {found.child.name}"
                    given = found.body.get("consumer_generation")
                    current = given if isinstance(given, int) else None
            if where is None:
                if (target is None and not here_ok and asked
                        and isinstance(claim.generation, int)):
                    raise errors.Conflict(
                        f"consumer generation conflict - expected null but got "
                        f"{claim.generation} (consumer {c}: it has no allocations)",
                        errors.CONCURRENT_UPDATE)
                continue
            if (claim.generation is not allocations.ANY_GENERATION
                    and claim.generation != current):
                shown = "null" if current is None else str(current)
                raise errors.Conflict(
                    f"consumer generation conflict - expected {shown} but got "
                    f"{claim.generation} (consumer {c} already has allocations in {where}"
                    + (": a new consumer (consumer_generation null) must not exist)"
                       if claim.generation is None else ")"),
                    errors.CONCURRENT_UPDATE)
            held.append((claim, where.split(" and ")))
        if held:
            into = "this zone" if here_ok else f"zone {target}" if target else None
            raise errors.BadRequest(_held_elsewhere(held, claims, zone_of, into))

    async def _across(self, scope: Scope, body: Any, here: set[str]) -> None:
        """A write naming providers of several zones (this one's and its
        children's): validated as this zone's route would, then made all or
        nothing with held parts in each zone (zone/writes.py)."""
        consumer = _CONSUMER.match(scope["path"])
        found = scope.get(microversion.SCOPE_KEY)
        v = found if isinstance(found, microversion.Version) else microversion.MIN_VERSION
        if consumer is None and v < microversion.V1_13:
            raise errors.NotFound("The resource could not be found.")
        claims = allocation_routes.claims_of(
            body, v, allocation_routes.canonical_uuid(consumer.group(1)) if consumer else None)
        named = subtree.named_providers(body) or set()
        owner = {allocation_routes.canonical_uuid(u): writes.LOCAL if u in here
                 else str(self.owners.get(u.lower())) for u in named}
        await writes.write(self.state.tree, claims, owner)

    async def _release(self, consumer: str, body: Any, raw: bytes, scope: Scope,
                       receive: Receive, send: Send) -> None:
        """An empty PUT: the consumer's allocations are removed where they are
        (here if it has any here; else in the zone below that holds it; both
        for a consumer on a pool here and a host below)."""
        generation = await self._generation_here(consumer)
        if generation is not None:
            await self._release_both(consumer, generation, body, raw, scope, receive, send)
            return
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        try:
            found = await subtree.find_consumer(self.state.tree, consumer)
            if found is None:
                await self.app(scope, replay_body(raw, receive), send)
                return
            reply = await subtree.send_to(self.state.tree, found.child, "PUT", scope["path"],
                                          body, version, f"consumer {consumer}")
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _empty_all(self, body: Any, raw: bytes, scope: Scope, receive: Receive,
                         send: Send) -> None:
        """A `POST /allocations` that only empties consumers: made where they
        are. All here (or nowhere): this zone's route; all in one child: that
        child, with the client's body (it checks their generations, all or
        nothing); in several zones: a 400 (one POST is all or nothing, and
        that is one zone's to make)."""
        tree = self.state.tree
        version = str(scope.get(microversion.SCOPE_KEY) or microversion.MIN_VERSION)
        consumers = _emptied("/allocations", body)
        try:
            if len(consumers) != len(body) or not _sendable(body):
                raise _Local  # not all well-formed: this zone's route says why
            where: dict[str, str] = {}
            child = None
            gate = asyncio.Semaphore(LOOKUPS_AT_ONCE)

            async def look(c: str) -> tuple[bool, subtree.Found | None]:
                async with gate:
                    here = await self._generation_here(c) is not None
                    return here, await subtree.find_consumer(tree, c)
            for c, (here, found) in zip(consumers, await asyncio.gather(
                    *(look(c) for c in consumers)), strict=True):
                if here and found is not None:
                    raise errors.BadRequest(
                        f"consumer {c}: its allocations span this zone and one below; "
                        "remove them with DELETE /allocations/{consumer} or an empty PUT")
                if here:
                    where[c] = "this zone"
                elif found is not None:
                    where[c] = f"zone {found.child.name}"
                    child = found.child
            if child is None:
                raise _Local
            if len(set(where.values())) > 1:
                raise errors.BadRequest(
                    "consumers emptied in one POST /allocations have their allocations in "
                    f"different zones ({', '.join(f'{c} in {w}' for c, w in where.items())}): "
                    "one POST is made all or nothing in one zone; empty them with "
                    "DELETE /allocations/{consumer}, or one POST per zone")
            reply = await subtree.send_to(tree, child, "POST", "/allocations", body, version,
                                          "the consumers of these allocations")
        except _Local:
            await self.app(scope, replay_body(raw, receive), send)
            return
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        await _answer(reply, scope, receive, send)

    async def _release_both(self, consumer: str, generation: int | None, body: Any,
                            raw: bytes, scope: Scope, receive: Receive, send: Send
                            ) -> None:
        """A consumer with allocations here, and perhaps below too (a pool here
        and a host below): the client's consumer generation is this zone's
        (as GET /allocations/{consumer} shows it); when it matches, the part
        below is deleted first (503, nothing changed, if that zone does not
        answer), then this zone's route removes its own."""
        v = scope.get(microversion.SCOPE_KEY)
        given = body.get("consumer_generation") if isinstance(body, dict) else None
        if (isinstance(v, microversion.Version) and v >= microversion.V1_28
                and given != generation):
            await self.app(scope, replay_body(raw, receive), send)  # its 409
            return
        try:
            await subtree.delete_consumer(self.state.tree, consumer)
        except errors.StratoError as exc:
            await _refusal(exc, scope)(scope, receive, send)
            return
        await self.app(scope, replay_body(raw, receive), send)

    async def _generation_here(self, consumer: str) -> int | None:
        """The consumer's generation here when it has allocations here, else None."""
        db = self.state.db

        def look() -> int | None:
            with db.read() as conn:
                found = allocations.get_consumer_allocations(conn, consumer)
            return (found.generation or 0) if found.allocations else None
        return await run_in_threadpool(look)

    async def _spans(self, consumer: str) -> bool:
        """The consumer has allocations here and below (written across zones)."""
        if await self._generation_here(consumer) is None:
            return False
        return await subtree.find_consumer(self.state.tree, consumer) is not None

    async def _below_too(self, consumer: str) -> str | None:
        """The child that holds the rest of a consumer this zone holds part
        of (written across zones), else None. Only a consumer so marked is
        looked for below; 503 when it is and a child could not say."""
        db = self.state.db

        def marked() -> bool:
            with db.read() as conn:
                return allocations.spans_below(conn, consumer)
        if not await run_in_threadpool(marked):
            return None
        found = await subtree.find_consumer(self.state.tree, consumer)
        return None if found is None else found.child.name

    async def _here(self, uuid: str) -> bool:
        """The provider is this zone's (its route's 404 was about something
        else: an inventory it does not have)."""
        db = self.state.db

        def look() -> bool:
            with db.read() as conn:
                return providers.get_provider_or_none(conn, uuid.lower()) is not None
        return await run_in_threadpool(look)

    async def _listing(self, body: bytes, headers: list[tuple[bytes, bytes]], query: str,
                       version: str, scope: Scope, receive: Receive, send: Send) -> None:
        own = json.loads(body)
        seen = {p.get("uuid") for p in own.get("resource_providers", [])}
        below, missing = await subtree.list_providers(self.state.tree, self.owners, query,
                                                      version)
        for p in below:
            if p.get("uuid") not in seen:
                seen.add(p.get("uuid"))
                own["resource_providers"].append(p)
        content = json.dumps(own).encode() if below else body
        await _rewritten(headers, content, missing, send)


def _json_body(scope: Scope, raw: bytes) -> Any:
    """A write's JSON body, read as this zone's own routes read it: 415
    without a JSON media type, 400 if it is not strict JSON (no NaN, no
    integers past 64 bits, nesting bounded)."""
    media = _media_type(scope)
    if media != "application/json":
        raise errors.UnsupportedMediaType(
            f"The media type {media or 'None'} is not supported, use application/json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.BadRequest(f"Malformed JSON: {exc}") from None


def _sendable(body: Any) -> bool:
    """Whether `body` can be sent to another zone: the zone protocol's JSON
    (orjson) holds integers of 64 bits, and Placement reads longer ones (an
    amount of 2**64, a generation: as `allocation_routes` reads them)."""
    try:
        orjson.dumps(body)
    except TypeError:
        return False
    return True


def _media_type(scope: Scope) -> str:
    for k, v in scope.get("headers", []):
        if k.lower() == b"content-type":
            return str(v.decode("latin-1").split(";")[0].strip().lower())
    return ""


def _parsed_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _valid_claims(scope: Scope, raw: bytes
                  ) -> tuple[Any, list[allocations.ConsumerClaim]] | None:
    """(the parsed body, its claims) of an allocations write, validated as
    this zone's route validates them (media type, strict JSON, the body's
    schema at the client's microversion); None when the route would refuse it.
    The body is parsed once."""
    found = scope.get(microversion.SCOPE_KEY)
    v = found if isinstance(found, microversion.Version) else microversion.MIN_VERSION
    consumer = _CONSUMER.match(scope["path"])
    try:
        body = _json_body(scope, raw)
        return body, allocation_routes.claims_of(
            body, v, allocation_routes.canonical_uuid(consumer.group(1)) if consumer else None)
    except (errors.StratoError, ValueError):
        return None


async def _rewritten(headers: list[tuple[bytes, bytes]], content: bytes, missing: list[str],
                     send: Send) -> None:
    """A 200 with this zone's own headers (cache headers, last-modified) over a
    merged body; `missing`: the children it lacks, in x-strato-incomplete."""
    out = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    out.append((b"content-length", str(len(content)).encode()))
    if missing:
        out.append(_incomplete(missing))
    await send({"type": "http.response.start", "status": 200, "headers": out})
    await send({"type": "http.response.body", "body": content})


async def _authorized_body(scope: Scope, receive: Receive, send: Send, action: str
                           ) -> bytes | None:
    """The body of a write `action` allows its caller (checked before
    anything is read or sent below); None when the caller was answered (403,
    413)."""
    try:
        deps.authorize(Request(scope), action)
        return await _read(receive)
    except errors.StratoError as exc:
        await _refusal(exc, scope)(scope, receive, send)
        return None


def _incomplete(missing: list[str]) -> tuple[bytes, bytes]:
    """The x-strato-incomplete header naming `missing`, cut to a bounded
    length (children may name zones below them)."""
    value = ", ".join(missing)
    if len(value) > MAX_INCOMPLETE_CHARS:
        kept = value[:MAX_INCOMPLETE_CHARS].rsplit(", ", 1)[0]
        value = f"{kept}, ... ({len(missing) - kept.count(', ') - 1} more)"
    return INCOMPLETE.encode(), value.encode("latin-1", "replace")


# A 400 that names held consumers names at most this many.
NAMED_AT_MOST = 10


def _held_elsewhere(held: list[tuple[allocations.ConsumerClaim, list[str]]],
                    claims: list[allocations.ConsumerClaim],
                    zone_of: Callable[[str], str] | None, into: str | None = None) -> str:
    """Why a write cannot change these existing consumers (each with the
    zones that hold it), for the 400: one it empties while it is made in
    another zone (`into`), one it would move to another zone, else a write
    that changes existing consumers while naming providers of several zones
    (it cannot be made all or nothing: see zone/writes.py)."""
    def zones(claim: allocations.ConsumerClaim) -> list[str]:
        return sorted({zone_of(rp) for rp in claim.allocations}) if zone_of else []
    for claim, where in held:
        if not claim.allocations:
            made = f", and the write is made in {into}" if into else ""
            return (f"consumer {claim.consumer_uuid} is emptied by this write, but its "
                    f"allocations are in {' and '.join(where)}{made}: one write is made all "
                    "or nothing in one zone, which cannot empty a consumer of another; empty "
                    "it with DELETE /allocations/{consumer} (or a write of its own), then "
                    "write the others")
    for claim, where in held:
        new = zones(claim)
        if not new or not set(new) <= set(where):
            gives = f"; this write gives it allocations in {' and '.join(new)}" if new else ""
            return (f"consumer {claim.consumer_uuid} has its allocations in "
                    f"{' and '.join(where)}{gives}: an existing consumer is changed where it "
                    "is, not moved to another zone (remove its allocations there first, then "
                    "write it anew)")
    named = sorted({z for c in claims for z in zones(c)})
    listed = ", ".join(f"{c.consumer_uuid} in {' and '.join(w)}"
                       for c, w in held[:NAMED_AT_MOST])
    if len(held) > NAMED_AT_MOST:
        listed += f" and {len(held) - NAMED_AT_MOST} more"
    spanning = any(len(w) > 1 for _, w in held)
    return (f"this write names providers of {' and '.join(named)} and changes existing "
            f"consumers ({listed}): a write across zones is made all or nothing by holding "
            "new allocations in each zone, which is done for new consumers only "
            "(consumer_generation null); an existing consumer is changed by a write naming "
            "the providers of the one zone that holds it. Send one POST /allocations per "
            "zone, each naming the providers of one zone"
            + ("; a consumer whose allocations span zones (a pool here and a host below) "
               "cannot be changed, only removed (DELETE /allocations/{consumer}) and written "
               "anew" if spanning else ""))


class _Local(Exception):
    """The write is this zone's own route's to answer."""


def _emptied(path: str, body: Any) -> list[str]:
    """The consumers a POST /allocations body empties (allocations {})."""
    if path != "/allocations" or not isinstance(body, dict):
        return []
    out = []
    for c, one in body.items():
        if isinstance(one, dict) and one.get("allocations") == {}:
            try:
                out.append(allocation_routes.canonical_uuid(str(c)))
            except ValueError:
                continue  # the route's 400
    return out


def _consumers(path: str, body: Any) -> list[str]:
    """The consumers an allocations write is for."""
    found = _CONSUMER.match(path)
    if found is not None:
        return [found.group(1).lower()]
    return [str(c).lower() for c in body] if isinstance(body, dict) else []


def _refusal(exc: errors.StratoError, scope: Scope) -> Response:
    """This zone's refusal as its routes answer one: with its request id, in
    the format the client's `Accept` prefers (Placement's JSON, or webob's
    HTML or plain text page)."""
    rid = scope.get(REQUEST_ID_KEY)
    return strato_error_response(exc, rid if isinstance(rid, str) else None,
                                 accept=_accept(scope))


def _accept(scope: Scope) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == b"accept":
            return str(v.decode("latin-1"))
    return None


async def _answer(reply: Reply, scope: Scope, receive: Receive, send: Send) -> None:
    """A child's answer, as it answered: its body, its Retry-After, its cache
    headers (`Cache-Control`, `Last-Modified`: Placement's from 1.15, and the
    child was asked at the client's microversion) and Location (made this
    zone's: the path, which this zone serves too). An
    error's `code` is left out below microversion 1.23, as this zone's own
    errors are (the child was asked as a zone, which always says it), and
    its `request_id` is this zone's, the one the answer's header carries (as
    Placement's error names its own request)."""
    body = reply.body
    if (reply.status >= 400 and isinstance(body, dict)
            and isinstance(body.get("errors"), list)):
        rid = scope.get(REQUEST_ID_KEY)
        drop = set() if ERROR_CODES.get() else {"code"}
        body = {**body, "errors": [
            {k: (rid if k == "request_id" and isinstance(rid, str) else v)
             for k, v in e.items() if k not in drop}
            if isinstance(e, dict) else e for e in body["errors"]]}
    content = json.dumps(body).encode() if body is not None else b""
    headers = {}
    after = reply.headers.get("retry-after", "")
    if after.isascii() and after.isdigit() and len(after) <= 6:
        headers["retry-after"] = after
    for name in ("cache-control", "last-modified"):
        value = reply.headers.get(name, "")
        if value and value.isascii() and value.isprintable() and len(value) <= 100:
            headers[name] = value
    location = reply.headers.get("location")
    if location:
        parts = urlsplit(location)
        if parts.path.startswith("/"):
            headers["location"] = parts.path + (f"?{parts.query}" if parts.query else "")
    accept = _accept(scope)
    if (isinstance(body, dict) and body.get("errors")
            and error_media_type(accept) != "application/json"):
        # The page Placement (webob) makes of an error when Accept prefers one.
        first = body["errors"][0] if isinstance(body["errors"], list) else None
        if isinstance(first, dict):
            await error_response(reply.status, str(first.get("title", "")),
                                 str(first.get("detail", "")), str(first.get("code", "")),
                                 None, headers, accept)(scope, receive, send)
            return
    out = Response(content=content, status_code=reply.status, headers=headers,
                   media_type="application/json" if content else None)
    await out(scope, receive, send)


async def _capture(app: ASGIApp, scope: Scope, receive: Receive
                   ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The inner app's answer, kept instead of sent."""
    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def keep(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, keep)
    return status, headers, b"".join(chunks)


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)



async def _replay(status: int, headers: list[tuple[bytes, bytes]], body: bytes,
                  scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _version_of(scope: Scope) -> microversion.Version:
    found = scope.get(microversion.SCOPE_KEY)
    return found if isinstance(found, microversion.Version) else microversion.MIN_VERSION


def _create_model(scope: Scope) -> type[BaseModel]:
    """The body of POST /resource_providers at this request's microversion."""
    return (provider_routes.CreateProvider if _version_of(scope) >= microversion.V1_14
            else provider_routes.CreateProviderV1_0)


def _update_model(scope: Scope) -> type[BaseModel]:
    """The body of PUT /resource_providers/{uuid} at this request's microversion."""
    return (provider_routes.UpdateProvider if _version_of(scope) >= microversion.V1_14
            else provider_routes.UpdateProviderV1_0)


def _valid_here(scope: Scope, model: type[BaseModel], body: Any) -> bool:
    """Whether this zone's route would take `body` as `model` (its schema)."""
    try:
        validate(model, body)
    except errors.StratoError:
        return False
    return True
