"""Keystone tokens against a real Keystone (issue 15): users, projects and
roles made in Keystone meet Placement's policy at a real zone process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strato.process import ServerProcess
from tests.helpers import keystone

pytestmark = pytest.mark.slow
PW = "pw-for-tests"


@pytest.fixture(scope="module")
def ks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[keystone.Keystone]:
    k = keystone.start(tmp_path_factory.mktemp("keystone"))
    try:
        roles = {r["name"]: r["id"] for r in k.call("GET", "/roles")["roles"]}
        for project in ("p1", "p2", "service"):
            k.ids[project] = k.call("POST", "/projects", {"project": {
                "name": project, "domain_id": "default"}})["project"]["id"]
        for user, project, role in (("rita", "p1", "reader"), ("alice", "p1", "member"),
                                    ("bob", "p2", "member"), ("placement", "service",
                                                              "service")):
            uid = k.call("POST", "/users", {"user": {"name": user, "domain_id": "default",
                                                     "password": PW}})["user"]["id"]
            k.call("PUT", f"/projects/{k.ids[project]}/users/{uid}/roles/{roles[role]}")
        yield k
    finally:
        k.stop()


def test_keystone_tokens_meet_placements_policy(ks: keystone.Keystone, tmp_path: Path
                                                ) -> None:
    with ServerProcess(f"sqlite:///{tmp_path / 'z.db'}", log_path=tmp_path / "z.log", extra=[
            "--keystone-url", ks.url, "--keystone-user", "placement", "--keystone-password",
            PW, "--auth-token", "static-admin", "--token-cache-seconds", "1"]) as z:
        v = {"openstack-api-version": "placement 1.39"}

        def client(token: str) -> httpx.Client:
            return httpx.Client(base_url=z.url, headers={**v, "x-auth-token": token},
                                timeout=30)

        admin = ks.token("admin", keystone.ADMIN_PASSWORD, "admin")
        with client(admin) as c:
            rp = c.post("/resource_providers", json={"name": "h1"}).json()["uuid"]
            r = c.put(f"/resource_providers/{rp}/inventories", json={
                "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
            assert r.status_code == 200, r.text
            for project, n in (("p1", 2), ("p2", 3)):
                r = c.put(f"/allocations/{uuid.uuid4()}", json={
                    "allocations": {rp: {"resources": {"VCPU": n}}},
                    "project_id": ks.ids[project], "user_id": "u",
                    "consumer_generation": None, "consumer_type": "INSTANCE"})
                assert r.status_code == 204, r.text

        def usages(token: str, project: str) -> httpx.Response:
            with client(token) as c:
                return c.get(f"/usages?project_id={ks.ids[project]}")

        rita = ks.token("rita", PW, "p1")     # reader of p1
        alice = ks.token("alice", PW, "p1")   # member of p1 (implies reader)
        bob = ks.token("bob", PW, "p2")       # member of p2
        r = usages(rita, "p1")
        mine = {"INSTANCE": {"VCPU": 2, "consumer_count": 1}}  # by consumer type (1.38+)
        assert r.status_code == 200 and r.json()["usages"] == mine, r.text
        assert usages(alice, "p1").json()["usages"] == mine
        assert usages(bob, "p2").json()["usages"] == {"INSTANCE": {"VCPU": 3,
                                                                   "consumer_count": 1}}
        # Another project's data, and anything an admin does: 403.
        for token, project in ((rita, "p2"), (alice, "p2"), (bob, "p1")):
            assert usages(token, project).status_code == 403
        for token in (rita, alice, bob):
            with client(token) as c:
                assert c.post("/resource_providers", json={"name": "x"}).status_code == 403
                assert c.get("/resource_providers").status_code == 403
                assert c.put(f"/allocations/{uuid.uuid4()}", json={
                    "allocations": {rp: {"resources": {"VCPU": 1}}},
                    "project_id": ks.ids["p1"], "user_id": "u", "consumer_generation": None,
                    "consumer_type": "INSTANCE"}).status_code == 403
        # Not a token Keystone knows: 401; the static admin token still works.
        with client("gAAAAA-not-a-token") as c:
            r = c.get("/resource_providers")
            assert r.status_code == 401 and r.json()["errors"][0]["status"] == 401
        with client("static-admin") as c:
            assert c.get("/resource_providers").status_code == 200

        # A revoked token is refused once its cached verdict (1 s here) is old.
        with httpx.Client(timeout=30) as k:
            r = k.delete(f"{ks.url}/auth/tokens", headers={"x-auth-token": admin,
                                                            "x-subject-token": alice})
            assert r.status_code == 204, r.text
        time.sleep(1.5)
        assert usages(alice, "p1").status_code == 401

        # Keystone down: a token it has not vouched for lately is a 503 (it may be
        # good), never a 401; the static token is unaffected.
        fresh = ks.token("bob", PW, "p2")
        ks.stop()
        r = usages(fresh, "p2")
        assert r.status_code == 503, r.text
        assert "Keystone" in r.json()["errors"][0]["detail"]
        with client("static-admin") as c:
            assert c.get("/resource_providers").status_code == 200
