"""`strato serve` mistakes end in one clear line and a documented exit code,
never a traceback: a missing PostgreSQL database (and --create-db), the
`postgres://` spelling, an unwritable SQLite directory, a taken port, a
--parent without a scheme."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from strato.process import ServerProcess, free_port
from tests.conftest import _pg_admin

pytestmark = pytest.mark.slow


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strato.cli.main", "serve",
                           "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    out = r.stdout + r.stderr
    assert "Traceback" not in out, out
    return out


@pytest.mark.postgres
def test_a_missing_postgresql_database(tmp_path: Path) -> None:
    name = f"strato_missing_{uuid.uuid4().hex[:8]}"
    for url in (f"postgresql+psycopg://postgres@127.0.0.1/{name}",
                f"postgres://postgres@127.0.0.1/{name}"):
        r = serve("--db", url)
        assert r.returncode == 1
        assert f"database '{name}' does not exist" in one_line(r)
        assert "--create-db" in r.stdout + r.stderr
    # --create-db makes it, and the server starts on it.
    s = ServerProcess(f"postgres://postgres@127.0.0.1/{name}", extra=["--create-db"],
                      log_path=tmp_path / "server.log")
    try:
        s.start()
    finally:
        s.stop()
        admin = _pg_admin()
        with admin.connect() as c:
            found = c.exec_driver_sql(
                f"SELECT 1 FROM pg_database WHERE datname = '{name}'").first()
            c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
    assert found is not None


def test_an_unwritable_directory(tmp_path: Path) -> None:
    r = serve("--db", "sqlite:////proc/strato-nowhere/x.db")
    assert r.returncode == 1 and "not writable" in one_line(r)
    r = serve("--data-dir", "/proc/strato-nowhere")
    assert r.returncode == 1 and "cannot create the data directory" in one_line(r)


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    # (a typo'd --db naming some other file: a DatabaseError traceback)
    other = tmp_path / "notes.txt"
    other.write_text("not a database\n" * 100)
    other.chmod(0o644)
    for args in (["serve", "--port", str(free_port())], ["db", "upgrade"]):
        r = subprocess.run([sys.executable, "-m", "strato", *args, "--db",
                            f"sqlite:///{other}"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "cannot use the database" in one_line(r) and "file is not a database" in r.stderr
        assert "serving on" not in r.stdout + r.stderr
        # Not a zone's database: its mode is not the zone's to tighten.
        assert other.stat().st_mode & 0o777 == 0o644
        # Nor anything left beside it (serve left notes.txt.lock).
        assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"], args


def test_a_taken_port_and_a_bad_parent(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "strato.cli.main", "serve", "--db",
                            f"sqlite:///{tmp_path / 'x.db'}", "--port", str(port)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "cannot listen" in one_line(r)
        assert "serving on" not in r.stdout + r.stderr
    r = serve("--db", f"sqlite:///{tmp_path / 'y.db'}", "--parent", "127.0.0.1:8780")
    assert r.returncode == 2 and "invalid --parent" in one_line(r)


def test_two_servers_on_one_sqlite_file(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'z.db'}"
    with ServerProcess(db, log_path=tmp_path / "first.log") as first:
        r = serve("--db", db)
        assert r.returncode == 1, r.stdout + r.stderr
        out = one_line(r)
        assert "already served" in out and f"pid {first.proc.pid}" in out  # type: ignore[union-attr]
    # Gone with its process (as after kill -9): the file can be served again.
    with ServerProcess(db, log_path=tmp_path / "second.log") as again:
        assert again.proc is not None and again.proc.poll() is None


def test_serving_is_said_once_the_port_listens(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "strato.cli.main", "serve", "--port",
                             str(port), "--db", f"sqlite:///{tmp_path / 'z.db'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "serving on" in line:
                break
        else:
            raise AssertionError("never said serving")
        # Said, so listening: a connection is accepted at once (no retry).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.wait(30)


def test_port_0_says_the_port_it_picked(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "strato.cli.main", "serve", "--port", "0",
                             "--db", f"sqlite:///{tmp_path / 'z.db'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        line = next(ln for ln in proc.stdout if "serving on" in ln)
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.terminate()
        proc.wait(30)
    # A parent could not call back a zone whose port it is not told.
    r = subprocess.run([sys.executable, "-m", "strato.cli.main", "serve", "--port", "0",
                        "--db", f"sqlite:///{tmp_path / 'y.db'}", "--parent",
                        "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--advertise-url" in one_line(r)


def test_bad_security_options_end_in_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'z.db'}"
    for args, words in (
            (["--audit-log", "/nonexistent/dir/audit.jsonl"], "invalid --audit-log"),
            (["--tls-cert", str(tmp_path / "none.crt")], "--tls-cert and --tls-key go together"),
            (["--tls-cert", str(tmp_path / "a"), "--tls-key", str(tmp_path / "b")],
             "is not a readable file"),
            (["--tls-ca", str(tmp_path / "ca")], "--tls-ca needs --tls-cert"),
            (["--keystone-url", "http://127.0.0.1:9/v3"], "invalid Keystone options"),
            (["--keystone-url", "http://127.0.0.1:9/v3", "--keystone-user", "placement"],
             "--keystone-password (STRATO_KEYSTONE_PASSWORD) is missing"),
            (["--policy-file", str(tmp_path / "none.yaml")], "invalid --policy-file"),
            (["--trace", "zipkin"], "invalid --trace")):
        r = serve("--db", db, *args)
        out = one_line(r)
        assert r.returncode == 2 and words in out, (args, out)
    r = subprocess.run([sys.executable, "-m", "strato.cli.main", "serve", "--db", db],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": "/nonexistent/m"})
    assert r.returncode == 2 and "invalid PROMETHEUS_MULTIPROC_DIR" in one_line(r)


@pytest.mark.parametrize(("args", "said"), [
    # An unset variable in "--auth-token $TOKEN": not development mode on 0.0.0.0.
    (["--auth-token", "", "--host", "0.0.0.0"], "invalid --auth-token"),
    (["--port", "99999"], "invalid --port 99999"),
    (["--port", "-1"], "invalid --port -1"),
    (["--host", "nosuchhost.invalid", "--auth-token", "t"], "give --host an address"),
    # What the parent would refuse at registration, in the log, after start-up.
    (["--zone", "dfw+x", "--parent", "http://127.0.0.1:9"], "invalid --zone 'dfw+x'"),
    # Alone too: it could not be added as a child later, nor its part ids read.
    (["--zone", "x@y"], "invalid --zone 'x@y': 1-63 letters"),
    (["--zone", "-dfw"], "invalid --zone '-dfw'"),
    (["--zone", "a" * 64], "invalid --zone"),
    (["--advertise-url", "notaurl", "--parent", "http://127.0.0.1:9"],
     "invalid --advertise-url"),
    (["--summary-interval", "0"], "--summary-interval"),
    (["--child-timeout", "-1"], "--child-timeout"),
    (["--stale-after", "-1"], "--stale-after"),
    (["--workers", "0"], "--workers"),
    (["--min-body-rate", "0"], "min body rate"),
    # 0 answered every GET /allocation_candidates with none; -5 meant no cap.
    (["--max-candidates", "0"], "max candidates must be -1 (no cap) or at least 1, not 0"),
    (["--max-candidates", "-5"], "max candidates must be -1 (no cap) or at least 1, not -5"),
    # A typo weighed nothing, silently (a request naming it is a 400).
    (["--class-weights", "VCPU=2,VCPUS=3"],
     "invalid --class-weights: unknown resource class(es): VCPUS"),
    (["--class-weights", "vcpu:-1"], "invalid --class-weights: a weight is 0 to 1000000: "
     "VCPU=-1"),
    (["--class-weights", "VCPU=1e300"], "invalid --class-weights: a weight is 0 to"),
    (["--class-weights", "VCPU"], "invalid --class-weights: 'VCPU': expected CLASS=N")])
def test_an_option_out_of_range_is_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                                       said: str) -> None:
    r = serve("--db", f"sqlite:///{tmp_path / 'x.db'}", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert said in one_line(r), r.stdout + r.stderr
    assert "serving on" not in r.stdout + r.stderr


def test_class_weights_from_the_environment_are_checked_and_custom_ones_kept(
        tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "strato.cli.main", "serve", "--port",
                        str(free_port()), "--db", f"sqlite:///{tmp_path / 'x.db'}"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "200",
                            "STRATO_CLASS_WEIGHTS": "MEMORY_MB=1,MEMORYMB=2"})
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        "invalid --class-weights: unknown resource class(es): MEMORYMB (a standard class "
        "such as VCPU, MEMORY_MB, DISK_GB, or CUSTOM_...)"]
    # A custom class may be made after start-up (by an agent, say): kept.
    with ServerProcess(f"sqlite:///{tmp_path / 'y.db'}", log_path=tmp_path / "s.log",
                       extra=["--class-weights", "CUSTOM_FPGA=3,VCPU=0"]) as s:
        assert s.proc is not None and s.proc.poll() is None



def test_a_rejoin_shorter_than_a_parents_refresh_is_said() -> None:
    from strato.cli.main import _rejoin_warning
    said = _rejoin_warning(3)
    assert said is not None and "--rejoin-after 3" in said and "register again" in said
    assert _rejoin_warning(15) is None and _rejoin_warning(60) is None


def _serve_with_sigint(db: str) -> subprocess.Popen[str]:
    import signal
    # As from a terminal: SIGINT not ignored (a background job's would be).
    return subprocess.Popen([sys.executable, "-m", "strato", "serve", "--port",
                             str(free_port()), "--db", db],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_while_starting_is_one_line_and_exit_130(tmp_path: Path) -> None:
    import signal
    import sqlite3
    import time

    # While the modules load: a traceback of whatever was being imported.
    proc = _serve_with_sigint(f"sqlite:///{tmp_path / 'a.db'}")
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "interrupted" in out and len(out.splitlines()) <= 2, out
    # While the schema is migrated (the database held by another, so the
    # start waits there): Typer's own handling said nothing.
    held = sqlite3.connect(tmp_path / "b.db", isolation_level=None)
    held.execute("CREATE TABLE t (a)")
    held.execute("BEGIN EXCLUSIVE")
    proc = _serve_with_sigint(f"sqlite:///{tmp_path / 'b.db'}")
    assert proc.stdout is not None
    try:
        assert "development mode" in proc.stdout.readline()  # said just before
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        # At once, the database still held: SQLite's wait for it (60 s) kept
        # Ctrl-C from Python until it ended.
        rest = proc.communicate(timeout=10)[0]
    finally:
        held.rollback()
        held.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 130, rest
    assert rest.splitlines() == ["interrupted: strato serve stopped before it was serving"]


def test_a_long_reason_is_one_line_in_a_narrow_terminal(tmp_path: Path) -> None:
    """"one line" whatever the width: a long path was cut at 80 columns."""
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "missing" / "zone.db"
    r = subprocess.run([sys.executable, "-m", "strato", "serve", "--port", str(free_port()),
                        "--db", f"sqlite:///{deep}"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("development mode"), r.stderr
    assert lines[1].startswith("cannot use sqlite:///"), r.stderr
    assert lines[1].endswith("with a writable path"), r.stderr
    r = subprocess.run([sys.executable, "-m", "strato", "db", "upgrade", "--db",
                        f"sqlite:///{deep}"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
