"""A child zone whose clock is wrong (libfaketime on its process): the
deadline a parent sends is in the parent's clock, so the parent sends it in
the child's, as the child's summaries tell its clock. Skipped where
libfaketime is not installed (Debian: apt-get install libfaketime)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from strato.process import ServerProcess
from tests.e2e.test_zone_faults import until_not_503
from tests.e2e.test_zone_tree import TIMING, children, hosts, stop_all, wait_for
from tests.helpers import api

pytestmark = pytest.mark.slow
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def _zone(tmp: Path, name: str, parent: ServerProcess | None = None,
          skew: str | None = None) -> ServerProcess:
    args = ["--zone", name, *TIMING]
    if parent is not None:
        args += ["--parent", parent.url]
    env = None
    if skew is not None:
        # Only the wall clock: the monotonic one (timeouts, backoffs) stays true.
        env = {"LD_PRELOAD": str(FAKETIME), "FAKETIME": skew,
               "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}
    return ServerProcess(f"sqlite:///{tmp / (name + '.db')}", extra=args,
                         log_path=tmp / f"{name}.log", env=env)


def _req() -> dict[str, Any]:
    return {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
            "groups": [{"resources": {"VCPU": 1}}]}


@pytest.mark.skipif(not FAKETIME.exists(), reason="libfaketime is not installed")
@pytest.mark.parametrize("skew", ["+20s", "-20s"])
def test_a_child_with_a_wrong_clock_is_used(tmp_path: Path, skew: str) -> None:
    root = _zone(tmp_path, "root").start()
    procs = {"root": root}
    try:
        procs["cell"] = _zone(tmp_path, "cell", root, skew).start()
        hosts(procs["cell"], "cell", ["x/rack0/h0", "x/rack1/h1"])
        with api.client(root.url) as c:
            wait_for(lambda: children(c).get("cell", {}).get("health", {}).get("healthy") is True,
                     timeout=30.0)
            wait_for(lambda: c.get("/strato/v1/summary").json()["providers"] == 2, timeout=30.0)
            for _ in range(3):
                # A 503 on a loaded machine (a 1 s child timeout) is sent
                # again; before the fix every one was a 503 (the deadline had
                # passed on arrival at the child 20 s ahead).
                r = until_not_503(c, "POST", "/strato/v1/schedule", timeout=15.0, json=_req())
                assert r.status_code == 200, r.text
                assert r.json()["placements"][0]["zone"] == "root/cell"
            offset = children(c)["cell"]["clock_offset_s"]
            assert abs(abs(offset) - 20) < 2 and (offset > 0) == skew.startswith("+")
    finally:
        stop_all(procs)


@pytest.mark.skipif(not FAKETIME.exists(), reason="libfaketime is not installed")
def test_a_child_whose_clock_is_set_right_is_followed(tmp_path: Path) -> None:
    """The child runs 20 s behind, then its clock is set right while it runs
    (libfaketime reads its offset from a file): the parent drops what it
    knew of the old clock at the first summary that disagrees, instead of
    sending deadlines 20 s in the past until the old samples age out."""
    offset_file = tmp_path / "faketime"
    offset_file.write_text("-20s\n")
    root = _zone(tmp_path, "root").start()
    procs = {"root": root}
    try:
        cell = _zone(tmp_path, "cell", root)
        cell.env = {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset_file),
                    "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}
        procs["cell"] = cell.start()
        hosts(cell, "cell", ["x/rack0/h0", "x/rack1/h1"])
        with api.client(root.url) as c:
            wait_for(lambda: (children(c).get("cell", {}).get("clock_offset_s") or 0) < -19,
                     timeout=30.0)
            r = until_not_503(c, "POST", "/strato/v1/schedule", timeout=15.0, json=_req())
            assert r.status_code == 200, r.text
            offset_file.write_text("+0s\n")
            wait_for(lambda: abs(children(c)["cell"]["clock_offset_s"]) < 1, timeout=30.0)
            for _ in range(3):
                r = until_not_503(c, "POST", "/strato/v1/schedule", timeout=15.0,
                                  json=_req())
                assert r.status_code == 200, r.text
                assert r.json()["placements"][0]["zone"] == "root/cell"
    finally:
        stop_all(procs)
