"""/strato/v1/providers: provider metadata (location, tags), heartbeats and staleness.

Admin only, like the Placement provider routes. Bodies and answers are typed
models, so they appear in /openapi.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from strato.api import deps
from strato.api.body import bounded_faults
from strato.store import meta as store

router = APIRouter(prefix="/strato/v1/providers", tags=["strato providers"])


class MetaUpdate(BaseModel):
    """PUT body: replaces location and tags. `heartbeat` is optional and kept when absent."""

    model_config = ConfigDict(extra="forbid", strict=True)
    location: str | None = Field(
        description="Path from the widest domain to the narrowest, 'dfw/room1/rack1/m1', or "
                    "the pragma form 'm1.rack1.room1.dfw'; null: inherit the root's.")
    tags: list[str] = Field(description="Lowercase identifiers such as 'hipaa', 'pci-dss'.")
    heartbeat: bool | None = Field(
        default=None, description="Subject the provider to heartbeats (stale when silent) "
                                  "even before an agent reports; false stops that.")


class MetaView(BaseModel):
    uuid: str
    name: str
    root_provider_uuid: str
    location: str | None = Field(description="Effective: own location, else the root's.")
    own_location: str | None
    tags: list[str] = Field(description="The provider's own tags.")
    zone_tags: list[str] = Field(
        default_factory=list, description="The zone's tags (strato serve --tag), which "
        "every provider of the zone has too: the scheduler's tag rules see both.")
    heartbeat: bool = Field(description="Subject to heartbeats.")
    last_report_at: str | None = Field(description="ISO 8601 UTC; null: never reported.")
    seconds_since_report: float | None
    stale: bool
    stale_reason: str | None
    updated_at: str | None
    zone: str | None = Field(
        default=None, description="At a zone with children: the zone the provider is in "
        "(its path from this zone, as a placement's: 'global', 'global/dfw/dfw-c1').")


class MetaList(BaseModel):
    stale_after: float = Field(description="The zone's heartbeat window in seconds.")
    providers: list[MetaView]


class HeartbeatView(BaseModel):
    uuid: str
    resource_provider_generation: int = Field(
        description="Lets an agent skip re-reading inventories when nothing changed.")
    last_report_at: str
    was_stale: bool


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat(timespec="milliseconds") + "Z"


def _window(request: Request) -> float:
    return float(getattr(request.app.state.settings, "stale_after", store.DEFAULT_STALE_AFTER))


def _view(m: store.Meta, now: datetime, window: float,
          zone_tags: Sequence[str] = ()) -> MetaView:
    stale, silent_for = m.stale_age(now, window)
    age = m.age(now)
    return MetaView(
        uuid=m.uuid, name=m.name, root_provider_uuid=m.root_uuid, location=m.location,
        own_location=m.own_location, tags=list(m.tags), zone_tags=list(zone_tags),
        heartbeat=m.heartbeat,
        last_report_at=_iso(m.last_report_at),
        seconds_since_report=None if age is None else round(age, 3), stale=stale,
        stale_reason=store.stale_reason(silent_for) if stale else None,
        updated_at=_iso(m.updated_at))


@router.get("/{uuid}/meta", response_model=MetaView)
def get_provider_meta(request: Request, uuid: str) -> MetaView:
    deps.require_admin(request, "strato:providers:meta:show")
    with deps.db(request).read() as conn:
        m = store.get_meta(conn, uuid)
    return _view(m, store.now_utc(), _window(request), _zone_tags(request))


@router.put("/{uuid}/meta", response_model=MetaView,
            dependencies=[Depends(bounded_faults(MetaUpdate))])
def update_provider_meta(request: Request, uuid: str, body: MetaUpdate) -> MetaView:
    deps.require_admin(request, "strato:providers:meta:update")
    with deps.db(request).write() as conn:
        m = store.set_meta(conn, uuid, location=body.location, tags=body.tags,
                           heartbeat=body.heartbeat,
                           within=request.app.state.settings.location_prefix)
    return _view(m, store.now_utc(), _window(request), _zone_tags(request))


@router.get("", response_model=MetaList)
def list_providers_meta(
    request: Request,
    stale: bool | None = Query(None, description="Only stale (true) or fresh (false) ones."),
    tag: str | None = Query(None, description="Only providers with this tag."),
) -> MetaList:
    deps.require_admin(request, "strato:providers:list")
    window, now = _window(request), store.now_utc()
    zone_tags = _zone_tags(request)
    with deps.db(request).read() as conn:
        # A zone's tag is every provider's here, as the scheduler sees it.
        found = store.list_meta(conn, now=now, window=window, stale=stale,
                                tag=None if tag in zone_tags else tag)
    return MetaList(stale_after=window,
                    providers=[_view(m, now, window, zone_tags) for m in found])


def _zone_tags(request: Request) -> list[str]:
    return sorted(request.app.state.settings.zone_tags)



@router.post("/{uuid}/heartbeat", response_model=HeartbeatView)
def heartbeat(request: Request, uuid: str) -> HeartbeatView:
    deps.require_admin(request, "strato:providers:heartbeat")
    with deps.db(request).write() as conn:
        r = store.record_report(conn, uuid, window=_window(request))
    return HeartbeatView(uuid=r.uuid, resource_provider_generation=r.generation,
                         last_report_at=_iso(r.last_report_at) or "", was_stale=r.was_stale)
