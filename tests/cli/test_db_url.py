"""A `--db` that names no database Strato can use ends in one line and exit 2,
before anything starts, for `serve` and `db upgrade` alike: a bare path, a
`sqlite:` with too few slashes, another database, a driver that is not
installed, an in-memory SQLite file. A relative `--data-dir` is said as the
absolute path of the file. A `--zone` name a parent would refuse is refused
at start (exit 2), not in the log after it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from strato.cli import main as cli

ENV = {"COLUMNS": "250", "NO_COLOR": "1"}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env=ENV)


@pytest.mark.parametrize(("url", "needle"), [
    ("/var/lib/strato/zone.db", "--db sqlite:////var/lib/strato/zone.db"),
    ("sqlite:/tmp/zone.db", "not a database URL"),
    ("mysql://strato@db/strato", "not mysql"),
    ("postgresql+asyncpg://strato@db/strato", "postgresql+psycopg://"),
    ("sqlite:///:memory:", "a zone's SQLite database is a file"),
    ("sqlite://", "a zone's SQLite database is a file"),
])
@pytest.mark.parametrize("command", [["serve", "--port", "1"], ["db", "upgrade"]])
def test_a_bad_db_url_is_one_line_and_exit_2(command: list[str], url: str,
                                             needle: str) -> None:
    result = invoke(*command, "--db", url)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "invalid --db" in result.output and needle in result.output, result.output
    assert "development mode" not in result.output  # said before anything else


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["db", "upgrade"]])
def test_a_database_that_cannot_be_used_is_one_line_and_exit_1(command: list[str],
                                                                tmp_path: Path) -> None:
    """`db upgrade` says it as `serve` does: a directory that is not there, a
    PostgreSQL server that does not answer."""
    from strato.process import free_port

    for url, needle in ((f"sqlite:///{tmp_path}/no/such/dir/z.db", "does not exist"),
                        (f"postgresql://nobody@127.0.0.1:{free_port()}/x",
                         "cannot use the database")):
        result = invoke(*command, "--db", url)
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert needle in result.output and "Traceback" not in result.output, result.output


def test_a_relative_data_dir_is_said_as_an_absolute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("db", "upgrade", "--data-dir", "zones/dfw")
    assert result.exit_code == 0, result.output
    assert f"sqlite:///{tmp_path}/zones/dfw/strato.db" in result.output, result.output
    assert (tmp_path / "zones" / "dfw" / "strato.db").is_file()


def test_a_data_dir_on_the_command_line_beats_strato_db(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    result = CliRunner().invoke(cli.app, ["db", "upgrade", "--data-dir", str(tmp_path / "d")],
                                env={**ENV, "STRATO_DB": f"sqlite:///{other}"})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d" / "strato.db").is_file() and not other.exists()
    # Without --data-dir, STRATO_DB is the database.
    result = CliRunner().invoke(cli.app, ["db", "upgrade"],
                                env={**ENV, "STRATO_DB": f"sqlite:///{other}"})
    assert result.exit_code == 0 and other.is_file(), result.output


@pytest.mark.parametrize("name", ["bad name", "dfw/r1", ""])
def test_a_zone_name_its_parent_would_refuse_is_refused_at_start(name: str,
                                                                 tmp_path: Path) -> None:
    result = invoke("serve", "--port", "1", "--data-dir", str(tmp_path), "--zone", name)
    assert result.exit_code == 2, result.output
    assert f"invalid --zone {name!r}" in result.output, result.output


@pytest.mark.parametrize(("option", "value"), [("--log-level", "verbose"),
                                               ("--log-format", "yaml")])
def test_a_bad_log_option_is_one_line(option: str, value: str, tmp_path: Path) -> None:
    result = invoke("serve", "--port", "1", "--data-dir", str(tmp_path), option, value)
    assert result.exit_code == 2, result.output
    assert f"invalid {option}: {value}" in result.output, result.output
    assert "Traceback" not in result.output
