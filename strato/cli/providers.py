"""`strato providers`: list a zone's providers with location, tags and heartbeat state."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table


def providers(
    zone_url: str = typer.Option("http://127.0.0.1:8780", "--zone-url", "--url",
                                 envvar=["STRATO_ZONE_URL", "STRATO_URL"],
                                 help="The zone server."),
    token: str = typer.Option("admin", envvar="STRATO_AUTH_TOKEN", help="X-Auth-Token."),
    stale: bool = typer.Option(False, "--stale", help="Only stale providers (silent agents)."),
    tag: str = typer.Option(None, help="Only providers with this tag."),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON answer."),
) -> None:
    """List providers with their location, tags and last report; --stale for silent ones."""
    import httpx

    params: dict[str, str] = {}
    if stale:
        params["stale"] = "true"
    if tag:
        params["tag"] = tag
    try:
        r = httpx.get(f"{zone_url.rstrip('/')}/strato/v1/providers", params=params,
                      headers={"x-auth-token": token}, timeout=30)
    except httpx.HTTPError as exc:
        typer.echo(f"strato providers: {zone_url} unreachable: {exc}", err=True)
        raise typer.Exit(1) from None
    if r.status_code != 200:
        typer.echo(f"strato providers: HTTP {r.status_code}: {r.text[:300]}", err=True)
        raise typer.Exit(1)
    body = r.json()
    console = Console()
    if as_json:
        console.print_json(data=body)
        return
    console.print(_table(body["providers"], body["stale_after"], stale))


def _table(rows: list[dict[str, Any]], window: float, only_stale: bool) -> Table:
    title = f"{'stale ' if only_stale else ''}providers (stale after {window:g}s)"
    t = Table(title=title)
    for col in ("name", "uuid", "location", "tags", "last report", "state"):
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
        t.add_row(p["name"], p["uuid"], loc, ", ".join(p["tags"]), last, state)
    return t
