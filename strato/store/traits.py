"""Traits: the standard set (synced at start-up), CUSTOM_* traits, provider traits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from strato.model import errors
from strato.model import names as model_names
from strato.store import changes, providers
from strato.store.db import lock_providers
from strato.store.schema import resource_provider_traits, traits
from strato.store.util import bytewise, slices, upsert_insert, utcnow

rpt = resource_provider_traits


@dataclass(frozen=True, slots=True)
class Trait:
    id: int
    name: str
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def last_modified(self) -> datetime | None:
        return self.updated_at or self.created_at


@dataclass(frozen=True, slots=True)
class TraitFilters:
    """Filters of GET /traits; None means "do not filter on this"."""

    name_in: tuple[str, ...] | None = None
    prefix: str | None = None
    associated: bool | None = None


@dataclass(frozen=True, slots=True)
class ProviderTraits:
    """A provider's traits and the generation they were read (or written) at."""

    traits: tuple[Trait, ...]
    generation: int


def ids_by_name(conn: Connection, names: Iterable[str]) -> dict[str, int]:
    """Map trait names to ids; unknown names are a 400 that lists them."""
    wanted = set(names)
    if not wanted:
        return {}
    found = {r[0]: int(r[1]) for r in conn.execute(
        sa.select(traits.c.name, traits.c.id).where(traits.c.name.in_(wanted)))}
    missing = sorted(wanted - found.keys())
    if missing:
        raise errors.BadRequest(f"No such trait(s): {', '.join(missing)}.")
    return found


def _row(r: sa.Row[tuple[object, ...]]) -> Trait:
    m = r._mapping
    return Trait(id=int(m["id"]), name=m["name"], created_at=m["created_at"],
                 updated_at=m["updated_at"])


def _escape_like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def list_traits(conn: Connection, f: TraitFilters = TraitFilters()) -> list[Trait]:
    q = sa.select(traits)
    if f.name_in is not None:
        q = q.where(traits.c.name.in_(f.name_in))
    if f.prefix is not None:
        # Trait names are full of "_", a LIKE wildcard: match it literally.
        # ILIKE: the case does not matter, on PostgreSQL as on SQLite (whose
        # LIKE, as MySQL's, ignores it; PostgreSQL's minded it).
        q = q.where(traits.c.name.ilike(_escape_like(f.prefix) + "%", escape="\\"))
    if f.associated is not None:
        used = traits.c.id.in_(sa.select(rpt.c.trait_id))
        q = q.where(used if f.associated else ~used)
    return [_row(r) for r in conn.execute(q.order_by(bytewise(conn, traits.c.name)))]


def get_trait_or_none(conn: Connection, name: str, *, for_update: bool = False
                      ) -> Trait | None:
    if "\x00" in name:
        return None  # none is named so (PostgreSQL refuses the query)
    q = sa.select(traits).where(traits.c.name == name)
    if for_update and conn.dialect.name == "postgresql":
        q = q.with_for_update()
    r = conn.execute(q).first()
    return _row(r) if r is not None else None


def get_trait(conn: Connection, name: str, *, for_update: bool = False) -> Trait:
    t = get_trait_or_none(conn, name, for_update=for_update)
    if t is None:
        raise errors.NotFound(f"No such trait(s): {name}.")
    return t


def ensure_trait(conn: Connection, name: str) -> tuple[Trait, bool]:
    """The custom trait `name`, created if missing; the flag says whether it was.

    INSERT ... ON CONFLICT DO NOTHING makes two concurrent creators agree: one
    creates it, the other finds it.
    """
    if not model_names.is_custom_name(name):
        raise errors.BadRequest(
            f"Invalid trait name {name!r}: a custom trait is CUSTOM_ followed by A-Z, 0-9 "
            f"and _, at most {model_names.MAX_NAME_LENGTH} characters")
    now = utcnow()
    inserted = conn.execute(
        upsert_insert(conn, traits).values(name=name, created_at=now, updated_at=now)
        .on_conflict_do_nothing().returning(traits.c.id)).first()
    return get_trait(conn, name), inserted is not None


