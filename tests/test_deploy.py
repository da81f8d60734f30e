"""The packaging in deploy/ (issue 16), checked as far as this machine allows:
no Docker daemon and no registry for base images here, so the image is not
built; what it would run is. The systemd unit passes systemd-analyze verify,
the example TOML is a valid configuration, every compose service's command is
a valid `strato serve` command line, and the files the Dockerfile copies are
enough to build the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml

from strato.cli.main import app

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
STRATO = Path(sys.executable).parent / "strato"


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze on this machine")
    unit = (DEPLOY / "strato.service").read_text()
    assert "ExecStart=/usr/local/bin/strato serve --config /etc/strato/strato.toml" in unit
    local = tmp_path / "strato.service"
    local.write_text(unit.replace("/usr/local/bin/strato", str(STRATO)))
    r = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_example_configuration_is_valid() -> None:
    r = subprocess.run([sys.executable, "-m", "strato.cli.main", "config", "show", "--config",
                        str(DEPLOY / "strato.toml"), "--json"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "STRATO_AUTH_TOKEN": "x"})
    assert r.returncode == 0, r.stderr
    assert '"dfw"' in r.stdout


def test_every_compose_command_is_a_valid_serve_command() -> None:
    spec = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = spec["services"]
    assert set(services) == {"root", "dfw", "ord"}
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    for name, svc in services.items():
        cmd = svc["command"]
        assert cmd[0] == "serve"
        ctx = serve.make_context("serve", list(cmd[1:]))
        assert ctx.params["zone"] == name
        assert ctx.params["host"] == "0.0.0.0"
        # Beyond loopback a token is needed: each zone has its own.
        assert "STRATO_AUTH_TOKEN" in svc["environment"]
        if name != "root":
            assert ctx.params["parent"] == "http://root:8780"
            assert ctx.params["advertise_url"] == f"http://{name}:8780"
            # The root's registration token, not its admin token.
            assert svc["environment"]["STRATO_PARENT_TOKEN"] == \
                services["root"]["environment"]["STRATO_REGISTRATION_TOKEN"]


def test_what_the_dockerfile_copies_builds_the_package(tmp_path: Path) -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    copied = [p for line in re.findall(r"^COPY (.+)$", text, re.M)
              for p in line.split()[:-1]]
    assert copied == ["pyproject.toml", "README.md", "strato"], copied
    root = DEPLOY.parent
    for p in copied:
        src = root / p
        if src.is_dir():
            shutil.copytree(src, tmp_path / p, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, tmp_path / p)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(tmp_path / "dist"), str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("strato-*.whl"))
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    # The schema migrations travel with the package.
    assert any(n.startswith("strato/store/migrations/") for n in names), names[:20]
