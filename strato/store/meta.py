"""Provider metadata: location, tags, and the heartbeats that make a provider stale.

* Location and tags are operator (or agent) facts about a provider, indexed by
  the engine. A child provider without its own location inherits its root's.
* A provider is *subject to heartbeats* once it reported (an agent called
  ``record_report``) or when an operator asked for it (``heartbeat=True``).
  Such a provider is *stale* when it has not reported within the zone's window
  (``Settings.stale_after``); a never-reporting provider that is subject is
  stale from the start. Providers created through the API that never had an
  agent are never stale. Stale providers are excluded from new placements;
  their allocations are untouched.

The engine and scheduler call ``stale_providers`` (or ``stale_provider_uuids``)
on refresh: staleness changes with the clock, not with writes, so it is not in
the change log. Writes that change location, tags or the heartbeat subject
record a ``meta`` change; a plain heartbeat records one only when it brings a
stale provider back (or makes it subject), so 10,000 agents reporting every
30 s do not flood the change log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.model.location import (
    LocationError,
    canonical_location,
    canonical_tags,
    effective_location,
)
from strato.store import changes
from strato.store.providers import get_provider
from strato.store.schema import provider_meta, resource_providers
from strato.store.util import upsert_insert

CHANGE_KIND = "meta"
# The agent reports every 30 s by default; three missed reports make a provider stale.
DEFAULT_STALE_AFTER = 90.0

pm = provider_meta
rp = resource_providers
root_rp = rp.alias("meta_root_rp")
root_pm = pm.alias("meta_root_pm")


@dataclass(frozen=True, slots=True)
class Meta:
    """What the store knows of one provider's metadata."""

    uuid: str
    name: str
    root_uuid: str
    own_location: str | None
    location: str | None  # effective: own, else the root's
    tags: tuple[str, ...]
    heartbeat: bool  # subject to heartbeats
    last_report_at: datetime | None
    updated_at: datetime | None
    # The root's heartbeat state: a host's agent reports for its whole tree.
    root_heartbeat: bool = False
    root_last_report_at: datetime | None = None

    def age(self, now: datetime) -> float | None:
        """Seconds since this provider's last report, None if it never reported."""
        return _age(self.last_report_at, now)

    def is_stale(self, now: datetime, window: float) -> bool:
        return self.stale_age(now, window)[0]

    def stale_age(self, now: datetime, window: float) -> tuple[bool, float | None]:
        """(stale?, seconds of silence that made it so: its own, else its root's)."""
        if self.heartbeat and _too_old(self.last_report_at, now, window):
            return True, _age(self.last_report_at, now)
        if (self.root_uuid != self.uuid and self.root_heartbeat
                and _too_old(self.root_last_report_at, now, window)):
            return True, _age(self.root_last_report_at, now)
        return False, None


@dataclass(frozen=True, slots=True)
class Report:
    """The answer to a heartbeat: enough for an agent to know whether to re-read."""

    uuid: str
    generation: int
    last_report_at: datetime
    was_stale: bool


def now_utc() -> datetime:
    """Naive UTC like every stored time, but keeping microseconds: windows may be short."""
    return datetime.now(UTC).replace(tzinfo=None)


def _age(last: datetime | None, now: datetime) -> float | None:
    return None if last is None else max(0.0, (now - last).total_seconds())


def _too_old(last: datetime | None, now: datetime, window: float) -> bool:
    return last is None or last < now - timedelta(seconds=window)


def stale_reason(age: float | None) -> str:
    """The explain reason for a stale provider, e.g. ``stale: no report for 95s``."""
    if age is None:
        return "stale: never reported"
    return f"stale: no report for {int(age)}s"


# --- reading -----------------------------------------------------------------


def _select() -> sa.Select[tuple[object, ...]]:
    return (
        sa.select(
            rp.c.id, rp.c.uuid, rp.c.name, root_rp.c.uuid.label("root_uuid"),
            pm.c.location, pm.c.tags, pm.c.heartbeat, pm.c.last_report_at, pm.c.updated_at,
            root_pm.c.location.label("root_location"),
            root_pm.c.heartbeat.label("root_heartbeat"),
            root_pm.c.last_report_at.label("root_last_report_at"),
        )
        .select_from(
            rp.outerjoin(pm, pm.c.resource_provider_id == rp.c.id)
            .outerjoin(root_rp, root_rp.c.id == rp.c.root_provider_id)
            .outerjoin(root_pm, root_pm.c.resource_provider_id == rp.c.root_provider_id)
        )
    )


