"""`strato release CONSUMER...`: delete consumers' allocations at a zone.

At a zone with children the consumer is found below (strato/zone/subtree.py),
so the root releases what was placed through it. Exit codes, as every
command's: 0 every consumer released; 1 one or more held nothing (404), or the
zone refused (401, 403, another error answer), or it is not a Strato zone; 2
bad input (not a consumer UUID, a --url or --timeout it cannot use); 3 the
zone (or the part of the tree holding a consumer) could not be reached (503 or
no connection): retry.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
import typer
from rich.markup import escape

from strato.cli import consoles, hints, wire
from strato.cli.schedule import TOKEN, URL

console = consoles.console()
err = consoles.console(stderr=True)


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json()["errors"][0]["detail"])
    except (ValueError, KeyError, IndexError, TypeError):
        return r.text[:200]


def release(consumers: list[str] = typer.Argument(..., help="Consumer UUIDs."),
            url: str = URL, token: str = TOKEN,
            timeout: float = typer.Option(30.0, callback=wire.check_timeout,
                                          help="Seconds to wait for each answer (more "
                                               "than 0).")
            ) -> None:
    """Release consumers: delete their allocations wherever they are below this zone.

    Exit 0 when every one was released; 1 when one held nothing (404) or the
    zone refused (401, 403, another error); 2 for bad input; 3 when the zone,
    or the part of the tree holding a consumer, could not be reached (retry)."""
    for c in consumers:
        try:
            uuid.UUID(c)
        except ValueError:
            err.print(f"[red]not a consumer UUID[/]: {c}")
            raise typer.Exit(2) from None
    code = 0
    headers = {"x-auth-token": token, "openstack-api-version": "placement 1.39"}
    with wire.talking_to(url), httpx.Client(base_url=url, headers=headers,
                                            timeout=timeout) as client:
        for c in consumers:
            r = client.delete(f"/allocations/{quote(c, safe='')}")
            if r.status_code == 204:
                console.print(f"released {c}")
            elif r.status_code == 404:
                console.print(f"[yellow]{c} holds nothing here[/]")
                code = max(code, 1)
            elif r.status_code == 503:
                err.print(f"[red]{c}: part of the tree could not be asked[/]: {escape(_detail(r))}")
                raise typer.Exit(3)
            else:
                # Refused (a wrong token): exit 1, as for every command.
                err.print(f"[red]{c}: {hints.status(r.status_code, None, _detail(r))}[/]",
                          soft_wrap=True)
                raise typer.Exit(1)
    raise typer.Exit(code)
