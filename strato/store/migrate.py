"""Schema upgrades through Alembic, and the start-up sync of standard names."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from strato.model import names
from strato.store.db import Database
from strato.store.schema import resource_classes, traits

_MIGRATIONS = Path(__file__).parent / "migrations"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(db: Database) -> str | None:
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` and make sure the standard names exist."""
    cfg = _config()
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    sync_standard_names(db)


def sync_standard_names(db: Database) -> None:
    """Insert standard resource classes and traits that the database lacks.

    The lists come from os-resource-classes and os-traits, which grow over
    releases; running this on every start keeps an old database current.
    """
    with db.write() as conn:
        have_rc = {r.name: r.id for r in conn.execute(sa.select(resource_classes))}
        missing_rc = [
            {"id": idx, "name": name}
            for idx, name in enumerate(names.STANDARD_RESOURCE_CLASSES)
            if name not in have_rc
        ]
        if missing_rc:
            conn.execute(sa.insert(resource_classes), missing_rc)
        have_tr = set(conn.execute(sa.select(traits.c.name)).scalars())
        missing_tr = [{"name": n} for n in names.STANDARD_TRAITS if n not in have_tr]
        if missing_tr:
            conn.execute(sa.insert(traits), missing_tr)