def _meta(r: sa.Row[tuple[object, ...]]) -> Meta:
    m = r._mapping
    own = m["location"]
    return Meta(
        uuid=m["uuid"], name=m["name"], root_uuid=m["root_uuid"] or m["uuid"],
        own_location=own, location=effective_location(own, m["root_location"]),
        tags=tuple(json.loads(m["tags"])) if m["tags"] else (),
        heartbeat=bool(m["heartbeat"]), last_report_at=m["last_report_at"],
        updated_at=m["updated_at"], root_heartbeat=bool(m["root_heartbeat"]),
        root_last_report_at=m["root_last_report_at"],
    )


def get_meta(conn: Connection, uuid: str) -> Meta:
    """One provider's metadata (defaults when it has none); 404 if no such provider."""
    # None has a NUL in its uuid (PostgreSQL refuses the query).
    r = None if "\x00" in uuid else conn.execute(_select().where(rp.c.uuid == uuid)).first()
    if r is None:
        raise errors.NotFound(f"No resource provider with uuid {uuid} found")
    return _meta(r)


def list_meta(conn: Connection, *, now: datetime, window: float,
              stale: bool | None = None, tag: str | None = None) -> list[Meta]:
    """Every provider's metadata, optionally only the stale (or fresh) ones, or one tag's."""
    q = _select().order_by(rp.c.id)
    if stale is not None:
        ids = stale_ids(conn, now, window)
        q = q.where(rp.c.id.in_(ids)) if stale else q.where(rp.c.id.not_in(ids))
    found = [_meta(r) for r in conn.execute(q)]
    if tag is not None:
        found = [m for m in found if tag in m.tags]
    return found


def stale_ids(conn: Connection, now: datetime, window: float) -> sa.Select[tuple[int]]:
    """A sub-select of the ids of stale providers, with the nested providers below them.

    A host's agent reports for the whole tree (NUMA nodes, devices), so the
    children of a stale root are stale too.
    """
    cutoff = now - timedelta(seconds=window)
    own = sa.select(pm.c.resource_provider_id).where(
        pm.c.heartbeat.is_(True),
        sa.or_(pm.c.last_report_at.is_(None), pm.c.last_report_at < cutoff))
    return sa.select(rp.c.id).where(
        sa.or_(rp.c.id.in_(own), rp.c.root_provider_id.in_(own)))


def _stale_statement() -> sa.Select[Any]:
    own = (
        sa.select(pm.c.resource_provider_id, pm.c.last_report_at)
        .where(pm.c.heartbeat.is_(True),
               sa.or_(pm.c.last_report_at.is_(None),
                      pm.c.last_report_at < sa.bindparam("cutoff", type_=pm.c.last_report_at.type)))
        .subquery()
    )
    return (sa.select(rp.c.uuid, own.c.last_report_at)
            .join(own, sa.or_(own.c.resource_provider_id == rp.c.id,
                              own.c.resource_provider_id == rp.c.root_provider_id)))


# Built once: building it (a subquery's column proxies) cost more than running
# it, and every zone runs it every second (HostView.stale).
_STALE = _stale_statement()


def stale_providers(conn: Connection, now: datetime | None = None,
                    window: float = DEFAULT_STALE_AFTER) -> dict[str, float | None]:
    """Stale provider uuid -> seconds since its (or its root's) last report, None if never.

    For the engine and scheduler: exclude these uuids from candidates with the
    reason ``stale_reason(age)``. One indexed query; call it on refresh.
    """
    now = now or now_utc()
    cutoff = now - timedelta(seconds=window)
    rows = conn.execute(_STALE, {"cutoff": cutoff}).all()
    out: dict[str, float | None] = {}
    for uuid, last in rows:
        age = _age(last, now)
        if uuid in out:
            # Stale itself and through its root: report the longer silence.
            prev = out[uuid]
            age = None if age is None or prev is None else max(age, prev)
        out[uuid] = age
    return out


