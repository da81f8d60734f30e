"""--help at 80 columns: every option named in full, no line wider than the
terminal (Typer's rich panels cut long names: "--summary-interv…")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from strato.cli.main import app


def _help(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "strato.cli.main", *args, "--help"],
                         capture_output=True, text=True, timeout=60, check=True,
                         env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"})
    return out.stdout


@pytest.mark.parametrize("command", ["serve", "schedule", "agent", "tree", "sim"])
def test_every_option_is_named_in_full_at_80_columns(command: str) -> None:
    text = _help(command)
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    for param in cmd.params:
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            assert name in text.split() or f"{name}," in text.split(), (command, name)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("group", [(), ("providers",), ("children",), ("config",), ("db",)])
def test_command_lists_are_not_cut_at_80_columns(group: tuple[str, ...]) -> None:
    # Click cuts a long first sentence with "...": each command says what it
    # does in full in `strato --help`.
    listed = _help(*group).split("Commands:", 1)[1]
    assert "..." not in listed, listed


@pytest.mark.parametrize("command", [("serve",), ("schedule",), ("agent",), ("providers", "add"),
                                     ("providers", "set"), ("children", "add")])
def test_repeatable_options_say_what_they_take(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "list[str]" not in text, text


def test_python_m_strato_is_the_strato_command() -> None:
    out = subprocess.run([sys.executable, "-m", "strato", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("strato "), out.stderr
    assert "No module named" not in out.stderr
