"""`strato tree`: the zone tree at a glance, from any zone.

Each zone's own summary (capacity and use per class), then its children as
it sees them (health, requests in doubt, last error), and, down their
registered URLs, their children in turn. A zone that cannot be asked from
here (another token, an address only its parent reaches) but that its
parent calls healthy is shown as its parent sees it; one that is down is
shown with why; the rest of the tree is still shown. Exit codes: 0 every zone
answered and is healthy; 1 some zone is unhealthy or could not be asked, or
the first zone refused (a wrong token: 401); 3 the first zone could not be
reached.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import typer
from rich.markup import escape
from rich.tree import Tree

from strato.cli import consoles, hints, wire
from strato.cli.schedule import TOKEN, URL

console = consoles.console()
BAR = 12
# What a zone's summary has (strato.zone.protocol.Summary), as far as this reads it.
SUMMARY = ("zone", "providers", "classes")


def _bar(used: int, capacity: int) -> str:
    share = used / capacity if capacity else 0.0
    filled = round(share * BAR)
    color = "green" if share < 0.7 else "yellow" if share < 0.9 else "red"
    return f"[{color}]{'█' * filled}[/]{'░' * (BAR - filled)} {share:5.1%}"


def _classes(summary: dict[str, Any]) -> list[str]:
    out = []
    for rc, c in sorted(summary.get("classes", {}).items()):
        out.append(f"{rc:<10} {_bar(int(c.get('used', 0)), int(c.get('capacity', 0)))}"
                   f"  {c.get('used', 0):,}/{c.get('capacity', 0):,}"
                   f" (one host: {c.get('largest_free', 0):,})")
    return out


def _get(client: httpx.Client, url: str, path: str, *keys: str) -> dict[str, Any]:
    """The zone's answer, which has `keys` (wire.NotAZone otherwise)."""
    status = getattr(client, "strato_status", None)
    if status is not None:  # a zone that does not answer takes --timeout: say which
        status.update(f"asking {escape(url)} …")
    r = client.get(url.rstrip("/") + path)
    r.raise_for_status()
    return wire.answer(r, *keys)


def _walk(client: httpx.Client, url: str, node: Tree, depth: int, state: dict[str, Any],
          seen_above: dict[str, Any] | None = None) -> None:
    """`seen_above`: the parent's row for this zone (its cached summary): what
    is shown when this zone cannot be asked from here (its own token, an
    address only its parent can reach) while its parent says it is healthy."""
    try:
        summary = _get(client, url, "/strato/v1/summary?fresh=true", *SUMMARY)
        kids = _get(client, url, "/strato/v1/children", "children")["children"]
    except (httpx.HTTPError, httpx.InvalidURL, wire.NotAZone, KeyError) as exc:
        why = (hints.http_error(exc.response) if isinstance(exc, httpx.HTTPStatusError)
               else escape(str(exc)))
        if seen_above is not None and seen_above.get("summary"):
            # Healthy as its parent sees it: not a fault of the tree.
            short = why if len(why) <= 100 else why[:99] + "…"
            node.add(f"[dim]as its parent sees it (not asked from here: {short})[/]")
            for line in _classes(seen_above["summary"]):
                node.add(line)
            return
        node.add(f"[red]could not be asked[/]: {why}")
        state["bad"] = True
        return
    state["zones"].append({"url": url, "summary": summary, "children": kids})
    for line in _classes(summary):
        node.add(line)
    for k in kids:
        h = k.get("health", {})
        ok = bool(h.get("healthy"))
        label = (f"[bold]{escape(str(k['name']))}[/] {k.get('location_prefix') or ''} "
                 f"{'[green]healthy[/]' if ok else '[red]unhealthy[/]'}")
        if k.get("in_doubt"):
            label += f" [yellow]{k['in_doubt']} in doubt[/]"
        if not ok:
            state["bad"] = True
            if h.get("last_error"):
                label += f" — {escape(str(h['last_error'])[:100])}"
        child = node.add(label)
        if depth > 1 and ok and str(k.get("url", "")).startswith(("http://", "https://")):
            _walk(client, str(k["url"]), child, depth - 1, state, k)
        elif k.get("summary"):
            for line in _classes(k["summary"]):
                child.add(line)


def render(url: str, token: str, *, depth: int = 8, timeout: float = 5.0,
           status: Any = None) -> tuple[Tree, dict[str, Any]]:
    """The tree below the zone at `url`, and what each zone said ({"bad",
    "zones"}); raises httpx.HTTPError when that zone cannot be asked.
    `status`: a Rich status told which zone is being asked."""
    headers = {"x-auth-token": token, "openstack-api-version": "placement 1.39"}
    state: dict[str, Any] = {"bad": False, "zones": []}
    with httpx.Client(headers=headers, timeout=timeout) as client:
        client.strato_status = status  # type: ignore[attr-defined]
        top = _get(client, url, "/strato/v1/summary?fresh=true", *SUMMARY)
        root = Tree(f"[bold]{escape(str(top.get('zone', url)))}[/] "
                    f"{top.get('location_prefix') or ''} "
                    f"({top.get('providers', 0):,} provider"
                    f"{'' if top.get('providers') == 1 else 's'} below)")
        _walk(client, url, root, depth, state)
    return root, state


def tree(url: str = URL, token: str = TOKEN,
         depth: int = typer.Option(8, min=1, help="How many levels below to ask."),
         as_json: bool = typer.Option(False, "--json", help="What each zone said, as JSON."),
         timeout: float = typer.Option(5.0, callback=wire.check_timeout,
                                       help="Seconds to wait for each zone (more than 0).")
         ) -> None:
    """The zone tree at a glance: capacity and use per class, health, requests in doubt."""
    # The first zone unreachable: exit 3; not answering as a zone: 1.
    with wire.talking_to(url), consoles.console(stderr=True).status(
            "asking the zones …") as status:
        try:
            root, state = render(url, token, depth=depth, timeout=timeout, status=status)
        except httpx.HTTPStatusError as exc:
            # It answered: a wrong token (401, 403) is not "could not be reached".
            consoles.console(stderr=True).print(f"[red]{hints.http_error(exc.response)}[/]",
                                                soft_wrap=True)
            raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(state["zones"], indent=2))
    else:
        console.print(root)
    raise typer.Exit(1 if state["bad"] else 0)
