"""What to do next, said with a client-side error: the commands share these."""

from __future__ import annotations

import httpx

_SERVE = ("is `strato serve` running there? Point --url (or STRATO_URL) at a zone, "
          "e.g. http://127.0.0.1:8780")


def unreachable(url: str, exc: Exception) -> str:
    """`url` could not be reached: why, and what to check."""
    if isinstance(exc, httpx.TimeoutException):
        return f"{url} did not answer in time ({exc or 'timeout'})"
    return f"{url} could not be reached: {exc}; {_SERVE}"


def refused(status: int) -> str:
    """A hint for a 401 or 403 (empty for other statuses)."""
    if status not in (401, 403):
        return ""
    return (" (a zone started without --auth-token, in development mode, takes the token "
            "'admin' for administrative calls: --token or STRATO_AUTH_TOKEN; otherwise a "
            "Keystone token with the needed role)")
