"""Optional OpenTelemetry traces: one trace per request across every zone it touches.

Off unless `strato serve --trace otlp|console` (and the `trace` extra is
installed: `pip install 'strato[trace]'`). Then every request a zone answers
is a server span, continued from the caller's W3C `traceparent` header, with
spans inside it for the schedule decision (`strato.schedule`), planning
(`strato.plan`), the claim (`strato.claim`), each call to a child or parent
zone (`strato.zone_call`, which sends `traceparent` on), and each write
transaction (`store.write`). Every span carries the zone's name
(`strato.zone`). The OTLP exporter reads the standard `OTEL_EXPORTER_OTLP_*`
variables (endpoint, headers); `OTEL_SERVICE_NAME` defaults to `strato`.

Off, each `span()` is one flag test: no OpenTelemetry import, no context.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import os
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

log = logging.getLogger("strato.trace")
T = TypeVar("T")
EXPORTERS = ("off", "otlp", "console")
ZONE: contextvars.ContextVar[str] = contextvars.ContextVar("strato_zone", default="-")

_tracer: Any = None   # an opentelemetry Tracer once configured
_propagator: Any = None
_NULL = contextlib.nullcontext()


class TraceUnavailable(RuntimeError):
    """--trace asked for, the OpenTelemetry packages not installed."""


def enabled() -> bool:
    return _tracer is not None


def configure(exporter: str, *, provider: Any = None) -> None:
    """Turn tracing on for this process. `provider`: a TracerProvider made by
    the caller (tests, with an in-memory exporter); else one is made that
    batches spans to `exporter`."""
    global _tracer, _propagator
    if exporter == "off" and provider is None:
        _tracer = None
        return
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        raise TraceUnavailable(
            "--trace needs the OpenTelemetry packages: pip install 'strato[trace]'") from exc
    if provider is None:
        import strato

        provider = TracerProvider(resource=Resource.create({
            "service.name": os.environ.get("OTEL_SERVICE_NAME", "strato"),
            "service.version": strato.__version__}))
        if exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif exporter == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            raise ValueError(f"unknown trace exporter {exporter!r}: one of {EXPORTERS}")
        atexit.register(provider.shutdown)  # the last spans are sent at exit
    _tracer = provider.get_tracer("strato")
    _propagator = TraceContextTextMapPropagator()


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A span under the current one (a no-op when tracing is off)."""
    if _tracer is None:
        return _NULL
    attrs = {"strato.zone": ZONE.get(), **{k: v for k, v in attributes.items()
                                           if v is not None}}
    return _tracer.start_as_current_span(name, attributes=attrs)


def bind(name: str, job: Callable[[Any], T]) -> Callable[[Any], T]:
    """`job`, run later in another thread (the store's writer), as a span under
    the span current now."""
    if _tracer is None:
        return job
    ctx = contextvars.copy_context()

    def spanned(arg: Any) -> T:
        def run() -> T:
            with span(name):
                return job(arg)
        return ctx.run(run)
    return spanned


def inject(headers: MutableMapping[str, str]) -> None:
    """Add `traceparent` (and `tracestate`) for the current span to a zone call."""
    if _propagator is not None:
        _propagator.inject(headers)


def server_span(carrier: dict[str, str], name: str, attributes: dict[str, Any]
                ) -> contextlib.AbstractContextManager[Any]:
    """The span of one request this zone answers, continuing the trace named
    by `carrier` (its traceparent/tracestate headers)."""
    if _tracer is None:
        return _NULL
    from opentelemetry.trace import SpanKind

    return _tracer.start_as_current_span(
        name, context=_propagator.extract(carrier), kind=SpanKind.SERVER,
        attributes=attributes)


@contextlib.contextmanager
def zone_call(zone_url: str, method: str, path: str) -> Iterator[None]:
    """The span of one call to another zone (client side)."""
    if _tracer is None:
        yield
        return
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span(
            "strato.zone_call", kind=SpanKind.CLIENT,
            attributes={"strato.zone": ZONE.get(), "server.address": zone_url[:256],
                        "http.request.method": method, "url.path": path[:512]}):
        yield
