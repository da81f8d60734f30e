"""Small helpers shared by the store modules."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

T = TypeVar("T")

# The most values one IN list binds: PostgreSQL takes 65,535 bound values in a
# statement, SQLite 32,766 (999 before 3.32); a list from a request body may
# hold hundreds of thousands.
IN_SLICE = 900


def slices(values: Sequence[T], size: int = IN_SLICE) -> Iterator[Sequence[T]]:
    """`values` in pieces of at most `size`, for IN lists."""
    for start in range(0, len(values), size):
        yield values[start:start + size]


def utcnow() -> datetime:
    # Stored naive, in UTC, like Placement.
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def bytewise(conn: Connection, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """`column` to ORDER BY in code point order, as SQLite and Python sort
    (and Placement on MySQL sorts these names): on PostgreSQL collated "C",
    whatever the database's locale (en_US sorts "_" before letters and digits
    and the case second)."""
    return column.collate("C") if conn.dialect.name == "postgresql" else column


def upsert_insert(conn: Connection, table: sa.Table) -> Any:
    """An INSERT into `table` in this connection's dialect, which has
    `on_conflict_do_nothing` and `on_conflict_do_update` (SQLite and
    PostgreSQL spell them alike)."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def insert_ignore(conn: Connection, table: sa.Table, rows: list[dict[str, object]]) -> None:
    """INSERT rows, silently skipping those that hit a unique constraint."""
    if not rows:
        return
    conn.execute(upsert_insert(conn, table).on_conflict_do_nothing(), rows)


def get_or_create_id(conn: Connection, table: sa.Table, column: str, value: str) -> int:
    """Id of the row whose `column` is `value`, inserting it if missing (race-safe)."""
    col = table.c[column]
    found = conn.execute(sa.select(table.c.id).where(col == value)).scalar()
    if found is not None:
        return int(found)
    insert_ignore(conn, table, [{column: value}])
    return int(conn.execute(sa.select(table.c.id).where(col == value)).scalar_one())
