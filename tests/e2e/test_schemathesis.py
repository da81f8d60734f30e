"""A bounded schemathesis run over `/openapi.json` (issue 15): generated and
mutated requests to every operation, at microversion 1.0 and at the latest,
against a real zone and against the root of a real two-zone tree (where most
Placement routes are answered through the children). Checked: no 5xx, and
every status code, content type and body as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strato.process import ServerProcess
from tests.e2e.test_zone_tree import wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def run(url: str, version: str, tmp: Path) -> None:
    r = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{url}/openapi.json", "--checks", CHECKS,
         "--max-examples", "15", "--seed", "20261124", "--workers", "1",
         "-H", "x-auth-token: admin", "-H", f"openstack-api-version: placement {version}",
         "--request-timeout", "30"],
        capture_output=True, text=True, timeout=900, cwd=tmp)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "generated" in r.stdout and " passed" in r.stdout, r.stdout[-2000:]


def test_one_zone(tmp_path: Path) -> None:
    with ServerProcess(f"sqlite:///{tmp_path / 'z.db'}", log_path=tmp_path / "z.log") as z:
        with api.client(z.url) as c:
            api.make_provider(c, "h0", {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}})
        for version in ("1.0", "latest"):
            run(z.url, version, tmp_path)
    assert "Traceback" not in (tmp_path / "z.log").read_text()


def test_the_root_of_a_tree(tmp_path: Path) -> None:
    root = zone(tmp_path, "root").start()
    cell = None
    try:
        cell = zone(tmp_path, "cell", root, ["--location-prefix", "dfw"]).start()
        with api.client(cell.url) as c:
            api.make_provider(c, "cell-h0", {"VCPU": {"total": 8}})
        with api.client(root.url) as c:
            wait_for(lambda: c.get("/resource_providers").json()["resource_providers"] != [])
        run(root.url, "latest", tmp_path)
    finally:
        for p in (cell, root):
            if p is not None:
                p.stop()
    for log in tmp_path.glob("*.log"):
        assert "Traceback" not in log.read_text(), log
