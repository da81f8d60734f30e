"""`strato providers`: a zone's providers, listed and changed without an agent.

`strato providers` (or `providers list`) lists them with location, tags and
heartbeat state; `providers add`, `set` and `delete` create, change and remove
one through the Placement API (and `/strato/v1/providers/{uuid}/meta` for
location and tags), as an operator would for a host with no agent or a pool
of a custom resource. At a zone with children a provider below is changed in
the zone that owns it (the zone routes the calls). Exit codes: 0 done; 1 the
zone answered with an error (its detail printed; 409 when the provider is in
use or changed meanwhile), or not as a Strato zone, or the list is partial (a
zone below could not be asked: named on stderr, and in --json's
"incomplete"); 2 bad input (a --url or --timeout it cannot use too); 3 the
zone could not be reached, or did not answer within --timeout seconds.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from strato.cli import consoles, hints, wire
from strato.cli.schedule import JSON, TOKEN, URL
from strato.model.amounts import AmountError, parse_amounts
from strato.model.location import LocationError, canonical_location, canonical_tags

providers_app = typer.Typer(
    help="A zone's providers: list (the default), add, set, delete.",
    invoke_without_command=True, rich_markup_mode=None)
err = consoles.console(stderr=True)
# The microversion these commands speak: 1.20 returns the provider on create,
# 1.39 is the newest the engine implements and what Nova uses.
MICROVERSION = "placement 1.39"
_TRAIT = re.compile(r"^[A-Z0-9_]{1,255}$")
T = TypeVar("T")

STALE = typer.Option(False, "--stale", help="Only stale providers (silent agents).")
TAG = typer.Option(None, "--tag", help="Only providers with this tag.")
# Options of `strato providers` that only `list` takes (--url, --token and
# --json given before any subcommand apply to it: _inherit).
LIST_OPTIONS = ("stale", "tag")


@providers_app.callback()
def providers(
    ctx: typer.Context, url: str = URL, token: str = TOKEN, stale: bool = STALE,
    tag: str = TAG, as_json: bool = JSON, timeout: float = wire.TIMEOUT,
) -> None:
    """List providers with their location, tags and last report; --stale for silent ones.

    Exit 1 when the list is partial: a zone below could not be asked (named
    on stderr; with --json, in "incomplete").

    Subcommands add, set and delete change one provider. Options given before
    a subcommand apply to it (strato providers --url URL list); the
    subcommand's own win."""
    if ctx.invoked_subcommand is None:
        _list(url, token, stale, tag, as_json, timeout)
    elif ctx.invoked_subcommand != "list":
        for name in LIST_OPTIONS:
            if _given(ctx, name):
                flag = "--" + name
                err.print(f"[red]{flag} is an option of listing[/], not of "
                          f"{ctx.invoked_subcommand} (strato providers {flag} or "
                          f"strato providers list {flag})", soft_wrap=True)
                raise typer.Exit(2)


class _Options(Protocol):
    """A command's context, as far as reading its options goes (Typer's
    Context, and the vendored Click's its parent is)."""

    params: dict[str, Any]

    def get_parameter_source(self, name: str) -> Any: ...


