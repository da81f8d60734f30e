"""Hot statements run on the DBAPI cursor, inside the caller's transaction.

A claim is a handful of tiny statements. Through SQLAlchemy each one paid
about 100 µs of Python (cache lookup, expanding IN lists, parameter and result
processing) for some 10 µs of database work, so the claim path, and only
it, writes its SQL by hand: the same statements, on the connection (and so
in the transaction) SQLAlchemy already opened. SQL text uses ``?`` for
parameters; on PostgreSQL (psycopg, ``%s``) they are rewritten once per text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import Connection


@lru_cache(maxsize=512)
def _format(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


@lru_cache(maxsize=8)
def _sqlite_stamp(when: datetime) -> str:
    # Timestamps are whole seconds: a claim stamps the same one several times.
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


class Raw:
    """A cursor on `conn`'s DBAPI connection, with the dialect's placeholders."""

    __slots__ = ("cur", "sqlite")

    def __init__(self, conn: Connection) -> None:
        self.sqlite = conn.dialect.name == "sqlite"
        driver = conn.connection.driver_connection
        assert driver is not None
        self.cur = driver.cursor()

    def _sql(self, sql: str) -> str:
        return sql if self.sqlite else _format(sql)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.cur.execute(self._sql(sql), tuple(params))
        return list(self.cur.fetchall())

    def first(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        self.cur.execute(self._sql(sql), tuple(params))
        row = self.cur.fetchone()
        return None if row is None else tuple(row)

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute; the number of rows it changed."""
        self.cur.execute(self._sql(sql), tuple(params))
        return int(self.cur.rowcount)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    def stamp(self, when: datetime) -> Any:
        """A DateTime column's value as SQLAlchemy stores it on this dialect."""
        return _sqlite_stamp(when) if self.sqlite else when

    def close(self) -> None:
        self.cur.close()


def marks(n: int) -> str:
    """``?, ?, ?`` for an IN list of `n` values."""
    return ", ".join("?" * n)
