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
    # The misspelt key itself is named now, with the one meant.
    assert "[scenario]: unknown setting(s) 'nmae' (did you mean 'name'?)" in \
        " ".join(result.output.split()), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    gone = tmp_path / "gone.toml"
    gone.write_text(Path(SMALL).read_text().replace('\nname = "tiny"', "\n"))
    result = invoke("sim", str(gone), "--no-progress")
    assert result.exit_code == 2, result.output
    assert "a required setting is missing: 'name'" in " ".join(result.output.split())


@pytest.mark.parametrize(("old", "new", "said"), [
    # Each ran on (a negative count of requests, a misspelt weigher: spread)
    # or ended in a traceback half way (a string, 0 hosts per rack).
    ("requests = 200", "requests = -5", "workload.requests must be an integer >= 1, got -5"),
    ("requests = 200", 'requests = "many"', "workload.requests must be an integer >= 1"),
    ('weigher = "pack"', 'weighr = "pack"',
     "[workload]: unknown setting(s) 'weighr' (did you mean 'weigher'?)"),
    ("hosts_per_rack = 4", "hosts_per_rack = 0",
     "cluster.zone.providers[0].hosts_per_rack must be an integer >= 1, got 0"),
    ('levels = ["site", "room", "rack", "host"]', "levels = 5",
     "cluster.levels must be a list of strings, got 5"),
    ('process = "poisson"', 'process = "poisson"\nrte = 3',
     "workload.arrival: unknown setting(s) 'rte' (did you mean 'rate'?)"),
    ("tag_fractions = { hipaa = 0.25 }", "tag_fractions = { hipaa = 2 }",
     "cluster.zone.providers[0].tag_fractions.hipaa must be a number >= 0 and <= 1, got 2"),
    ("DISK_GB = 500 }", "DISK_GB = { total = 500, reserved = -1 } }",
     "cluster.zone.providers[0].inventory.DISK_GB.reserved must be an integer >= 0, got -1"),
    ("exact = true", "exact = 1", "scenario.exact must be true or false, got 1"),
])
def test_a_bad_value_is_one_line_naming_it(tmp_path: Path, old: str, new: str,
                                           said: str) -> None:
    text = Path(SMALL).read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new, 1))
    result = invoke("sim", str(bad), "--no-progress")
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert f"{bad}: {said}" in out and "Traceback" not in out, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_scenario_that_is_not_text_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe[scenario]")
    result = invoke("sim", str(bad), "--no-progress")
    assert result.exit_code == 2 and "not UTF-8 text" in result.output, result.output


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


def test_live_mode_waits_timeout_seconds_for_a_zone_that_does_not_answer() -> None:
    """It waited a fixed 30 s, less than a zone may take to answer a schedule
    request (its --request-timeout, 30 s); now --timeout, 60 s by default."""
    import socket
    import time

    with socket.socket() as silent:  # accepts, reads nothing, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = invoke("sim", SMALL, "--compare", "strato-live", "--url", url,
                        "--timeout", "1.5", "--no-progress")
        took = time.monotonic() - started
    assert result.exit_code == 3, result.output
    out = " ".join(result.output.split())
    assert f"strato-live: {url} did not answer in time" in out, out
    assert "a busy zone may need longer: --timeout SECONDS" in out, out
    assert 1.5 <= took < 15, took
    result = invoke("sim", SMALL, "--compare", "strato-live", "--url", url, "--timeout", "0")
    assert result.exit_code == 2 and "more than 0" in result.output, result.output


@pytest.mark.slow
def test_live_mode_run_twice_on_one_zone_says_no_register(server: ServerProcess  # noqa: F811
                                                          ) -> None:
    """The scenario's hosts have fixed uuids: a second run's registration is
    a 409, which said nothing of --no-register."""
    args = ["sim", SMALL, "--compare", "strato-live", "--url", server.url, "--token", "s3cret",
            "--requests", "0.05", "--time-scale", "100000", "--no-progress"]
    first = invoke(*args)
    assert first.exit_code == 0, first.output
    again = invoke(*args)
    assert again.exit_code == 1, again.output
    out = " ".join(again.output.split())
    assert "HTTP 409" in out and "--no-register uses them" in out, out
    third = invoke(*args[:-1], "--no-register", "--no-progress")
    assert third.exit_code == 0, third.output