def _given(ctx: _Options, name: str) -> bool:
    """`name` was given on the command line (not taken from the environment or
    its default). By the source's name: Typer vendors its own Click."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _inherit(ctx: typer.Context, name: str, value: T) -> T:
    """A subcommand's option `name`: its own when given on the command line,
    else the one given to `strato providers` before it, else its own (from
    the environment or its default)."""
    group = ctx.parent
    if not _given(ctx, name) and group is not None and _given(group, name):
        inherited: T = group.params[name]
        return inherited
    return value


@providers_app.command("list", short_help="List providers: location, tags, last report.")
def list_providers(
    ctx: typer.Context, url: str = URL, token: str = TOKEN, stale: bool = STALE,
    tag: str = TAG, as_json: bool = JSON, timeout: float = wire.TIMEOUT,
) -> None:
    """List providers with their location, tags and last report; --stale for silent ones.

    Exit 1 when the list is partial: a zone below could not be asked (named
    on stderr; with --json, in "incomplete")."""
    _list(_inherit(ctx, "url", url), _inherit(ctx, "token", token),
          _inherit(ctx, "stale", stale), _inherit(ctx, "tag", tag),
          _inherit(ctx, "as_json", as_json), _inherit(ctx, "timeout", timeout))


def _list(zone_url: str, token: str, stale: bool, tag: str | None, as_json: bool,
          timeout: float) -> None:
    params: dict[str, str] = {}
    if stale:
        params["stale"] = "true"
    if tag:
        params["tag"] = tag
    # Exit 3 when the zone cannot be reached, as add, set and delete (and the
    # module's doc) say.
    with wire.talking_to(zone_url):
        r = httpx.get(f"{zone_url.rstrip('/')}/strato/v1/providers", params=params,
                      headers={"x-auth-token": token}, timeout=timeout)
        if r.status_code != 200:
            _failed(r)
        body = wire.answer(r, "providers", "stale_after")
        missing = wire.incomplete(r)
        console = consoles.console()
        if as_json:
            console.print_json(data={**body, "incomplete": missing} if missing else body)
        else:
            console.print(_table(body["providers"], body["stale_after"], stale))
    if missing:
        # As `strato tree` for a zone it could not ask: exit 1.
        err.print(f"[yellow]warning: the list is partial[/]: zone(s) "
                  f"{escape(', '.join(missing))} below {escape(zone_url)} could not be asked; "
                  "their providers are not listed (exit 1)", soft_wrap=True)
        raise typer.Exit(1)


def _table(rows: list[dict[str, Any]], window: float, only_stale: bool) -> Table:
    title = f"{'stale ' if only_stale else ''}providers (stale after {window:g}s)"
    t = Table(title=title)
    # A zone with children lists its subtree's providers, each with its zone.
    zones = len({p.get("zone") for p in rows}) > 1
    for col in ("name", "uuid", *(["zone"] if zones else []), "location", "tags",
                "last report", "state"):
        t.add_column(col, overflow="fold")
    for p in rows:
        if p["stale"]:
            state = f"[red]{p['stale_reason']}[/]"
        elif p["heartbeat"]:
            state = "[green]reporting[/]"
        else:
            state = "[dim]no agent[/]"
        age = p["seconds_since_report"]
        last = "never" if p["last_report_at"] is None else f"{p['last_report_at']} ({age:.0f}s)"
        loc = p["location"] or ""
        if p["location"] and p["own_location"] is None:
            loc += " [dim](root's)[/]"
        t.add_row(escape(p["name"]), p["uuid"], *([escape(str(p.get("zone")))] if zones else []),
                  loc, ", ".join(p["tags"]), last, state)
    return t


# --- add / set / delete ---------------------------------------------------------

class _Zone:
    """Calls to one zone; every failure ends the command with its exit code (for
    a zone that cannot be reached, or an answer that is not a zone's, made
    under wire.talking_to)."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=timeout, headers={
            "x-auth-token": token, "openstack-api-version": MICROVERSION})

    def call(self, method: str, path: str, body: Any = None,
             ok: tuple[int, ...] = (200, 201, 204)) -> httpx.Response:
        r = self.client.request(method, path, json=body)
        if r.status_code not in ok:
            _failed(r)
        return r

    def find(self, ident: str) -> dict[str, Any]:
        """A provider by UUID or by name."""
        if _is_uuid(ident):
            return self.call("GET", f"/resource_providers/{quote(ident, safe='')}").json()
        r = self.client.get("/resource_providers", params={"name": ident})
        if r.status_code != 200:
            _failed(r)
        rows = wire.answer(r, "resource_providers")["resource_providers"]
        if not rows:
            err.print(f"[red]no provider named {escape(repr(ident))}[/] at {self.url}",
                      soft_wrap=True)
            raise typer.Exit(1)
        return rows[0]


def _failed(r: httpx.Response) -> None:
    try:
        e = r.json()["errors"][0]
        detail, code = str(e.get("detail")), e.get("code")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        detail, code = r.text[:300], None
    err.print(f"[red]{hints.status(r.status_code, code, detail)}[/]", soft_wrap=True)
    raise typer.Exit(3 if r.status_code == 503 else 1)


def _is_uuid(s: str) -> bool:
    try:
        uuidlib.UUID(s)
    except ValueError:
        return False
    return True


def _bad(flag: str, value: str, why: str) -> typer.Exit:
    err.print(f"[red]invalid {flag}[/] {value!r}: {why}", soft_wrap=True)
    return typer.Exit(2)


def _pairs(flag: str, values: list[str] | None, number: type[int] | type[float]
           ) -> dict[str, Any]:
    """`CLASS=N` / `CLASS:N` flags (repeatable, or comma separated) as {CLASS: N}."""
    try:
        out: dict[str, Any] = parse_amounts(values or [], number)
    except AmountError as exc:
        raise _bad(flag, exc.item, exc.why) from None
    for rc, n in out.items():
        if n < 0 or (number is float and n <= 0):
            raise _bad(flag, f"{rc}={n}", "must be positive")
    return out


