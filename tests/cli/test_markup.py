"""What a zone says is printed as said, never read as Rich markup: a provider
named `web[/x]`, or a detail such as `url must be http(s)://host[:port][/path]`,
once ended in a MarkupError traceback (after the provider was made) or lost
its brackets."""

from __future__ import annotations

import httpx
import pytest
from rich.console import Console

from strato.cli import hints
from tests.cli.test_release import server  # noqa: F401 (the fixture: a zone with a token)
from tests.cli.test_schedule_cli import invoke
from tests.helpers.server import ServerProcess

ENV = {"STRATO_AUTH_TOKEN": "s3cret"}


def test_an_error_detail_keeps_its_brackets() -> None:
    r = httpx.Response(400, json={"errors": [{"detail": "url must be host[:port][/path]"}]},
                       request=httpx.Request("POST", "http://z/strato/v1/children"))
    console = Console(width=200, record=True)
    console.print(f"[red]{hints.http_error(r)}[/]")
    assert "url must be host[:port][/path]" in console.export_text()


@pytest.mark.slow
def test_names_and_details_with_brackets(server: ServerProcess) -> None:  # noqa: F811
    result = invoke("providers", "add", "web[/x]", "-r", "VCPU=1", "--url", server.url, env=ENV)
    assert result.exit_code == 0, result.output
    assert "added provider web[/x]" in result.output
    result = invoke("providers", "--url", server.url, env=ENV)
    assert result.exit_code == 0 and "web[/x]" in result.output, result.output
    result = invoke("children", "add", "foo", "127.0.0.1:1", "--url", server.url, env=ENV)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "[/path]" in result.output, result.output
    result = invoke("providers", "delete", "web[/x]", "--url", server.url, env=ENV)
    assert result.exit_code == 0 and "deleted provider web[/x]" in result.output
