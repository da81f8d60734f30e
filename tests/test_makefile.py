"""`make demo` on a fresh clone: the slow install step says what it is doing first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_install_step_is_announced_before_pip_runs(tmp_path: Path) -> None:
    plan = subprocess.run(["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    lines = plan.splitlines()
    install = next(i for i, ln in enumerate(lines) if "pip install" in ln and "-e" in ln)
    said = [ln for ln in lines[:install] if ln.startswith("echo ")]
    assert said and "about a minute" in said[-1] and ".[dev]" in said[-1], plan