def _traits(flag: str, values: list[str] | None) -> list[str]:
    out = []
    for v in values or []:
        t = v.strip().upper()
        if not _TRAIT.match(t):
            raise _bad(flag, v, "a trait is upper-case letters, digits and _ (CUSTOM_... "
                                "for your own)")
        out.append(t)
    return out


def _inventory_changes(resource: list[str] | None, reserved: list[str] | None,
                       ratio: list[str] | None) -> dict[str, dict[str, Any]]:
    totals = _pairs("--resource", resource, int)
    res = _pairs("--reserved", reserved, int)
    ratios = _pairs("--ratio", ratio, float)
    changes: dict[str, dict[str, Any]] = {rc: {"total": n} for rc, n in totals.items()}
    for rc, n in res.items():
        changes.setdefault(rc, {})["reserved"] = n
    for rc, f in ratios.items():
        changes.setdefault(rc, {})["allocation_ratio"] = f
    for rc, c in changes.items():
        if "total" in c and c["total"] < 1:
            raise _bad("--resource", f"{rc}={c['total']}", "a total is at least 1 (use "
                       "--remove-resource to drop a class)")
    return changes


def _classes(flag: str, values: list[str] | None) -> list[str]:
    """Resource class names (repeatable, or comma separated), upper-cased."""
    out = []
    for v in values or []:
        for item in v.split(","):
            rc = item.strip().upper()
            if not _TRAIT.match(rc):
                hint = (f" (give the class alone: {flag} {rc.split('=')[0].split(':')[0]})"
                        if "=" in rc or ":" in rc else "")
                raise _bad(flag, item, "a resource class is upper-case letters, digits and "
                                       f"_ (CUSTOM_... for your own){hint}")
            out.append(rc)
    return out


def _inventory_plan(inv: dict[str, Any], changes: dict[str, dict[str, Any]],
                    drop: list[str]) -> dict[str, Any]:
    """The provider's inventories `inv` with `changes` made and `drop` gone; exit
    2 (nothing written) for a change that needs an inventory it does not have."""
    inv = dict(inv)
    for rc, c in changes.items():
        if rc not in inv and "total" not in c:
            raise _bad("--reserved/--ratio", rc, f"{rc} has no inventory here: give "
                                                 f"--resource {rc}=TOTAL")
        inv[rc] = {**inv.get(rc, {}), **c}
    for rc in drop:
        if rc not in inv:
            have = ", ".join(sorted(inv)) or "none"
            raise _bad("--remove-resource", rc, f"no such inventory on this provider "
                                                f"(it has: {have})")
        if rc in changes:
            raise _bad("--remove-resource", rc, "also given to --resource/--reserved/--ratio")
        del inv[rc]
    return inv


def _ensure_custom(z: _Zone, classes: list[str], traits: list[str]) -> None:
    """Custom classes and traits exist before they are used (PUT is idempotent)."""
    for rc in classes:
        if rc.startswith("CUSTOM_"):
            z.call("PUT", f"/resource_classes/{quote(rc, safe='')}")
    for t in traits:
        if t.startswith("CUSTOM_"):
            z.call("PUT", f"/traits/{quote(t, safe='')}")


def _check_meta(location: str | None, tags: list[str] | None) -> None:
    """A location or tag the zone would refuse is bad input (exit 2, nothing sent),
    not a provider made and then deleted."""
    try:
        canonical_location(location)
    except LocationError as exc:
        raise _bad("--location", location or "", str(exc)) from None
    try:
        canonical_tags(tags or [])
    except LocationError as exc:
        raise _bad("--tag", ",".join(tags or []), str(exc)) from None


def _put_meta(z: _Zone, rp: str, location: str | None, tags: list[str] | None,
              clear_location: bool = False) -> None:
    if location is None and tags is None and not clear_location:
        return
    current = z.call("GET", f"/strato/v1/providers/{rp}/meta").json()
    z.call("PUT", f"/strato/v1/providers/{rp}/meta", {
        "location": None if clear_location else
        (location if location is not None else current["own_location"]),
        "tags": tags if tags is not None else current["tags"]})


LOCATION = typer.Option(None, "--location", help="Where it is: 'dfw/room1/rack1/h1' or the "
                                                 "pragma form 'h1.rack1.room1.dfw'.")
