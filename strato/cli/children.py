"""`strato children`: a zone's child zones, by hand.

A child registers itself (`strato serve --parent URL`); these commands are
for a child that cannot (another organisation's zone, a zone behind a proxy)
and for taking one out of the tree. Exit codes: 0 done; 1 the zone answered
with an error (its detail printed), or not as a Strato zone; 2 bad input (a
--url or --timeout it cannot use); 3 the zone could not be reached, or did not
answer within --timeout seconds.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import typer
from rich.markup import escape
from rich.table import Table

from strato.cli import consoles, hints, wire
from strato.cli.schedule import JSON, TOKEN, URL

children_app = typer.Typer(help="A zone's child zones: list, add, remove.",
                           no_args_is_help=True, rich_markup_mode=None)
err = consoles.console(stderr=True)


def _call(method: str, url: str, path: str, token: str, timeout: float,
          body: Any = None) -> httpx.Response:
    with wire.talking_to(url):
        return httpx.request(method, url.rstrip("/") + path, json=body, timeout=timeout,
                             headers={"x-auth-token": token})


def _failed(r: httpx.Response) -> None:
    try:
        detail = str(r.json()["errors"][0]["detail"])
    except (ValueError, KeyError, IndexError, TypeError):
        detail = r.text[:300]
    err.print(f"[red]{hints.status(r.status_code, None, detail)}[/]", soft_wrap=True)
    raise typer.Exit(1)


@children_app.command("list")
def list_children(url: str = URL, token: str = TOKEN, as_json: bool = JSON,
                  timeout: float = wire.TIMEOUT) -> None:
    """The zone's children: address, location, health, requests in doubt."""
    r = _call("GET", url, "/strato/v1/children", token, timeout)
    if r.status_code != 200:
        _failed(r)
    with wire.talking_to(url):
        answer = wire.answer(r, "children")
        if as_json:
            consoles.console().print_json(data=answer)
            return
        t = Table(title=f"children of {url}")
        for col in ("name", "url", "location", "tags", "health", "in doubt"):
            t.add_column(col, overflow="fold")
        for k in answer["children"]:
            h = k.get("health") or {}
            state = "[green]healthy[/]" if h.get("healthy") else \
                f"[red]down[/] {escape(str(h.get('last_error') or '')[:60])}"
            t.add_row(escape(k["name"]), k["url"], k.get("location_prefix") or "",
                      ", ".join(k.get("tags") or []), state, str(k.get("in_doubt", 0)))
    consoles.console().print(t)


@children_app.command("add")
def add_child(name: str = typer.Argument(..., help="The child zone's name."),
              child_url: str = typer.Argument(..., help="Where to call it: http(s)://host:port"),
              location_prefix: str = typer.Option(None, help="Where it is, e.g. dfw."),
              tag: list[str] = typer.Option([], "--tag", help="A tag of all its providers."),
              credential: str = typer.Option(None, envvar="STRATO_CHILD_CREDENTIAL",
                                             help="The token to send when calling it."),
              url: str = URL, token: str = TOKEN, timeout: float = wire.TIMEOUT) -> None:
    """Add a child zone (or update the one of that name)."""
    body: dict[str, Any] = {"name": name, "url": child_url, "tags": tag}
    if location_prefix:
        body["location_prefix"] = location_prefix
    if credential:
        body["credential"] = credential
    r = _call("POST", url, "/strato/v1/children", token, timeout, body)
    if r.status_code not in (200, 201):
        _failed(r)
    with wire.talking_to(url):
        # Said only when what answered is a zone that took the child.
        health = wire.answer(r, "name", "url").get("health") or {}
        healthy = health.get("healthy")
    consoles.console().print(f"{'added' if r.status_code == 201 else 'updated'} child {name} "
                             f"({child_url})")
    if healthy is False:
        # Registered all the same (it may be starting): said, not refused.
        why = health.get("last_error") or "no answer"
        consoles.console(stderr=True).print(
            f"[yellow]warning[/]: zone {name} did not answer at {child_url} ({why}); it is "
            "registered, and used once a probe reaches it (strato children list shows "
            "its health)", soft_wrap=True)


@children_app.command("remove", short_help="Take a child zone out of the tree.")
def remove_child(name: str = typer.Argument(..., help="The child zone's name."),
                 url: str = URL, token: str = TOKEN, timeout: float = wire.TIMEOUT) -> None:
    """Take a child zone out of the tree (its own data stays where it is)."""
    r = _call("DELETE", url, f"/strato/v1/children/{quote(name, safe='')}", token, timeout)
    if r.status_code != 204:
        _failed(r)
    consoles.console().print(f"removed child {name}")