def delete_trait(conn: Connection, name: str) -> None:
    """Delete a custom trait that no provider has.

    The row lock (PostgreSQL) makes a concurrent set_provider_traits, which
    holds its traits FOR SHARE, either finish first (then this sees the use) or
    wait and then find the trait gone.
    """
    t = get_trait(conn, name, for_update=True)
    if model_names.is_standard_trait(name):
        raise errors.BadRequest(f"Cannot delete standard trait {name}.")
    if conn.execute(sa.select(rpt.c.trait_id).where(rpt.c.trait_id == t.id).limit(1)).first():
        raise errors.Conflict(f"The trait {name} is in use by a resource provider.")
    conn.execute(sa.delete(traits).where(traits.c.id == t.id))


def _provider_trait_rows(conn: Connection, provider_id: int) -> list[Trait]:
    q = (sa.select(traits).join(rpt, rpt.c.trait_id == traits.c.id)
         .where(rpt.c.resource_provider_id == provider_id)
         .order_by(bytewise(conn, traits.c.name)))
    return [_row(r) for r in conn.execute(q)]


def provider_traits(conn: Connection, uuid: str) -> ProviderTraits:
    """A provider's traits; 404 if there is no such provider."""
    p = _provider(conn, uuid)
    return ProviderTraits(tuple(_provider_trait_rows(conn, p.id)), p.generation)


def _provider(conn: Connection, uuid: str) -> providers.Provider:
    p = providers.get_provider_or_none(conn, uuid)
    if p is None:
        raise errors.NotFound(f"No resource provider with uuid {uuid} found")
    return p


def _locked_traits(conn: Connection, names: Sequence[str]) -> list[Trait]:
    """The named traits, held FOR SHARE on PostgreSQL; 400 naming any unknown one."""
    wanted = sorted(set(names))
    if not wanted:
        return []
    found: list[Trait] = []
    for part in slices(wanted):  # a body may name more than one statement binds
        q = sa.select(traits).where(traits.c.name.in_(part)).order_by(traits.c.id)
        if conn.dialect.name == "postgresql":
            q = q.with_for_update(read=True)
        found += [_row(r) for r in conn.execute(q)]
    missing = sorted(set(wanted) - {t.name for t in found})
    if missing:
        raise errors.BadRequest(f"No such trait(s): {', '.join(missing)}.")
    return sorted(found, key=lambda t: t.name)


def set_provider_traits(conn: Connection, uuid: str, names: Sequence[str],
                        generation: int | None) -> ProviderTraits:
    """Replace a provider's traits and bump its generation (if they change).

    `generation` is the one the caller read (409 if stale); None (DELETE)
    means "whatever it is now". The provider row is locked first, so the
    check, the replacement and the bump see one state.
    """
    p = _provider(conn, uuid)
    lock_providers(conn, [p.id])
    p = _provider(conn, uuid)
    if generation is not None and p.generation != generation:
        raise errors.ConcurrentUpdate(
            "Resource provider's generation already changed. Please update the "
            f"generation and try again. ({uuid} is at generation {p.generation}, the "
            f"request named {generation})")
    wanted = _locked_traits(conn, names)
    have = set(conn.execute(sa.select(rpt.c.trait_id)
                            .where(rpt.c.resource_provider_id == p.id)).scalars())
    if have == {t.id for t in wanted}:
        # As Placement: the same set again is no change, and no new generation.
        return ProviderTraits(tuple(wanted), p.generation)
    conn.execute(sa.delete(rpt).where(rpt.c.resource_provider_id == p.id))
    if wanted:
        conn.execute(sa.insert(rpt), [{"resource_provider_id": p.id, "trait_id": t.id}
                                      for t in wanted])
    new_gen = providers.bump_generation(conn, p)
    changes.record(conn, "traits", [p.uuid])
    return ProviderTraits(tuple(wanted), new_gen)
