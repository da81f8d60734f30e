"""CORS, as Placement serves it (oslo.middleware's CORS) when origins are configured.

Without configured origins there is no CORS at all: OPTIONS is a 405 like any
other method a path lacks. With them, every OPTIONS is a preflight answered
200 here; the CORS headers are added only when the origin, the method and
every requested header are allowed. A plain request from an allowed origin
gets `Access-Control-Allow-Origin` on its answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALLOW_METHODS = ("GET", "PUT", "POST", "DELETE", "PATCH")


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    allowed_origins: tuple[str, ...]
    allow_headers: tuple[str, ...] = ()
    allow_credentials: bool = True

    def preflight_headers(self, headers: dict[str, str]) -> list[tuple[str, str]]:
        """The headers a preflight gets; none when it is not allowed."""
        origin = headers.get("origin")
        method = headers.get("access-control-request-method")
        if origin not in self.allowed_origins or method not in ALLOW_METHODS:
            return []
        asked = [h.strip() for h in headers.get("access-control-request-headers", "").split(",")
                 if h.strip()]
        allowed = {h.lower() for h in self.allow_headers}
        if any(h.lower() not in allowed for h in asked):
            return []
        out = [("vary", "Origin"), ("access-control-allow-origin", origin),
               ("access-control-allow-methods", method)]
        if self.allow_credentials:
            out.append(("access-control-allow-credentials", "true"))
        if asked:
            out.append(("access-control-allow-headers", ",".join(asked)))
        return out

    def request_headers(self, headers: dict[str, str]) -> list[tuple[str, str]]:
        origin = headers.get("origin")
        if origin not in self.allowed_origins:
            return []
        out = [("vary", "Origin"), ("access-control-allow-origin", origin)]
        if self.allow_credentials:
            out.append(("access-control-allow-credentials", "true"))
        return out


class CorsMiddleware:
    def __init__(self, app: ASGIApp, policy: CorsPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        if scope["method"] == "OPTIONS":
            extra = self.policy.preflight_headers(headers)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"0"), *_encoded(extra)]})
            await send({"type": "http.response.body", "body": b""})
            return
        extra = self.policy.request_headers(headers)
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + _encoded(extra)
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
