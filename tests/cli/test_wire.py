"""Every command that talks to a zone says what went wrong in one line, with
the exit code every command uses: 2 for a --url or --timeout it cannot use, 1
for a server that does not answer as a Strato zone (a web page, JSON of
another shape), never a traceback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.stub import Canned, Stub
from tests.cli.test_schedule_cli import invoke

UUID = "00000000-0000-4000-8000-000000000001"
COMMANDS = [["tree"], ["providers"], ["providers", "list"], ["providers", "delete", "h1"],
            ["providers", "add", "h1", "-r", "VCPU=1"], ["schedule", "-r", "VCPU=1"],
            ["explain", "-r", "VCPU=1"], ["release", UUID], ["children", "list"],
            ["children", "add", "dfw", "http://127.0.0.1:1"], ["children", "remove", "dfw"]]


@pytest.mark.parametrize("url, needle", [
    ("http://[::1", "Invalid IPv6 URL"), ("http://127.0.0.1:abc", "Port could not be cast"),
    ("http://127.0.0.1:99999", "out of range"), ("http://127.0.0.1:8780?x=1", "no query"),
    ("http://127.0.0.1:8780/#x", "no query or fragment"),
    ("ftp://127.0.0.1", "not an http:// or https:// URL")])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_that_cannot_be_a_zones_is_bad_input(command: list[str], url: str,
                                                   needle: str) -> None:
    result = invoke(*command, "--url", url)
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", [*COMMANDS, ["providers", "set", "h1", "--tag", "x"]])
@pytest.mark.parametrize("seconds", ["-1", "0"])
def test_a_timeout_is_more_than_0_seconds(command: list[str], seconds: str) -> None:
    result = invoke(*command, "--timeout", seconds, "--url", "http://127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--timeout'" in result.output
    assert "more than 0" in result.output, result.output


@pytest.fixture
def silent() -> Iterator[str]:
    """A zone that takes the connection and never answers (a paused process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("command", [*COMMANDS, ["providers", "set", "h1", "--tag", "x"]])
def test_a_zone_that_does_not_answer_is_one_line_after_timeout(command: list[str],
                                                               silent: str) -> None:
    # Every command that calls a zone waits --timeout seconds (providers and
    # children waited a fixed 30), then says so in one line: exit 3.
    start = time.monotonic()
    result = invoke(*command, "--timeout", "0.3", "--url", silent)
    assert time.monotonic() - start < 10
    assert result.exit_code == 3, result.output
    assert f"{silent} did not answer in time" in result.output, result.output
    assert "--timeout SECONDS" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_providers_takes_its_timeout_before_a_subcommand_too(silent: str) -> None:
    start = time.monotonic()
    result = invoke("providers", "--timeout", "0.3", "delete", "h1", "--url", silent)
    assert result.exit_code == 3 and time.monotonic() - start < 10, result.output


HTML = Canned(200, b"<html><body>It works!</body></html>", {"content-type": "text/html"})


@pytest.mark.parametrize("canned", [HTML, Canned.json({"hello": "world"}), Canned.json([1])],
                         ids=["html", "other-json", "a-list"])
@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] != "release"  # 204s
                                     and c[:2] != ["children", "remove"]])
def test_a_server_that_is_not_a_zone_is_said_so(command: list[str], canned: Canned) -> None:
    with Stub(default=canned) as web:
        result = invoke(*command, "--url", web.url)
    assert result.exit_code == 1, result.output
    assert f"the server at {web.url} did not answer as a Strato zone" in result.output, \
        result.output
    assert "Traceback" not in result.output and "child dfw" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", [["providers", "delete", "h1"], ["children", "list"],
                                     ["schedule", "-r", "VCPU=1"], ["release", UUID],
                                     ["tree"]])
def test_an_error_without_a_body_is_said_so(command: list[str]) -> None:
    with Stub(default=Canned(404)) as web:
        result = invoke(*command, "--url", web.url)
    assert result.exit_code == 1, result.output
    # (release says a 404 its own way: the consumer holds nothing there)
    assert "HTTP 404 (no error body)" in result.output or "holds nothing" in result.output, \
        result.output
    assert "HTTP 404 :" not in result.output and "HTTP 404: \n" not in result.output


def test_a_refusal_of_release_is_exit_1_as_for_every_command() -> None:
    with Stub(default=Canned.json({"errors": [{"detail": "no"}]}, status=403)) as web:
        result = invoke("release", UUID, "--url", web.url)
    assert result.exit_code == 1, result.output
    assert f"{UUID}: HTTP 403: no" in result.output and "--token" in result.output


def test_serving_on_an_ipv6_address_says_it_in_brackets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from strato.cli import main

    said: list[str] = []
    monkeypatch.setattr(main, "_check_port", lambda host, port: None)
    monkeypatch.setattr(main, "_listen_and_serve",
                        lambda config, serving: said.append(serving(8790)))
    result = invoke("serve", "--host", "::1", "--port", "8790", "--db",
                    f"sqlite:///{tmp_path / 'z.db'}")
    assert result.exit_code == 0, result.output
    assert said and said[0].startswith("strato serving on http://[::1]:8790 "), said
