"""Run a `strato serve` child process on loopback (demo, tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`strato serve` in a child process; start() waits until it answers."""

    def __init__(self, db_url: str, *, port: int | None = None, extra: list[str] | None = None,
                 log_path: Path | None = None,
                 tls: tuple[str, str, str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        """`tls`: (certificate, key, CA) files; the server runs with mutual TLS
        and start() checks it with them. `env`: added to this process's
        environment for the server's."""
        self.tls = tls
        self.env = env or {}
        self.db_url = db_url
        self.port = port or free_port()
        self.extra = extra or []
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def client_options(self) -> dict[str, Any]:
        """httpx options for a client of this server (its certificate, with TLS)."""
        if self.tls is None:
            return {}
        cert, key, ca = self.tls
        ctx = ssl.create_default_context(cafile=ca)
        ctx.load_cert_chain(cert, key)
        return {"verify": ctx}

    def start(self, timeout: float = 30.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "strato.cli.main", "serve", "--db", self.db_url,
               "--port", str(self.port), *self.extra]
        if self.tls is not None:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1], "--tls-ca", self.tls[2]]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=out, env={**os.environ, **self.env})
        try:
            self._wait_ready(cmd, timeout)
        except BaseException:
            self.stop()  # never left running behind a failed start
            raise
        return self

    def _wait_ready(self, cmd: list[str], timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {cmd}")
            try:
                if httpx.get(self.url + "/", timeout=1.0,
                             **self.client_options()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start in time")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as in a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                # A killed process still in the kernel (an fsync on a busy
                # disk) can take a while to go: wait for it, not for 10 s.
                self.proc.wait(60)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
