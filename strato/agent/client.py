"""The few zone API calls the agent makes, over the Placement and Strato HTTP routes.

Failures come out as two exceptions the agent's loop knows how to treat:
``ZoneUnavailable`` (connection refused, timeout, 5xx: back off and retry)
and ``ZoneRefused`` (a 4xx with Placement's error body: say why, back off).
"""

from __future__ import annotations

from typing import Any

import httpx

import strato

# 1.26: reserved may equal total (a host whose capacity is all used elsewhere).
MICROVERSION = "placement 1.39"


class ZoneUnavailable(Exception):
    """The zone did not answer, or answered with a server error: try again later."""


class ZoneRefused(Exception):
    """The zone refused a request (4xx)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class ProviderGone(ZoneRefused):
    """404 on our provider: the zone lost it (deleted, or a new database); register again."""


class GenerationConflict(ZoneRefused):
    """409 concurrent update: someone else changed the provider; re-read and retry."""


class ZoneClient:
    def __init__(self, base_url: str, token: str, timeout: float) -> None:
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout,
            headers={"x-auth-token": token, "openstack-api-version": MICROVERSION,
                     "user-agent": f"strato-agent/{strato.__version__}"})

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ZoneUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if r.status_code >= 500 or r.status_code == 429:
            raise ZoneUnavailable(f"{method} {path}: HTTP {r.status_code}")
        if r.status_code >= 400:
            code, detail = _error(r)
            kind = ZoneRefused
            if r.status_code == 404:
                kind = ProviderGone
            elif code == "placement.concurrent_update":
                kind = GenerationConflict
            raise kind(r.status_code, code, detail)
        return r.json() if r.content else None

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call("GET", f"/resource_providers/{uuid}")
        except ProviderGone:
            return None
        return found

    def create_provider(self, uuid: str, name: str) -> dict[str, Any]:
        created: dict[str, Any] = self._call("POST", "/resource_providers",
                                             {"uuid": uuid, "name": name})
        return created

    def rename_provider(self, uuid: str, name: str) -> None:
        self._call("PUT", f"/resource_providers/{uuid}", {"name": name})

    def get_inventories(self, uuid: str) -> tuple[int, dict[str, dict[str, Any]]]:
        got = self._call("GET", f"/resource_providers/{uuid}/inventories")
        return int(got["resource_provider_generation"]), dict(got["inventories"])

    def put_inventories(self, uuid: str, generation: int,
                        inventories: dict[str, dict[str, Any]]) -> int:
        got = self._call("PUT", f"/resource_providers/{uuid}/inventories",
                         {"resource_provider_generation": generation,
                          "inventories": inventories})
        return int(got["resource_provider_generation"])

    def get_usages(self, uuid: str) -> tuple[int, dict[str, int]]:
        got = self._call("GET", f"/resource_providers/{uuid}/usages")
        return int(got["resource_provider_generation"]), dict(got["usages"])

    def get_meta(self, uuid: str) -> dict[str, Any]:
        got: dict[str, Any] = self._call("GET", f"/strato/v1/providers/{uuid}/meta")
        return got

    def put_meta(self, uuid: str, location: str | None, tags: list[str]) -> None:
        self._call("PUT", f"/strato/v1/providers/{uuid}/meta",
                   {"location": location, "tags": tags})

    def heartbeat(self, uuid: str) -> int:
        """Report that the host is alive; returns the provider's generation."""
        got = self._call("POST", f"/strato/v1/providers/{uuid}/heartbeat")
        return int(got["resource_provider_generation"])


def _error(r: httpx.Response) -> tuple[str, str]:
    try:
        err = r.json()["errors"][0]
        return str(err.get("code", "")), str(err.get("detail", ""))
    except (ValueError, KeyError, IndexError, TypeError):
        return "", r.text[:200]
