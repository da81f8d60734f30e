"""`strato demo` end to end, small: seven real zone processes, a workload, a killed
cell, the invariants; and every process it started is gone afterwards, also when
it is interrupted."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from strato.cli.demo import Result, rejections_table

ENV = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
CMD = [sys.executable, "-m", "strato.cli.main", "demo"]


def zone_pids(output: str) -> list[int]:
    return [int(p) for p in re.findall(r"http://127\.0\.0\.1:\d+\s+pid (\d+)", output)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (reaped by its parent later, or by init).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_demo_small_tree_runs_kills_a_cell_and_keeps_the_invariants() -> None:
    done = subprocess.run([*CMD, "--providers", "200", "--requests", "100", "--clients", "4"],
                          env=ENV, capture_output=True, text=True, timeout=240)
    out = re.sub(r"[│┃]", " ", done.stdout)  # table cells as plain columns
    assert done.returncode == 0, out + done.stderr
    pids = zone_pids(out)
    assert len(pids) == 7, out
    assert "bulk-loaded 160 hosts" in out and "registered 40 hosts through the HTTP API" in out
    # Placements reach the cells under their zone paths, the killed one only before.
    assert re.search(r"global/dfw/dfw-c1\s+\d+", out), out
    killed = re.search(r"global/ord/ord-c2\s+(\d+)\s+(\d+)", out)
    assert killed is None or killed.group(2) == "0", out
    assert "SIGKILL ord-c2" in out
    # The killed cell shows unhealthy at its parent; refusals come with their reason.
    # (refused once it is gone; closed or reset by the kernel if a call was
    # under way when it died)
    assert re.search(r"ord-c2\s+no\s+\d+\s+connection (refused|closed|reset)", out,
                     re.IGNORECASE), out
    # Claims the kill left in doubt are cancelled once the cell is back.
    assert re.search(r"restarted ord-c2 .* which cancelled there the \d+ request", out), out
    assert "pruned: no capacity (VCPU largest free" in out, out
    assert "invariants hold across the seven databases" in out, out
    assert "stopped every zone process" in out
    assert not [p for p in pids if alive(p)]


@pytest.mark.slow
def test_demo_interrupted_stops_every_zone_process() -> None:
    # Started with SIGINT ignored, as a background job of a shell without job
    # control starts it (a CI runner's): Ctrl-C must still stop the demo.
    proc = subprocess.Popen([*CMD, "--providers", "80", "--requests", "5000"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 180
    try:
        # Interrupt once the workload runs: every zone is up by then.
        for line in proc.stdout:
            seen.append(line)
            if "concurrent clients at the root" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            # Its zones too, once it failed to: the test stops what it started.
            for pid in zone_pids("".join(seen)):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
    out = "".join(seen) + rest
    pids = zone_pids(out)
    assert len(pids) == 7, out
    assert "stopped every zone process" in out, out
    assert not [p for p in pids if alive(p)], out


@pytest.mark.parametrize("args", [["--clients", "0"], ["--requests", "0"],
                                  ["--providers", "3"], ["--providers", "-1"]])
def test_a_demo_of_nothing_is_refused_before_anything_starts(args: list[str]) -> None:
    # --clients 0 started seven zones and waited 30 s on a pool of no
    # connections; --providers 0 loaded 4 hosts all the same.
    r = subprocess.run([*CMD, *args], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"Invalid value for '{args[0]}'" in r.stderr and "Traceback" not in r.stderr
    assert "started" not in r.stdout


def test_the_rejections_table_shows_each_refusal_status_and_code() -> None:
    results = [
        Result("plain", 200, 1.0, ["a"], zones=["global/dfw/dfw-c1"]),
        Result("gpu", 409, 2.0, ["b"], reason="VCPU: short of 64: 12 providers",
               code="strato.no_valid_placement"),
        Result("gpu", 409, 2.0, ["c"], reason="VCPU: short of 64: 12 providers",
               code="strato.no_valid_placement", after_kill=True),
        Result("hipaa", 503, 3.0, ["d"], reason="zone ord-c2 unreachable",
               code="strato.zone_unavailable"),
        Result("plain", 599, 4.0, ["e"], reason="ConnectError: refused"),
    ]
    out = Console(width=200, record=True, file=io.StringIO())
    out.print(rejections_table(results))
    rows = [[c.strip() for c in ln.split("\u2502")[1:-1]]
            for ln in out.export_text().splitlines() if ln.count("\u2502") > 3]
    assert ["1", "1", "gpu", "409 strato.no_valid_placement",
            "VCPU: short of 64: 12 providers"] in rows
    assert ["1", "0", "hipaa", "503 strato.zone_unavailable", "zone ord-c2 unreachable"] in rows
    assert ["1", "0", "plain", "no answer", "ConnectError: refused"] in rows
