"""benchmarks/slowdisk: a server's fsyncs made slower without touching Strato."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import slowdisk

TIMED = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY)
start = time.perf_counter()
for _ in range(5):
    os.fsync(fd)
    os.fdatasync(fd)
print((time.perf_counter() - start) / 10)
"""


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="no C compiler")
def test_each_fsync_of_the_process_takes_that_much_longer(tmp_path: Path) -> None:
    def each(ms: float) -> float:
        out = subprocess.run([sys.executable, "-c", TIMED, str(tmp_path / "f")],
                             env={**os.environ, **slowdisk.env(ms)}, capture_output=True, text=True,
                             check=True, timeout=60)
        return float(out.stdout)
    assert slowdisk.env(0) == {}
    assert each(30) >= 0.03
    assert each(0) < 0.03
