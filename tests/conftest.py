"""Shared fixtures: databases on SQLite and PostgreSQL, an in-process client, servers."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from strato.api.app import create_app
from strato.config import Settings
from strato.store.db import Database
from strato.store.migrate import upgrade

PG_ADMIN_URL = os.environ.get("STRATO_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement latest"}


def _pg_admin() -> sa.Engine:
    return sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")


def pg_url(name: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tpl") / "template.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    db.dispose()
    return path


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test copies (CREATE DATABASE ... TEMPLATE)."""
    name = f"strato_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}"')
    db = Database(pg_url(name))
    upgrade(db)
    db.dispose()
    yield name
    with admin.connect() as c:
        c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


def make_sqlite_url(template: Path, tmp_path: Path) -> str:
    path = tmp_path / "zone.db"
    shutil.copy(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def pg_db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    template = request.getfixturevalue("pg_template")
    name = f"strato_t_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    yield pg_url(name)
    with admin.connect() as c:
        c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture
def pg_locale_db_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database whose default collation is a
    language's (ICU en-US: punctuation before letters and digits, case second),
    as a server initialised with en_US.UTF-8 makes them."""
    name = f"strato_loc_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.exec_driver_sql(f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu "
                          "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    db = Database(pg_url(name))
    upgrade(db)
    db.dispose()
    yield pg_url(name)
    with admin.connect() as c:
        c.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture
def sqlite_db_url(sqlite_template: Path, tmp_path: Path) -> str:
    return make_sqlite_url(sqlite_template, tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh, migrated database URL, once per backend."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_db_url"))
    return str(request.getfixturevalue("pg_db_url"))


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database(db_url)
    yield db
    db.dispose()


@pytest.fixture
def sqlite_database(sqlite_db_url: str) -> Iterator[Database]:
    db = Database(sqlite_db_url)
    yield db
    db.dispose()


def _client(db: Database) -> TestClient:
    app = create_app(Settings(db_url=db.url), db=db, migrate=False)
    return TestClient(app, headers=ADMIN, raise_server_exceptions=False)


@pytest.fixture
def client(sqlite_database: Database) -> Iterator[TestClient]:
    """In-process API client on SQLite, admin token, latest microversion."""
    with _client(sqlite_database) as c:
        yield c


@pytest.fixture
def any_client(database: Database) -> Iterator[TestClient]:
    """Like `client`, once on SQLite and once on PostgreSQL."""
    with _client(database) as c:
        yield c
