"""`strato children list/add/remove` against real zone processes (issue 16)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_zone_tree import wait_for
from tests.helpers.server import ServerProcess


def strato(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strato.cli.main", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def test_children_by_hand(tmp_path: Path) -> None:
    with ServerProcess(f"sqlite:///{tmp_path / 'root.db'}", extra=["--zone", "root"],
                       log_path=tmp_path / "root.log") as root, \
            ServerProcess(f"sqlite:///{tmp_path / 'dfw.db'}", extra=["--zone", "dfw"],
                          log_path=tmp_path / "dfw.log") as dfw:
        r = strato("children", "add", "dfw", dfw.url, "--location-prefix", "dfw",
                   "--url", root.url)
        assert r.returncode == 0 and "added child dfw" in r.stdout, r.stdout + r.stderr

        def listed() -> bool:
            out = strato("children", "list", "--url", root.url)
            return out.returncode == 0 and "dfw" in out.stdout and "healthy" in out.stdout
        wait_for(listed)
        r = strato("children", "add", "ord", "http://127.0.0.1:1", "--url", root.url)
        assert r.returncode == 0 and "added child ord" in r.stdout, r.stdout + r.stderr
        assert "warning" in r.stderr and "did not answer" in r.stderr, r.stderr
        assert "warning" not in strato("children", "add", "dfw", dfw.url, "--location-prefix",
                                       "dfw", "--url", root.url).stderr
        assert strato("children", "remove", "ord", "--url", root.url).returncode == 0
        r = strato("children", "add", "x y", "http://127.0.0.1:1", "--url", root.url)
        assert r.returncode == 1 and "HTTP 400" in r.stderr, r.stderr
        r = strato("children", "remove", "dfw", "--url", root.url)
        assert r.returncode == 0, r.stderr
        r = strato("children", "list", "--url", root.url, "--json")
        assert '"children": []' in r.stdout, r.stdout
    r = strato("children", "list", "--url", "http://127.0.0.1:1")
    assert r.returncode == 3 and "could not be reached" in r.stderr


def test_a_name_is_one_path_segment() -> None:
    """`remove 'zz#other'` asks to remove zz#other, not zz (the '#' would end the
    path); a '/' or '?' in a name does not reach another route either."""
    from tests.cli.stub import Canned, Stub
    from tests.cli.test_schedule_cli import invoke

    with Stub(default=Canned(204)) as z:
        for name in ("zz#other", "a/b", "q?x=1"):
            r = invoke("children", "remove", name, "--url", z.url)
            assert r.exit_code == 0, r.output
        r = invoke("release", "00000000-0000-4000-8000-000000000001", "--url", z.url)
        assert r.exit_code == 0, r.output
    assert z.paths() == ["/strato/v1/children/zz%23other", "/strato/v1/children/a%2Fb",
                         "/strato/v1/children/q%3Fx%3D1",
                         "/allocations/00000000-0000-4000-8000-000000000001"]
