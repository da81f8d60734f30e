"""A `--url` without its scheme (`127.0.0.1:8780`) is said as such, with the
URL to write, by every command that talks to a zone (exit 2: bad input)."""

from __future__ import annotations

import httpx
import pytest

from strato.cli import hints
from tests.cli.test_schedule_cli import invoke


def test_unreachable_names_the_missing_scheme() -> None:
    exc = httpx.UnsupportedProtocol("Request URL is missing an 'http://' or 'https://' "
                                    "protocol.")
    said = hints.unreachable("127.0.0.1:8780", exc)
    assert "not an http:// or https:// URL" in said and "http://127.0.0.1:8780" in said
    refused = hints.unreachable("http://127.0.0.1:1", httpx.ConnectError("refused."))
    assert "refused;" in refused and ".;" not in refused


@pytest.mark.parametrize("command", [
    ["tree"], ["providers"], ["schedule", "-r", "VCPU=1"], ["explain", "-r", "VCPU=1"],
    ["release", "00000000-0000-4000-8000-000000000001"], ["children", "list"]])
def test_every_command_says_the_url_needs_a_scheme(command: list[str]) -> None:
    result = invoke(*command, "--url", "127.0.0.1:1")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "127.0.0.1:1 is not an http:// or https:// URL" in result.output, result.output
    assert "e.g. http://127.0.0.1:1" in result.output


@pytest.mark.parametrize("command", [
    ["tree"], ["providers"], ["schedule", "-r", "VCPU=1"],
    ["release", "00000000-0000-4000-8000-000000000001"], ["children", "list"]])
def test_every_command_takes_the_zone_as_zone_url_too(command: list[str]) -> None:
    """`strato agent --zone-url` and `strato providers --zone-url` name the zone so:
    the other commands take that spelling, and STRATO_ZONE_URL, as well as --url."""
    for args, env in (([*command, "--zone-url", "127.0.0.1:2"], {}),
                      (command, {"STRATO_ZONE_URL": "127.0.0.1:2"})):
        result = invoke(*args, env=env)
        assert result.exit_code == 2, result.output
        assert "127.0.0.1:2 is not an http:// or https:// URL" in result.output, result.output
