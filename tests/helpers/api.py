"""Small HTTP helpers for end-to-end tests against a real server."""

from __future__ import annotations

from typing import Any

import httpx

HEADERS = {"x-auth-token": "admin", "openstack-api-version": "placement 1.39"}


def client(base_url: str, timeout: float = 30.0) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers=HEADERS, timeout=timeout)


def make_provider(c: httpx.Client, name: str, inventories: dict[str, dict[str, Any]],
                  parent: str | None = None) -> str:
    body: dict[str, Any] = {"name": name}
    if parent:
        body["parent_provider_uuid"] = parent
    r = c.post("/resource_providers", json=body)
    assert r.status_code == 200, r.text
    rp = r.json()
    r = c.put(f"/resource_providers/{rp['uuid']}/inventories",
              json={"resource_provider_generation": rp["generation"],
                    "inventories": inventories})
    assert r.status_code == 200, r.text
    return str(rp["uuid"])


def usages(c: httpx.Client, rp_uuid: str) -> dict[str, int]:
    r = c.get(f"/resource_providers/{rp_uuid}/usages")
    assert r.status_code == 200, r.text
    return dict(r.json()["usages"])


def capacity(c: httpx.Client, rp_uuid: str) -> dict[str, int]:
    r = c.get(f"/resource_providers/{rp_uuid}/inventories")
    assert r.status_code == 200, r.text
    return {rc: int((i["total"] - i["reserved"]) * i["allocation_ratio"])
            for rc, i in r.json()["inventories"].items()}
