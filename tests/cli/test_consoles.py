"""Piped output is wide enough for the tables (Rich alone falls back to 80 columns)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strato.cli.consoles import PIPE_WIDTH, console


def test_not_a_terminal_is_pipe_width_unless_columns_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console().width == PIPE_WIDTH >= 120
    assert console(stderr=True).width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100


def test_a_piped_table_is_not_cut() -> None:
    # A 65-character database URL is cut ("...") at 80 columns, whole at PIPE_WIDTH.
    url = "sqlite:////var/lib/strato/zone-databases/dfw-room1-cell/strato.db"
    env = {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "STRATO_DB": url}
    out = subprocess.run([sys.executable, "-m", "strato.cli.main", "config", "show"],
                         capture_output=True, text=True, timeout=60, check=True,
                         env=env).stdout
    assert url in out, out
