"""A real server process against hostile clients (issue 15): header floods,
slow-loris, bodies that never come, too many connections, and one request
whose candidates explode, while other clients are still answered."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import api
from tests.helpers.server import ServerProcess

HEAD = b"x-auth-token: admin\r\nopenstack-api-version: placement 1.39\r\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    db = f"sqlite:///{tmp_path / 'z.db'}"
    with ServerProcess(db, log_path=tmp_path / "server.log",
                       extra=["--header-timeout", "1", "--body-timeout", "1",
                              "--min-body-rate", "8", "--max-connections", "64"]) as s:
        yield s


def rss_mb(s: ServerProcess) -> float:
    assert s.proc is not None
    for line in Path(f"/proc/{s.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect(s: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    return sock


def answer(sock: socket.socket) -> bytes:
    """What the server sent before it closed (or 10 s passed)."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0


def placement_error(raw: bytes) -> dict[str, object]:
    """The one error of a raw answer in Placement's format, its request id
    the same in the body and in the header, as on the app's errors."""
    head, _, body = raw.partition(b"\r\n\r\n")
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert headers[b"content-type"] == b"application/json", raw[:300]
    error = json.loads(body)["errors"][0]
    assert str(error["request_id"]).startswith("req-"), error
    assert headers[b"x-openstack-request-id"].decode() == error["request_id"]
    return dict(error)


def quick_root(s: ServerProcess) -> float:
    t = time.monotonic()
    r = httpx.get(s.url + "/", headers=api.HEADERS, timeout=10)
    assert r.status_code == 200
    return time.monotonic() - t


