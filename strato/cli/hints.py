"""What to do next, said with a client-side error: the commands share these.

They are Rich markup: what a server or an exception said is escaped (a
detail such as "url must be http(s)://host[:port][/path]" is not a tag)."""

from __future__ import annotations

import httpx
from rich.markup import escape

_SERVE = ("is `strato serve` running there? Point --url (or STRATO_URL) at a zone, "
          "e.g. http://127.0.0.1:8780")


def unreachable(url: str, exc: Exception, *, timeout_flag: str | None = "--timeout") -> str:
    """`url` could not be reached: why, and what to check (`timeout_flag`: the
    option that gives a slow zone longer, if the command has one)."""
    if isinstance(exc, httpx.TimeoutException):
        more = f"; a busy zone may need longer: {timeout_flag} SECONDS" if timeout_flag else ""
        if isinstance(exc, httpx.ConnectTimeout):
            more += f"; {_SERVE}"
        return escape(f"{url} did not answer in time ({exc or 'timed out'}){more}")
    if isinstance(exc, httpx.UnsupportedProtocol):
        # `--url 127.0.0.1:8780`: httpx's own words do not say what to write.
        e_g = f"http://{url}" if "://" not in url else "http://127.0.0.1:8780"
        return escape(f"{url} is not an http:// or https:// URL: point --url (or STRATO_URL) "
                      f"at a zone, e.g. {e_g}")
    return escape(f"{url} could not be reached: {str(exc).rstrip('.')}; {_SERVE}")


def parse_error(exc: Exception) -> str:
    """A YAML (or other) parser's error in one line: YAML's own spans several
    and quotes the text; its problem and where it is are enough."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def refused(status: int) -> str:
    """A hint for a 401 or 403 (empty for other statuses)."""
    if status not in (401, 403):
        return ""
    return (" (send the token the zone was started with, --auth-token there, by --token "
            "or STRATO_AUTH_TOKEN; a zone started without one, in development mode, takes "
            "'admin' for administrative calls; a zone with --keystone-url takes a Keystone "
            "token with the needed role)")


def status(code: int, error_code: str | None, detail: str) -> str:
    """`HTTP 409 (placement.concurrent_update): detail`, with the hint for a
    401 or 403; `HTTP 404 (no error body)` when the server said nothing."""
    head = f"HTTP {code}" + (f" ({escape(error_code)})" if error_code else "")
    said = f": {escape(detail)}" if detail.strip() else " (no error body)"
    return head + said + refused(code)


def http_error(r: httpx.Response) -> str:
    """`HTTP 401: detail (hint)` from a Placement-style error body, or its text."""
    try:
        detail = str(r.json()["errors"][0]["detail"])
    except (ValueError, KeyError, IndexError, TypeError):
        detail = r.text[:300]
    return status(r.status_code, None, detail)
