"""Small helpers shared by the store modules."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection


def utcnow() -> datetime:
    # Stored naive, in UTC, like Placement.
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def insert_ignore(conn: Connection, table: sa.Table, rows: list[dict[str, object]]) -> None:
    """INSERT rows, silently skipping those that hit a unique constraint."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    conn.execute(dialect.insert(table).on_conflict_do_nothing(), rows)


def get_or_create_id(conn: Connection, table: sa.Table, column: str, value: str) -> int:
    """Id of the row whose `column` is `value`, inserting it if missing (race-safe)."""
    col = table.c[column]
    found = conn.execute(sa.select(table.c.id).where(col == value)).scalar()
    if found is not None:
        return int(found)
    insert_ignore(conn, table, [{column: value}])
    return int(conn.execute(sa.select(table.c.id).where(col == value)).scalar_one())