def test_a_header_flood_is_431_and_memory_stays_flat(server: ServerProcess) -> None:
    before = rss_mb(server)

    def flood() -> bytes:
        sock = connect(server)
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")
            line = b"x-big: " + b"a" * 65536 + b"\r\n"
            for _ in range(64 * 16):  # 64 MiB each, unless cut off first
                sock.sendall(line)
        except OSError:
            pass
        return answer(sock)

    got: list[bytes] = []
    threads = [threading.Thread(target=lambda: got.append(flood())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [status(g) for g in got] == [431] * 4, got
    assert placement_error(got[0])["status"] == 431
    assert rss_mb(server) - before < 30
    assert quick_root(server) < 1


def test_a_request_line_past_the_head_limit_is_414(server: ServerProcess) -> None:
    # The URL alone is too long (a query of 100 KiB): 414 URI Too Long, as a
    # web server in front of Placement answers, not 431 about header fields.
    sock = connect(server)
    query = "&".join(f"resources{i}=VCPU:1" for i in range(5000)).encode()
    sock.sendall(b"GET /allocation_candidates?" + query + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    raw = answer(sock)
    assert status(raw) == 414, raw[:200]
    assert placement_error(raw)["status"] == 414
    assert quick_root(server) < 1


def test_too_many_header_lines_are_431(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n"
                 + b"".join(b"x-%d: y\r\n" % i for i in range(200)) + b"\r\n")
    raw = answer(sock)
    assert status(raw) == 431
    assert placement_error(raw)["status"] == 431


def test_a_request_the_parser_cannot_read_is_placements_400(server: ServerProcess) -> None:
    """uvicorn answered it in plain text, without a request id."""
    sock = connect(server)
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n")
    raw = answer(sock)
    assert status(raw) == 400
    assert placement_error(raw)["detail"] == "Invalid HTTP request received."


def test_slow_loris_connections_are_closed_and_others_served(server: ServerProcess) -> None:
    socks = []
    for _ in range(40):
        sock = connect(server)
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")  # and never the rest
        socks.append(sock)
    idle = connect(server)  # sends nothing at all
    assert quick_root(server) < 1
    t = time.monotonic()
    got = [answer(s) for s in socks]
    assert time.monotonic() - t < 5
    assert {status(g) for g in got} == {408}
    assert placement_error(got[0])["status"] == 408
    assert answer(idle) == b""  # closed, nothing to answer
    assert quick_root(server) < 1


def test_a_body_that_never_comes_is_cut_off(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(b"POST /resource_providers HTTP/1.1\r\nhost: x\r\n" + HEAD
                 + b"content-type: application/json\r\ncontent-length: 10\r\n\r\n")
    t = time.monotonic()
    raw = answer(sock)
    assert time.monotonic() - t < 5
    assert status(raw) == 408
    with api.client(server.url) as c:
        assert c.get("/resource_providers").json()["resource_providers"] == []


def test_a_slow_body_that_keeps_coming_is_served(server: ServerProcess) -> None:
    body = b'{"name": "slow"}'
    sock = connect(server)
    sock.sendall(b"POST /resource_providers HTTP/1.1\r\nhost: x\r\n" + HEAD
                 + b"content-type: application/json\r\nconnection: close\r\n"
                 + b"content-length: %d\r\n\r\n" % len(body))
    for i in range(0, len(body), 6):
        time.sleep(0.6)  # each pause under the 1 s body timeout, 1.8 s in all
        sock.sendall(body[i:i + 6])
    assert status(answer(sock)) == 200


def test_a_body_trickling_under_the_minimum_rate_is_cut_off(server: ServerProcess) -> None:
    """A byte now and then never pauses for --body-timeout, but a body must
    average --min-body-rate: it has the timeout plus a second per that many
    bytes (1 + n/8 s here), and a connection is not held for ever."""
    body = b'{"name": "' + b"x" * 200 + b'"}'
    sock = connect(server)
    sock.sendall(b"POST /resource_providers HTTP/1.1\r\nhost: x\r\n" + HEAD
                 + b"content-type: application/json\r\n"
                 + b"content-length: %d\r\n\r\n" % len(body))
    t = time.monotonic()
    sent = 0
    with contextlib.suppress(OSError):
        while sent < len(body) and time.monotonic() - t < 8:
            time.sleep(0.25)  # 4 bytes a second, each pause well under 1 s
            sock.sendall(body[sent:sent + 1])
            sent += 1
    raw = answer(sock)
    assert time.monotonic() - t < 5, "held past the body's time"
    assert status(raw) == 408, raw[:300]
    assert "too slowly" in str(placement_error(raw)["detail"])
    with api.client(server.url) as c:
        assert c.get("/resource_providers").json()["resource_providers"] == []


def test_past_the_connection_limit_requests_get_503(server: ServerProcess) -> None:
    held = [connect(server) for _ in range(70)]
    try:
        sock = held[-1]
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n" + HEAD + b"\r\n")
        raw = answer(sock)
        assert status(raw) == 503
        # uvicorn's own answer was plain text, without a request id.
        assert placement_error(raw)["status"] == 503
        assert b"retry-after: 1" in raw
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert quick_root(server) < 1


def test_an_exploding_request_is_bounded_and_the_server_keeps_answering(
        server: ServerProcess) -> None:
    """4 granular groups over a host with 40 children: 2.56 million ways to
    place one instance. It used to take minutes and gigabytes, on the event
    loop; now it is answered within the combination budget, and `GET /`
    meanwhile within two seconds (under one on an idle machine)."""
    with api.client(server.url) as c:
        root = api.make_provider(c, "host", {"MEMORY_MB": {"total": 65536}})
        for i in range(40):
            api.make_provider(c, f"numa{i}", {"VCPU": {"total": 64}}, parent=root)
    before = rss_mb(server)
    q = "&".join(f"resources{g}=VCPU:1" for g in range(1, 5))
    body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
            "groups": [{"suffix": str(g), "resources": {"VCPU": 1}} for g in range(1, 5)],
            "group_policy": "none"}
    answers: dict[str, httpx.Response] = {}
    took: dict[str, float] = {}

    def run(name: str, call: object) -> None:
        t = time.monotonic()
        with api.client(server.url, timeout=60) as c:
            answers[name] = call(c)  # type: ignore[operator]
        took[name] = time.monotonic() - t

    work = [threading.Thread(target=run, args=("candidates", lambda c: c.get(
                f"/allocation_candidates?{q}&group_policy=none"))),
            threading.Thread(target=run, args=("schedule", lambda c: c.post(
                "/strato/v1/schedule", json=body))),
            threading.Thread(target=run, args=("explain", lambda c: c.post(
                "/strato/v1/explain", json={**body, "consumers": [
                    str(uuid.uuid4()) for _ in range(50)]})))]
    for t in work:
        t.start()
    slowest_root = 0.0
    while any(t.is_alive() for t in work):
        slowest_root = max(slowest_root, quick_root(server))
        time.sleep(0.05)
    assert answers["candidates"].status_code == 200
    assert answers["candidates"].json()["allocation_requests"]
    assert answers["schedule"].status_code == 200, answers["schedule"].text
    assert answers["explain"].status_code == 200, answers["explain"].text
    assert max(took.values()) < 30, took
    # Idle, the slowest `GET /` meanwhile takes 0.16-0.80 s (before this
    # session's code and after); two clean-clone runs under load saw 1.08 and
    # 1.11 s. The point is that it answers at all (it used to wait minutes).
    assert slowest_root < 2, slowest_root
    assert rss_mb(server) - before < 400


def test_the_database_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """It holds the children's credentials (and was 0644)."""
    path = tmp_path / "old.db"
    path.touch(mode=0o644)
    path.chmod(0o644)  # as a file made by an earlier version
    with ServerProcess(f"sqlite:///{path}", log_path=tmp_path / "server.log") as s, \
            api.client(s.url) as c:
        api.make_provider(c, "h", {"VCPU": {"total": 4}})
        for p in tmp_path.glob("old.db*"):
            assert p.stat().st_mode & 0o077 == 0, (p, oct(p.stat().st_mode))


def test_db_upgrade_makes_the_database_readable_by_its_owner_only(tmp_path: Path) -> None:
    """As `serve` would: it was 0644 until the first `serve`."""
    path = tmp_path / "new.db"
    r = subprocess.run([sys.executable, "-m", "strato.cli.main", "db", "upgrade", "--db",
                        f"sqlite:///{path}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p in tmp_path.glob("new.db*"):
        assert p.stat().st_mode & 0o077 == 0, (p, oct(p.stat().st_mode))


@pytest.mark.parametrize("route", ["traits", "inventories", "aggregates", "provider"])
def test_a_write_waiting_for_the_database_lock_does_not_stop_the_server(
        tmp_path: Path, server: ServerProcess, route: str) -> None:
    """Another process holds SQLite's write lock (a backup, `strato db
    upgrade`, a sqlite3 shell; on PostgreSQL another worker's transaction on
    the same provider rows). A provider write waits for it: in a worker
    thread, not on the event loop, so every other request is still answered."""
    with api.client(server.url) as c:
        rp = api.make_provider(c, "h", {"VCPU": {"total": 8}})
        gen = c.get(f"/resource_providers/{rp}").json()["generation"]
    calls = {
        "traits": ("PUT", f"/resource_providers/{rp}/traits",
                   {"resource_provider_generation": gen, "traits": ["HW_CPU_X86_AVX"]}),
        "inventories": ("PUT", f"/resource_providers/{rp}/inventories",
                        {"resource_provider_generation": gen,
                         "inventories": {"VCPU": {"total": 16}}}),
        "aggregates": ("PUT", f"/resource_providers/{rp}/aggregates",
                       {"resource_provider_generation": gen,
                        "aggregates": [str(uuid.uuid4())]}),
        "provider": ("POST", "/resource_providers", {"name": "another"}),
    }
    method, path, body = calls[route]
    holder = sqlite3.connect(tmp_path / "z.db", timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    answers: list[httpx.Response] = []

    def write() -> None:
        with api.client(server.url, timeout=60) as c:
            answers.append(c.request(method, path, json=body))

    writer = threading.Thread(target=write)
    try:
        writer.start()
        time.sleep(0.3)  # the write is waiting for the lock now
        slowest_root = max(quick_root(server) for _ in range(5))
    finally:
        holder.rollback()
        holder.close()
    writer.join(60)
    assert answers and answers[0].status_code in (200, 201), answers
    assert slowest_root < 0.5, slowest_root


@pytest.mark.parametrize("route", ["allocations", "reshaper"])
def test_a_write_of_10000_consumers_does_not_stop_the_server(
        server: ServerProcess, route: str) -> None:
    """The most consumers one write may name: parsing, validating and writing
    them took 1.5 s, on the event loop (the allocations' in-place write), and
    `GET /` waited that long."""
    with api.client(server.url) as c:
        rp = api.make_provider(c, "h", {"VCPU": {"total": 100_000}})
        gen = c.get(f"/resource_providers/{rp}").json()["generation"]
    consumers = {str(uuid.uuid4()): {"allocations": {rp: {"resources": {"VCPU": 1}}},
                                     "project_id": "p", "user_id": "u",
                                     "consumer_generation": None, "consumer_type": "INSTANCE"}
                 for _ in range(10_000)}
    path, body = ("/allocations", consumers) if route == "allocations" else (
        "/reshaper", {"allocations": consumers, "inventories": {rp: {
            "resource_provider_generation": gen, "inventories": {"VCPU": {"total": 100_000}}}}})
    answers: list[httpx.Response] = []
    took: list[float] = []

    def write() -> None:
        with api.client(server.url, timeout=60) as c:
            t = time.monotonic()
            answers.append(c.post(path, json=body))
            took.append(time.monotonic() - t)

    writer = threading.Thread(target=write)
    writer.start()
    slowest_root = 0.0
    while writer.is_alive():
        slowest_root = max(slowest_root, quick_root(server))
        time.sleep(0.01)
    assert answers and answers[0].status_code == 204, answers[0].text
    with api.client(server.url) as c:
        assert api.usages(c, rp) == {"VCPU": 10_000}
    # Idle, 0.05-0.15 s (the parse of the body, which holds the GIL) of a
    # write of 1.5 s; before, the whole write. Against the write's own time,
    # as a slow hour of the machine (twice as slow, in a CI run) slows both.
    assert slowest_root < max(0.5, took[0] / 3), (slowest_root, took[0])


def test_an_upgrade_to_websocket_is_served_as_plain_http(server: ServerProcess) -> None:
    """Strato serves no WebSocket: an Upgrade header is ignored (as Placement
    does), not an empty 403 outside the error format."""
    r = httpx.get(server.url + "/resource_providers", timeout=10, headers={
        **api.HEADERS, "connection": "Upgrade", "upgrade": "websocket",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13"})
    assert r.status_code == 200, r.text
    assert r.json() == {"resource_providers": []}
