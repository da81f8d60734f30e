"""`strato sim` mistakes end in one line, never a traceback: a scenario file
that is not there (exit 2), a strato-live --url nobody serves (exit 3), or a
zone that refuses the token (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strato.process import free_port
from tests.cli.test_release import server  # noqa: F401 (the fixture: a zone with a token)
from tests.cli.test_schedule_cli import invoke
from tests.helpers.server import ServerProcess

SMALL = str(Path(__file__).parents[2] / "scenarios" / "small.toml")


def test_a_missing_scenario_is_named() -> None:
    result = invoke("sim", "scenarios/smal.toml")
    assert result.exit_code == 2, result.output
    assert "cannot read the scenario scenarios/smal.toml: No such file or directory" in \
        result.output
    assert "Errno" not in result.output


def test_live_mode_without_a_zone_exits_3() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke("sim", SMALL, "--compare", "strato-live", "--url", url, "--no-progress")
    assert result.exit_code == 3, result.output
    assert f"strato-live: {url} could not be reached" in " ".join(result.output.split()), \
        result.output


def test_live_mode_with_a_url_that_is_not_a_zones_exits_2() -> None:
    """As for every command that takes --url: bad input, not "unreachable"."""
    result = invoke("sim", SMALL, "--compare", "strato-live", "--url", "127.0.0.1:1",
                    "--no-progress")
    assert result.exit_code == 2, result.output
    assert "127.0.0.1:1 is not an http:// or https:// URL" in " ".join(result.output.split())


@pytest.mark.slow
def test_live_mode_with_a_wrong_token_exits_1(server: ServerProcess) -> None:  # noqa: F811
    result = invoke("sim", SMALL, "--compare", "strato-live", "--url", server.url,
                    "--token", "wrong", "--no-progress")
    assert result.exit_code == 1, result.output
    out = " ".join(result.output.split())
    assert "strato-live: POST /resource_providers" in out and "HTTP 401" in out, out


def test_a_scenario_missing_a_setting_is_named(tmp_path: Path) -> None:
    typo = tmp_path / "typo.toml"
    typo.write_text(Path(SMALL).read_text().replace("\nname = ", "\nnmae = "))
    result = invoke("sim", str(typo), "--no-progress")
    assert result.exit_code == 2, result.output
    assert "a required setting is missing: 'name'" in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_out_directory_that_cannot_be_made_is_named() -> None:
    result = invoke("sim", SMALL, "--out", "/proc/strato-nowhere/report", "--no-progress")
    assert result.exit_code == 2, result.output
    assert "cannot write the report to /proc/strato-nowhere/report" in result.output


@pytest.mark.parametrize(("args", "needle"), [
    (["--providers", "0"], "a scale factor is more than 0"),
    (["--requests", "-1"], "a scale factor is more than 0"),
    (["--seeds", "0"], "greater than or equal to 1")])
def test_a_count_or_scale_of_nothing_is_refused(args: list[str], needle: str) -> None:
    """Not a ZeroDivisionError (--providers 0), not one seed run for 0."""
    result = invoke("sim", SMALL, *args, "--no-progress")
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output, result.output
