"""A tiny test builder that makes providers through the Placement API.

`Cloud(client).host("cn1", VCPU=8, MEMORY_MB=4096)` reads like the picture of
the cloud a test needs; every write goes through the real routes, so the
engine sees exactly what a client would have written.
"""

from __future__ import annotations

from typing import Any, Protocol

AGG_A = "a0000000-0000-4000-8000-00000000000a"
AGG_B = "b0000000-0000-4000-8000-00000000000b"
SHARES = "MISC_SHARES_VIA_AGGREGATE"


class HttpClient(Protocol):
    def get(self, url: str, **kw: Any) -> Any: ...
    def put(self, url: str, **kw: Any) -> Any: ...
    def post(self, url: str, **kw: Any) -> Any: ...


def inv(total: int, **kw: Any) -> dict[str, Any]:
    return {"total": total, **kw}


class Cloud:
    def __init__(self, client: HttpClient) -> None:
        self.c = client
        self.uuids: dict[str, str] = {}
        self.names: dict[str, str] = {}

    def host(self, name: str, *, parent: str | None = None, traits: tuple[str, ...] = (),
             aggs: tuple[str, ...] = (), **resources: int | dict[str, Any]) -> str:
        body: dict[str, Any] = {"name": name}
        if parent is not None:
            body["parent_provider_uuid"] = self.uuids[parent]
        r = self.c.post("/resource_providers", json=body)
        assert r.status_code == 200, r.text
        u = r.json()["uuid"]
        self.uuids[name], self.names[u] = u, name
        if resources:
            invs = {rc: v if isinstance(v, dict) else inv(v) for rc, v in resources.items()}
            self._put(u, "inventories", {"inventories": invs})
        if traits:
            for t in traits:
                if t.startswith("CUSTOM_"):
                    assert self.c.put(f"/traits/{t}").status_code in (201, 204)
            self._put(u, "traits", {"traits": list(traits)})
        if aggs:
            self._put(u, "aggregates", {"aggregates": list(aggs)})
        return u

    def _put(self, u: str, what: str, body: dict[str, Any]) -> None:
        gen = self.c.get(f"/resource_providers/{u}").json()["generation"]
        r = self.c.put(f"/resource_providers/{u}/{what}",
                       json={**body, "resource_provider_generation": gen})
        assert r.status_code == 200, r.text

    def allocate(self, consumer: str, allocations: dict[str, dict[str, int]]) -> None:
        body = {"allocations": {self.uuids[n]: {"resources": res}
                                for n, res in allocations.items()},
                "project_id": "p", "user_id": "u", "consumer_generation": None,
                "consumer_type": "INSTANCE"}
        r = self.c.put(f"/allocations/{consumer}", json=body)
        assert r.status_code == 204, r.text

    def candidates(self, query: str, version: str = "latest") -> dict[str, Any]:
        r = self.c.get(f"/allocation_candidates?{query}",
                       headers={"openstack-api-version": f"placement {version}"})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    def error(self, query: str, version: str = "latest") -> tuple[str, str]:
        r = self.c.get(f"/allocation_candidates?{query}",
                       headers={"openstack-api-version": f"placement {version}"})
        assert r.status_code == 400, r.text
        err = r.json()["errors"][0]
        # No code before microversion 1.23, as from Placement.
        return err["detail"], err.get("code", "")

    def picks(self, body: dict[str, Any]) -> list[dict[str, dict[str, int]]]:
        """Allocation requests by provider *name*, in answer order (dict form)."""
        return [{self.names[u]: a["resources"] for u, a in ar["allocations"].items()}
                for ar in body["allocation_requests"]]

    def mappings(self, body: dict[str, Any]) -> list[dict[str, list[str]]]:
        return [{s: sorted(self.names[u] for u in us) for s, us in ar["mappings"].items()}
                for ar in body["allocation_requests"]]
