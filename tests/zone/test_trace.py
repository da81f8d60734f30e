"""One trace per request across every zone it touches (issue 16): root → mid
→ cell in process, spans kept by OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strato import trace
from strato.zone.inprocess import ZoneSpec, build
from tests.zone.test_tree import host


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.configure("memory", provider=provider)
    try:
        yield exporter
    finally:
        trace.configure("off")


def test_a_request_is_one_trace_from_the_root_to_the_cell(
        tmp_path: Path, spans: InMemorySpanExporter) -> None:
    async def main() -> None:
        tree = build(tmp_path, [ZoneSpec("root"), ZoneSpec("mid", parent="root"),
                                ZoneSpec("cell", parent="mid")])
        try:
            await tree.link()
            await host(tree.client("cell"), "cell-h0", "site1/rack0/h0")
            await tree.zone_tree("mid").refresh(fresh=True)
            await tree.zone_tree("root").refresh(fresh=True)
            spans.clear()
            caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            r = await tree.client("root").post("/strato/v1/schedule", headers={
                "traceparent": caller}, json={
                "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 2}}]})
            assert r.status_code == 200, r.text
        finally:
            await tree.aclose()

    asyncio.run(main())
    every = spans.get_finished_spans()
    # The request's spans are in the caller's trace (background work, such as
    # a summary refresh, makes traces of its own).
    got = [s for s in every if s.context.trace_id == 0x4bf92f3577b34da6a3ce929d0e0e4736]
    by_id = {s.context.span_id: s for s in got}
    assert all(s.name in ("strato.zone_call", "store.write", "store.job", "store.write_now")
               or s.name.startswith("GET ")
               for s in every if s not in got), [s.name for s in every if s not in got]

    def zone(s: Any) -> str:
        return str(s.attributes.get("strato.zone"))

    servers = {zone(s): s for s in got if s.name == "POST /strato/v1/schedule"}
    assert set(servers) == {"root", "mid", "cell"}, [(s.name, zone(s)) for s in got]
    assert servers["root"].parent.span_id == 0x00f067aa0ba902b7
    # Each zone's server span hangs under its parent's call to it.
    for child, parent in (("mid", "root"), ("cell", "mid")):
        call = by_id[servers[child].parent.span_id]
        assert call.name == "strato.zone_call" and zone(call) == parent
        assert call.attributes["url.path"] == "/strato/v1/schedule"
    names = {(s.name, zone(s)) for s in got}
    assert {("strato.schedule", "root"), ("strato.schedule", "cell"),
            ("strato.plan", "cell"), ("strato.claim", "cell")} <= names, names
    assert ("store.job", "cell") in names, names   # the claim's commit, in the writer
    for s in got:
        if s.name == "strato.claim":
            # Under the cell's request, not floating.
            p = by_id[s.parent.span_id]
            while p.name != "POST /strato/v1/schedule":
                p = by_id[p.parent.span_id]
            assert zone(p) == "cell"


def test_tracing_off_costs_nothing_and_on_needs_a_known_exporter() -> None:
    assert not trace.enabled()
    with trace.span("x") as s:
        assert s is None
    headers: dict[str, str] = {}
    trace.inject(headers)
    assert headers == {}
    with pytest.raises(ValueError, match="unknown trace exporter"):
        trace.configure("zipkin")