def stale_provider_uuids(conn: Connection, now: datetime | None = None,
                         window: float = DEFAULT_STALE_AFTER) -> frozenset[str]:
    """The uuids of ``stale_providers``: what the engine must leave out of new placements."""
    return frozenset(stale_providers(conn, now, window))


# --- writing -----------------------------------------------------------------


def _upsert(conn: Connection, row: dict[str, object], update: Iterable[str]) -> None:
    stmt = upsert_insert(conn, pm).values(**row)
    cols = {c: stmt.excluded[c] for c in update}
    conn.execute(stmt.on_conflict_do_update(index_elements=[pm.c.resource_provider_id],
                                            set_=cols))


def _inheritors(conn: Connection, provider_id: int) -> list[str]:
    """Providers whose effective location follows this one (its tree, if it is a root)."""
    return list(conn.execute(
        sa.select(rp.c.uuid).where(rp.c.root_provider_id == provider_id,
                                   rp.c.id != provider_id)).scalars())


def validate(location: str | None, tags: Iterable[str]) -> tuple[str | None, list[str]]:
    """Canonical (location, tags); a 400 naming the field when either is invalid."""
    try:
        loc = canonical_location(location)
    except LocationError as exc:
        raise errors.BadRequest(f"location: {exc}") from None
    try:
        tag_list = canonical_tags(tags)
    except LocationError as exc:
        raise errors.BadRequest(f"tags: {exc}") from None
    return loc, tag_list


def set_meta(conn: Connection, uuid: str, *, location: str | None, tags: Iterable[str],
             heartbeat: bool | None = None, within: str | None = None) -> Meta:
    """Replace a provider's location and tags; `heartbeat` None keeps the current setting.
    `within`: the zone's location prefix (slash form), which a location must
    lie in: a parent prunes this zone by it, so a provider outside it would
    be out of reach of the requests that ask for where it is.

    Validates first, so a bad value changes nothing.
    """
    loc, tag_list = validate(location, tags)
    if within:
        within = canonical_location(within)
    if within and loc is not None and loc != within and not loc.startswith(within + "/"):
        raise errors.BadRequest(
            f"location: {loc!r} is outside this zone's location prefix {within!r}: a "
            f"provider here must be at {within!r} or below it ('{within}/...'), or "
            "have no location of its own (it then takes the zone's)")
    provider = get_provider(conn, uuid)
    row: dict[str, object] = {"resource_provider_id": provider.id, "location": loc,
                              "tags": json.dumps(tag_list), "heartbeat": bool(heartbeat),
                              "updated_at": now_utc()}
    update = ["location", "tags", "updated_at"]
    if heartbeat is not None:
        update.append("heartbeat")
    _upsert(conn, row, update)
    changes.record(conn, CHANGE_KIND, [uuid, *_inheritors(conn, provider.id)])
    return get_meta(conn, uuid)


def record_report(conn: Connection, uuid: str, *, now: datetime | None = None,
                  window: float = DEFAULT_STALE_AFTER) -> Report:
    """An agent reported: the provider is fresh, and from now on subject to heartbeats."""
    now = now or now_utc()
    provider = get_provider(conn, uuid)
    before = conn.execute(sa.select(pm.c.heartbeat, pm.c.last_report_at)
                          .where(pm.c.resource_provider_id == provider.id)).first()
    was_stale = before is not None and bool(before[0]) and _too_old(before[1], now, window)
    _upsert(conn, {"resource_provider_id": provider.id, "location": None, "tags": "[]",
                   "heartbeat": True, "last_report_at": now, "updated_at": now},
            ["heartbeat", "last_report_at"])
    if before is None or not before[0] or was_stale:
        # The engine must see the provider come back (or become subject) at once.
        changes.record(conn, CHANGE_KIND, [uuid, *_inheritors(conn, provider.id)])
    return Report(uuid=uuid, generation=provider.generation, last_report_at=now,
                  was_stale=was_stale)
