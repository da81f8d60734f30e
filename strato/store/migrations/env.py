"""Alembic environment: runs migrations on the connection the caller hands in."""

from __future__ import annotations

from alembic import context

from strato.store.schema import metadata

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only used by the alembic CLI
    raise RuntimeError("run migrations through `strato db upgrade`")

context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
