"""A real Keystone for the tests: the `keystone` package from PyPI in a venv
of its own (`.venv-keystone`, made once, ~20 s), on SQLite with fernet
tokens, bootstrapped, and served by a threaded WSGI server on loopback."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from strato.process import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-keystone"
ADMIN_PASSWORD = "s3cret-admin"
RUNNER = """
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

port = int(sys.argv[1])
sys.argv = sys.argv[:1]  # keystone's configuration reads the command line
from keystone.wsgi.api import application


class Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


make_server("127.0.0.1", port, application, server_class=Threaded,
            handler_class=Quiet).serve_forever()
"""


def ensure_venv() -> Path:
    with open(ROOT / ".venv-keystone.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = VENV / "bin" / "python"
        if not (VENV / ".installed").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "keystone>=26"],
                           check=True, timeout=900)
            (VENV / ".installed").touch()
    return python


@dataclass
class Keystone:
    url: str
    proc: subprocess.Popen[bytes]
    ids: dict[str, str] = field(default_factory=dict)

    def token(self, user: str, password: str, project: str) -> str:
        r = httpx.post(f"{self.url}/auth/tokens", timeout=30, json={"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}}})
        assert r.status_code == 201, r.text
        return r.headers["x-subject-token"]

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        admin = self.token("admin", ADMIN_PASSWORD, "admin")
        r = httpx.request(method, f"{self.url}{path}", json=body, timeout=30,
                          headers={"x-auth-token": admin})
        assert r.status_code < 300, r.text
        return r.json() if r.content else {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def start(tmp: Path) -> Keystone:
    python = ensure_venv()
    manage = python.parent / "keystone-manage"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v3"
    conf = tmp / "keystone.conf"
    conf.write_text(f"""[DEFAULT]
log_file = {tmp / 'keystone.log'}
[database]
connection = sqlite:///{tmp / 'keystone.db'}
[token]
provider = fernet
[fernet_tokens]
key_repository = {tmp / 'fernet-keys'}
[fernet_receipts]
key_repository = {tmp / 'fernet-keys'}
[credential]
key_repository = {tmp / 'credential-keys'}
""")
    user = ["--keystone-user", "root", "--keystone-group", "root"] if os.getuid() == 0 else []
    for step in (["db_sync"], ["fernet_setup", *user], ["credential_setup", *user],
                 ["bootstrap", "--bootstrap-password", ADMIN_PASSWORD,
                  "--bootstrap-admin-url", url, "--bootstrap-public-url", url,
                  "--bootstrap-region-id", "RegionOne"]):
        subprocess.run([str(manage), "--config-file", str(conf), *step], check=True,
                       capture_output=True, timeout=300)
    (tmp / "serve_keystone.py").write_text(RUNNER)
    log = open(tmp / "keystone-serve.log", "ab")  # noqa: SIM115 (the process's)
    proc = subprocess.Popen([str(python), str(tmp / "serve_keystone.py"), str(port)],
                            stdout=log, stderr=log,
                            env={**os.environ, "OS_KEYSTONE_CONFIG_FILES": str(conf)})
    ks = Keystone(url, proc)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"keystone exited: see {tmp / 'keystone-serve.log'}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return ks
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    ks.stop()
    raise RuntimeError("keystone did not start")
