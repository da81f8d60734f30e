"""How the commands talk to a zone, in one place: the URL and the timeout
checked where they are given, and every way a call can go wrong said in one
line with the exit code every command uses for it.

Exit codes: 1 the zone answered with an error, or what answered is not a
Strato zone (a web server's HTML page, JSON of another shape); 2 bad input
(a --url that is not http(s)://host[:port][/path], a --timeout that is not
a number of seconds above 0); 3 the zone could not be reached.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import typer
from rich.markup import escape

from strato.cli import consoles, hints
from strato.zone.protocol import zone_url

ANSWERED = 1
BAD_INPUT = 2
UNREACHABLE = 3
# How a bad URL's error names the option (Typer's own hint would print the
# list of its environment variables as a Python list).
URL_HINT = "--url"
# A zone with children names there the zones whose part an answer lacks.
INCOMPLETE = "x-strato-incomplete"


class NotAZone(Exception):
    """The server answered, but not as a Strato zone does (why: the message)."""


def check_url(url: str) -> str:
    """`url` if a zone can be called there, else typer.BadParameter (exit 2)
    saying what is wrong: Typer calls it on --url / --zone-url, from the
    command line or the environment."""
    if url is None:  # an option with no default (strato sim --url)
        return url
    if "://" not in url or not url.lower().startswith(("http://", "https://")):
        e_g = f"http://{url}" if "://" not in url else "http://127.0.0.1:8780"
        raise typer.BadParameter(f"{url} is not an http:// or https:// URL: point --url (or "
                                 f"STRATO_URL) at a zone, e.g. {e_g}", param_hint=URL_HINT)
    try:
        zone_url(url)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise typer.BadParameter(f"{url} is not a zone's URL: {exc} (write "
                                 "http(s)://host[:port][/path], e.g. http://127.0.0.1:8780)",
                                 param_hint=URL_HINT) from None
    return url


def check_timeout(seconds: float) -> float:
    """A --timeout of more than 0 seconds (httpx refuses a negative one, and 0
    would fail every call at once)."""
    if seconds is not None and not seconds > 0:
        raise typer.BadParameter(f"{seconds:g}: give the seconds to wait, more than 0 "
                                 "(e.g. --timeout 30)")
    return seconds


# The --timeout of the commands that read or change a zone (a schedule
# request, which may wait on the whole tree, has its own: 60 s).
TIMEOUT = typer.Option(30.0, "--timeout", callback=check_timeout,
                       help="Seconds to wait for each answer (more than 0).")


def answer(r: httpx.Response, *keys: str) -> dict[str, Any]:
    """`r`'s JSON object, which has `keys`; NotAZone otherwise."""
    try:
        body = r.json()
    except ValueError:
        kind = r.headers.get("content-type", "").split(";")[0] or "no content type"
        raise NotAZone(f"HTTP {r.status_code} with {kind}, not JSON") from None
    if not isinstance(body, dict):
        raise NotAZone(f"HTTP {r.status_code} with a JSON {type(body).__name__}, not an "
                       "object")
    missing = [k for k in keys if k not in body]
    if missing:
        raise NotAZone(f"HTTP {r.status_code} without {', '.join(map(repr, missing))}")
    return body


def incomplete(r: httpx.Response) -> list[str]:
    """The zones below that could not be asked for this answer (the
    x-strato-incomplete header: the answer is partial), or []."""
    return [z.strip() for z in r.headers.get(INCOMPLETE, "").split(",") if z.strip()]


@contextmanager
def talking_to(url: str) -> Iterator[None]:
    """Calls to the zone at `url`, and the reading of its answers: a zone that
    cannot be reached ends the command with exit 3, an answer that is not a
    zone's (not JSON, or not of a zone's shape) with exit 1, each in one line
    on stderr."""
    err = consoles.console(stderr=True)
    try:
        yield
    except httpx.HTTPError as exc:
        err.print(f"[red]{hints.unreachable(url, exc)}[/]", soft_wrap=True)
        raise typer.Exit(UNREACHABLE) from None
    except httpx.InvalidURL as exc:
        # (A URL checked by check_url does not get here; one a zone named may.)
        err.print(f"[red]{escape(url)} is not a zone's URL[/]: {escape(str(exc))}",
                  soft_wrap=True)
        raise typer.Exit(BAD_INPUT) from None
    except (NotAZone, json.JSONDecodeError, KeyError, IndexError, TypeError,
            AttributeError) as exc:
        why = (f"no {exc} in its answer" if isinstance(exc, KeyError)
               else "its answer is not JSON" if isinstance(exc, json.JSONDecodeError)
               else str(exc) if isinstance(exc, NotAZone)
               # (named, so that a fault of this command is not taken for the zone's)
               else f"its answer is not shaped as a zone's: {type(exc).__name__}: {exc}")
        err.print(f"[red]the server at {escape(url)} did not answer as a Strato zone[/] "
                  f"({escape(why)}); is --url (or STRATO_URL) a zone's address?",
                  soft_wrap=True)
        raise typer.Exit(ANSWERED) from None
