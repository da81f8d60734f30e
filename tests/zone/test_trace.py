"""One trace per request across every zone it touches (issue 16): root → mid
→ cell in process, spans kept by OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strato import trace
from strato.zone.inprocess import ZoneSpec, build
from tests.zone.test_malicious_child import honest_summary
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


class Recorder:
    """A child zone that records the request-id headers it is sent, and
    refuses every request (its summary has room, so it is asked)."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        status, out = 200, {}
        if scope["path"] == "/strato/v1/summary":
            out = honest_summary()
        elif scope["path"] == "/strato/v1/schedule":
            self.seen.append(headers.get("x-openstack-request-id"))
            status, out = 409, {"errors": [{"status": 409, "title": "Conflict",
                                            "code": "strato.no_valid_placement",
                                            "detail": "full"}], "explain": None}
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(out)})


def test_the_global_request_id_goes_to_the_children(tmp_path: Path) -> None:
    """Every zone's log lines of one request name the same global request id:
    the client's, or the first zone's own id when the client sent none."""
    recorder = Recorder()

    async def main() -> tuple[str, str]:
        tree = build(tmp_path, [ZoneSpec("root")])
        try:
            tree.transport.register("inproc://rec", recorder)
            c = tree.client("root")
            r = await c.post("/strato/v1/children", json={"name": "rec", "url": "inproc://rec"})
            assert r.status_code == 201, r.text
            await tree.zone_tree("root").refresh(fresh=True)
            body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                    "groups": [{"resources": {"VCPU": 1}}]}
            mine = f"req-{uuid.uuid4()}"
            r1 = await c.post("/strato/v1/schedule", json=body,
                              headers={"x-openstack-request-id": mine})
            # Another shape: the first refusal is remembered for its own.
            r2 = await c.post("/strato/v1/schedule", json={
                **body, "consumers": [str(uuid.uuid4())],
                "groups": [{"resources": {"MEMORY_MB": 1}}]})
            assert r1.status_code == r2.status_code == 409, (r1.text, r2.text)
            return mine, r2.headers["x-openstack-request-id"]
        finally:
            await tree.aclose()

    mine, roots_own = asyncio.run(main())
    assert recorder.seen[0] == mine
    assert recorder.seen[-1] == roots_own and roots_own.startswith("req-")
