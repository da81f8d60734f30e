"""`strato serve --config FILE` and `strato config show` (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers.server import ServerProcess

STRATO = [sys.executable, "-m", "strato.cli.main"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STRATO_")}
    return subprocess.run([*STRATO, *args], capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})


def settings(out: str) -> dict[str, tuple[str, str]]:
    return {r["option"]: (r["value"], r["source"]) for r in json.loads(out)}


def test_show_says_where_each_setting_comes_from(tmp_path: Path) -> None:
    f = tmp_path / "zone.toml"
    f.write_text('zone = "dfw"\nchild-timeout = 3\ntag = "hipaa"\nauth-token = "s3cret"\n'
                 '[serve]\nlocation_prefix = "dfw"\n')
    r = run("config", "show", "--config", str(f), "--json", env={"STRATO_POLICY": "secure"})
    assert r.returncode == 0, r.stderr
    got = settings(r.stdout)
    assert got["--zone"] == ("dfw", "file")
    assert got["--child-timeout"] == (3.0, "file")
    assert got["--tag"] == (["hipaa"], "file")
    assert got["--location-prefix"] == ("dfw", "file")
    assert got["--policy"] == ("secure", "environment")
    assert got["--port"] == (8780, "default")
    assert got["--auth-token"] == ("****", "file")
    assert "s3cret" not in r.stdout
    # The environment wins over the file.
    r = run("config", "show", "--json", env={"STRATO_CONFIG": str(f), "STRATO_ZONE": "ord"})
    assert settings(r.stdout)["--zone"] == ("ord", "environment")


def test_show_json_has_numbers_booleans_lists_and_null(tmp_path: Path) -> None:
    # As JSON has them, not every value a string ("8780", "True", "-").
    f = tmp_path / "zone.toml"
    f.write_text('max-headers = 20\n'
                 + 'cors-allowed-origin = ["https://a.example", "https://b.example"]\n')
    r = run("config", "show", "--config", str(f), "--json",
            env={"STRATO_STALE_AFTER": "30", "STRATO_ACCESS_LOG": "no",
                 "STRATO_MAX_CANDIDATES": "7"})
    assert r.returncode == 0, r.stderr
    got = settings(r.stdout)
    assert got["--max-headers"] == (20, "file")
    assert got["--cors-allowed-origin"] == (["https://a.example", "https://b.example"], "file")
    assert got["--stale-after"] == (30.0, "environment")
    assert got["--access-log"] == (False, "environment")
    assert got["--max-candidates"] == (7, "environment")
    assert got["--create-db"] == (False, "default")
    assert got["--summary-interval"] == (5.0, "default")
    assert got["--parent"] == (None, "default")
    assert got["--cors-allow-header"] == ([], "default")
    # The table still says them as text.
    r = run("config", "show", "--config", str(f), env={"COLUMNS": "200"})
    assert r.returncode == 0 and "https://a.example, https://b.example" in r.stdout, r.stdout
    # A variable strato serve would refuse is said, as a bad file is (exit 2).
    for args in (["config", "show"], ["config", "show", "--json"]):
        r = run(*args, env={"STRATO_STALE_AFTER": "soon"})
        assert r.returncode == 2 and "STRATO_STALE_AFTER='soon'" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_a_bad_file_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    f = tmp_path / "zone.toml"
    for text, why in [('zone = "a"\nchild_timout = 3\n',
                       "unknown setting 'child_timout' (did you mean 'child-timeout'?"),
                      ('port = "eighty"\n', "port: must be an integer, got 'eighty'"),
                      ('access-log = "yes"\n', "access-log: must be true or false, got 'yes'"),
                      ('zone = "a\n', "not valid TOML"),
                      # Twice: which one won was not said.
                      ('port = 8781\n[serve]\nport = 8782\n',
                       "'[serve] port' is set twice (also as 'port')"),
                      ('child-timeout = 3\nchild_timeout = 4\n',
                       "'child_timeout' is set twice (also as 'child-timeout')"),
                      # Out of the option's range: serve blamed STRATO_STALE_AFTER.
                      ('stale-after = 0\n',
                       "stale-after: Input should be greater than or equal to 1, got 0"),
                      ('[serve]\nworkers = 0\n', "[serve] workers: Input should be greater"),
                      # Not text: a UnicodeDecodeError traceback.
                      (b'zone = "\xff"\n', "not valid TOML: not UTF-8 text")]:
        if isinstance(text, bytes):
            f.write_bytes(text)
        else:
            f.write_text(text)
        for args in (["serve", "--config", str(f)], ["config", "show", "--config", str(f)]):
            r = run(*args)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            assert why in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run("serve", "--config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    # "--config $FILE" with the variable unset: it read the current directory.
    for args in (["serve", "--config", ""], ["serve", "--config="]):
        r = run(*args)
        assert r.returncode == 2 and "--config is empty" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and "serving on" not in r.stdout + r.stderr


def test_serve_takes_its_settings_from_the_file_and_flags_win(tmp_path: Path) -> None:
    f = tmp_path / "zone.toml"
    f.write_text('zone = "dfw"\nlocation-prefix = "dfw"\nmax-headers = 20\n')
    db = f"sqlite:///{tmp_path / 'z.db'}"
    with ServerProcess(db, extra=["--config", str(f)], log_path=tmp_path / "a.log") as s:
        summary = httpx.get(s.url + "/strato/v1/summary",
                            headers={"x-auth-token": "admin"}).json()
        assert summary["zone"] == "dfw"
        assert summary["location_prefix"] == "dfw"
        many = {f"x-h{i}": "v" for i in range(30)}
        assert httpx.get(s.url + "/", headers=many).status_code == 431
    with ServerProcess(db, extra=["--config", str(f), "--zone", "ord"],
                       log_path=tmp_path / "b.log") as s:
        summary = httpx.get(s.url + "/strato/v1/summary",
                            headers={"x-auth-token": "admin"}).json()
        assert summary["zone"] == "ord"


def test_every_setting_is_in_the_operations_table() -> None:
    import typer

    from strato.cli.main import app
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    table = docs.split("## Settings", 1)[1].split("\n## ", 1)[0]
    for p in serve.params:
        if getattr(p, "param_type_name", "") == "option" and p.name != "help":
            assert f"| `{p.opts[0]}" in table, p.opts[0]