TAGS = typer.Option(None, "--tag", help="A tag such as hipaa (repeatable).")
RESOURCE = typer.Option(None, "--resource", "-r", help="CLASS=TOTAL, e.g. VCPU=16 "
                        "(repeatable or comma separated; CLASS:TOTAL works too).")
RESERVED = typer.Option(None, "--reserved", help="CLASS=RESERVED, e.g. MEMORY_MB=512 "
                        "(or CLASS:RESERVED).")
RATIO = typer.Option(None, "--ratio", help="CLASS=ALLOCATION_RATIO, e.g. VCPU=4.0 "
                     "(or CLASS:RATIO).")


@providers_app.command("add")
def add(ctx: typer.Context,
        name: str = typer.Argument(..., help="The provider's name (unique in the zone)."),
        resource: list[str] = RESOURCE, reserved: list[str] = RESERVED,
        ratio: list[str] = RATIO,
        trait: list[str] = typer.Option(None, "--trait", help="A trait (repeatable)."),
        location: str = LOCATION, tag: list[str] = TAGS,
        parent: str = typer.Option(None, "--parent", help="The parent provider (name or "
                                                          "UUID), for a nested provider."),
        uuid: str = typer.Option(None, "--uuid", help="Its UUID (default: a new one)."),
        url: str = URL, token: str = TOKEN, as_json: bool = JSON,
        timeout: float = wire.TIMEOUT) -> None:
    """Create a provider with its inventory, traits, location and tags.

    All or nothing: if a later step is refused the new provider is deleted."""
    url, token = _inherit(ctx, "url", url), _inherit(ctx, "token", token)
    as_json = _inherit(ctx, "as_json", as_json)
    changes = _inventory_changes(resource, reserved, ratio)
    if any("total" not in c for c in changes.values()):
        missing = sorted(rc for rc, c in changes.items() if "total" not in c)
        raise _bad("--reserved/--ratio", ",".join(missing), "give its --resource CLASS=TOTAL too")
    traits = _traits("--trait", trait)
    if uuid is not None and not _is_uuid(uuid):
        raise _bad("--uuid", uuid, "not a UUID")
    _check_meta(location, tag)
    with wire.talking_to(url):
        z = _Zone(url, token, _inherit(ctx, "timeout", timeout))
        body: dict[str, Any] = {"name": name, "uuid": uuid or str(uuidlib.uuid4())}
        if parent:
            body["parent_provider_uuid"] = z.find(parent)["uuid"]
        _ensure_custom(z, list(changes), traits)
        rp = z.call("POST", "/resource_providers", body).json()
        try:
            gen = rp["generation"]
            if changes:
                gen = z.call("PUT", f"/resource_providers/{rp['uuid']}/inventories", {
                    "resource_provider_generation": gen, "inventories": changes,
                }).json()["resource_provider_generation"]
            if traits:
                z.call("PUT", f"/resource_providers/{rp['uuid']}/traits", {
                    "resource_provider_generation": gen, "traits": traits})
            _put_meta(z, rp["uuid"], location, tag or None)
        except typer.Exit:
            z.client.delete(f"/resource_providers/{rp['uuid']}")
            err.print(f"[yellow]{escape(name)} was not added[/] (the half-made provider was "
                      "deleted)")
            raise
        _show(z, rp["uuid"], as_json, f"added provider {name} {rp['uuid']}")


