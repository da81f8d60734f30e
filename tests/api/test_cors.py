"""CORS as Placement's (oslo.middleware's): only with configured origins."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings

ORIGIN = "http://valid.example.com"


def _client(tmp_path: Path, **cors: tuple[str, ...]) -> TestClient:
    return TestClient(create_app(Settings(db_url=f"sqlite:///{tmp_path / 'c.db'}", **cors)))


def test_preflight_from_an_allowed_origin(tmp_path: Path) -> None:
    with _client(tmp_path, cors_allowed_origins=(ORIGIN,),
                 cors_allow_headers=("openstack-api-version",)) as c:
        ok = c.options("/", headers={"origin": ORIGIN, "access-control-request-method": "GET",
                                     "access-control-request-headers": "openstack-api-version"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == ORIGIN
        assert ok.headers["access-control-allow-headers"] == "openstack-api-version"
        other = c.options("/", headers={"origin": "http://evil.example.com",
                                        "access-control-request-method": "GET"})
        assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
        header = c.options("/", headers={"origin": ORIGIN, "access-control-request-method": "GET",
                                         "access-control-request-headers": "x-secret"})
        assert "access-control-allow-origin" not in header.headers
        got = c.get("/", headers={"origin": ORIGIN})
        assert got.headers["access-control-allow-origin"] == ORIGIN


def test_no_cors_without_origins(tmp_path: Path) -> None:
    with _client(tmp_path) as c:
        assert c.options("/", headers={"origin": ORIGIN,
                                       "access-control-request-method": "GET"}).status_code == 405
        assert "access-control-allow-origin" not in c.get("/", headers={"origin": ORIGIN}).headers
