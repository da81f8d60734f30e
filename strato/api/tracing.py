"""The server span of every request a zone answers (strato/trace.py)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from strato import trace
from strato.api import routename
from strato.api.responses import StatusOf


class TraceMiddleware:
    """A server span per HTTP request, continuing the caller's trace; sets the
    zone's name for every span under it."""

    def __init__(self, app: ASGIApp, zone: str) -> None:
        self.app = app
        self.zone = zone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace.ZONE.set(self.zone)
        if not trace.enabled():
            await self.app(scope, receive, send)
            return
        from opentelemetry.trace import Status, StatusCode

        carrier = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"] if k.lower() in (b"traceparent", b"tracestate")}
        method, path = scope["method"], scope["path"]
        answered = StatusOf(send)
        with trace.server_span(carrier, f"{method} {path}", {
                "http.request.method": method, "url.path": path[:512],
                "strato.zone": self.zone}) as span:
            try:
                await self.app(scope, receive, answered)
            finally:
                status = answered.status
                template = routename.template(scope)
                if template:
                    span.update_name(f"{method} {template}")
                    span.set_attribute("http.route", template)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