@providers_app.command("set")
def set_(ctx: typer.Context, provider: str = typer.Argument(..., help="Name or UUID."),
         resource: list[str] = RESOURCE, reserved: list[str] = RESERVED,
         ratio: list[str] = RATIO,
         remove_resource: list[str] = typer.Option(
             None, "--remove-resource", help="Drop a class's inventory (refused while "
                                             "it is allocated)."),
         trait: list[str] = typer.Option(None, "--trait", help="Add a trait."),
         remove_trait: list[str] = typer.Option(None, "--remove-trait",
                                                help="Remove a trait."),
         location: str = LOCATION,
         no_location: bool = typer.Option(False, "--no-location",
                                          help="Inherit the root provider's location."),
         tag: list[str] = typer.Option(None, "--tag", help="Replace the tags (repeatable; "
                                                           "--tag '' for none)."),
         rename: str = typer.Option(None, "--name", help="A new name."),
         url: str = URL, token: str = TOKEN, as_json: bool = JSON,
         timeout: float = wire.TIMEOUT) -> None:
    """Change a provider: inventory, traits, location, tags, name.

    Inventory and traits are read, changed and written with the provider's
    generation; a concurrent change is retried (a few times) on fresh state."""
    url, token = _inherit(ctx, "url", url), _inherit(ctx, "token", token)
    as_json = _inherit(ctx, "as_json", as_json)
    changes = _inventory_changes(resource, reserved, ratio)
    drop = _classes("--remove-resource", remove_resource)
    add_traits = _traits("--trait", trait)
    rm_traits = _traits("--remove-trait", remove_trait)
    tags = None if tag is None or tag == [] else [t for t in tag if t]
    if location is not None and no_location:
        raise _bad("--location", location, "give --location or --no-location, not both")
    _check_meta(location, tags)
    with wire.talking_to(url):
        z = _Zone(url, token, _inherit(ctx, "timeout", timeout))
        rp = z.find(provider)
        u = rp["uuid"]
        if changes or drop:
            # Refused before anything is written (the name included); checked
            # again on every try below, on fresh state.
            _inventory_plan(z.call("GET", f"/resource_providers/{u}/inventories").json()
                            ["inventories"], changes, drop)
        if rename and rename != rp["name"]:
            z.call("PUT", f"/resource_providers/{u}", {
                "name": rename, "parent_provider_uuid": rp.get("parent_provider_uuid")})
        _ensure_custom(z, list(changes), add_traits)
        if changes or drop:
            _put_current(z, f"/resource_providers/{u}/inventories", lambda cur: {
                "inventories": _inventory_plan(cur["inventories"], changes, drop)})
        if add_traits or rm_traits:
            _put_current(z, f"/resource_providers/{u}/traits", lambda cur: {
                "traits": sorted((set(cur["traits"]) | set(add_traits)) - set(rm_traits))})
        _put_meta(z, u, location, tags if tag is not None else None, clear_location=no_location)
        _show(z, u, as_json, f"changed provider {rename or rp['name']} {u}")


@providers_app.command("delete", short_help="Delete a provider (409 while it is in use).")
def delete(ctx: typer.Context, provider: str = typer.Argument(..., help="Name or UUID."),
           url: str = URL, token: str = TOKEN, timeout: float = wire.TIMEOUT) -> None:
    """Delete a provider (refused with 409 while it has allocations or children)."""
    url, token = _inherit(ctx, "url", url), _inherit(ctx, "token", token)
    with wire.talking_to(url):
        z = _Zone(url, token, _inherit(ctx, "timeout", timeout))
        rp = z.find(provider)
        z.call("DELETE", f"/resource_providers/{rp['uuid']}")
        consoles.console().print(f"deleted provider {escape(rp['name'])} {rp['uuid']}")


def _put_current(z: Any, path: str, body_of: Callable[[dict[str, Any]], dict[str, Any]]
                 ) -> None:
    """PUT `path` what `body_of` makes of its current state, at its generation;
    read and written again on a generation conflict (another writer), five
    tries."""
    for attempt in range(5):
        cur = z.call("GET", path).json()
        r = z.call("PUT", path, {
            "resource_provider_generation": cur["resource_provider_generation"],
            **body_of(cur)}, ok=(200, 409))
        if r.status_code == 200:
            return
        if _code(r) != "placement.concurrent_update" or attempt == 4:
            _failed(r)


def _code(r: httpx.Response) -> str | None:
    try:
        return str(r.json()["errors"][0]["code"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _show(z: _Zone, u: str, as_json: bool, line: str) -> None:
    rp = z.call("GET", f"/resource_providers/{u}").json()
    inv = z.call("GET", f"/resource_providers/{u}/inventories").json()["inventories"]
    traits = z.call("GET", f"/resource_providers/{u}/traits").json()["traits"]
    meta = z.call("GET", f"/strato/v1/providers/{u}/meta").json()
    view = {"uuid": u, "name": rp["name"], "generation": rp["generation"],
            "parent_provider_uuid": rp.get("parent_provider_uuid"), "inventories": inv,
            "traits": traits, "location": meta["location"], "tags": meta["tags"]}
    if as_json:
        consoles.console().print_json(data=view)
        return
    out = consoles.console()
    out.print(escape(line))  # a provider's name is anything: never markup
    for rc, i in sorted(inv.items()):
        out.print(f"  {rc}: total {i['total']}, reserved {i['reserved']}, "
                  f"ratio {i['allocation_ratio']:g}")
    if traits:
        out.print(f"  traits: {', '.join(traits)}")
    if meta["location"] or meta["tags"]:
        out.print(f"  location: {meta['location'] or '-'}; tags: {', '.join(meta['tags']) or '-'}")
