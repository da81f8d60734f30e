"""The `strato` command: serve, db upgrade, demo."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import logging.config
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from fastapi import FastAPI
from rich.markup import escape

from strato import logs, trace
from strato.cli import consoles
from strato.config import Settings
from strato.model.location import LocationError, canonical_location, canonical_tags
from strato.store.db import Database, default_sqlite_url
from strato.tls import Tls

# Click's plain help, not Typer's rich panels: those cut long option names
# ("--summary-interv…") at 80 columns.
app = typer.Typer(help="Strato: distributed, hierarchical resource scheduler and placement "
                       "service.", no_args_is_help=True, rich_markup_mode=None)
db_app = typer.Typer(help="Database schema management.", no_args_is_help=True,
                     rich_markup_mode=None)
app.add_typer(db_app, name="db")
console = consoles.console(stderr=True)
# Its lines (what is wrong, what to do) are one line each however long: a
# path or URL in them is not cut at the terminal's width.
console.soft_wrap = True


def _version(value: bool) -> None:
    if value:
        import strato
        print(f"strato {strato.__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version,
                                       is_eager=True, help="Print the version and exit.")
          ) -> None:
    """Strato: distributed, hierarchical resource scheduler and placement service."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _given(ctx: typer.Context | None, name: str) -> bool:
    """Whether the option `name` was on the command line (not from a
    variable, a config file or its default)."""
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return getattr(source, "name", None) == "COMMANDLINE"


def _db_url(db: str | None, data_dir: str | None, ctx: typer.Context | None = None) -> str:
    # --data-dir on the command line beats a STRATO_DB in the environment.
    url = None if data_dir and _given(ctx, "data_dir") and not _given(ctx, "db") \
        else db or os.environ.get("STRATO_DB")
    if not url:
        try:
            # Absolute, so the URL said at start-up ("database=sqlite:///...")
            # names the file wherever the zone was started from.
            url = default_sqlite_url(Path(data_dir).expanduser().absolute() if data_dir
                                     else None)
        except OSError as exc:
            console.print(f"[red]cannot create the data directory[/] "
                          f"{exc.filename or data_dir}: {exc.strerror}; pass --data-dir or "
                          "--db with a writable path")
            raise typer.Exit(1) from None
    # The usual spellings of a PostgreSQL URL, with the driver Strato ships.
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            url = "postgresql+psycopg://" + url[len(prefix):]
    _check_db_url(url)
    return url


_DB_FORMS = "sqlite:///PATH (sqlite:////tmp/z.db is /tmp/z.db) or postgresql://USER@HOST/DBNAME"


def _check_db_url(url: str) -> None:
    """A --db that names no database Strato can use ends in one line (exit 2),
    not in SQLAlchemy's traceback: a bare path, `sqlite:/x.db`, another
    database (mysql://) or a driver that is not installed."""
    import sqlalchemy as sa
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        hint = ""
        if "://" not in url and not url.startswith("sqlite:"):
            hint = (f"; for a SQLite file at that path: --db "
                    f"sqlite:///{Path(url).expanduser().absolute()} (or --data-dir DIR)")
        console.print(f"[red]invalid --db[/] {url!r}: not a database URL; write "
                      f"{_DB_FORMS}{hint}", soft_wrap=True)
        raise typer.Exit(2) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        # The schema would be made in one in-memory database and the zone
        # would serve another, empty one.
        console.print(f"[red]invalid --db[/] {url}: a zone's SQLite database is a file; "
                      "write sqlite:///PATH or pass --data-dir DIR", soft_wrap=True)
        raise typer.Exit(2)
    if backend not in ("sqlite", "postgresql"):
        console.print(f"[red]invalid --db[/] {_redact(url)}: Strato keeps a zone in SQLite or "
                      f"PostgreSQL, not {backend}; write {_DB_FORMS}", soft_wrap=True)
        raise typer.Exit(2)
    try:
        parsed.get_dialect().import_dbapi()
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        console.print(f"[red]invalid --db[/] {_redact(url)}: its driver "
                      f"{parsed.drivername!r} cannot be loaded ({escape(str(exc))}); the "
                      "driver Strato "
                      "ships is postgresql+psycopg:// (or write postgresql://)",
                      soft_wrap=True)
        raise typer.Exit(2) from None


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _check_port(host: str, port: int) -> None:
    """One clear line, before anything starts, when the address is taken (or
    is not one of this machine's)."""
    import errno
    import socket
    if not 0 <= port <= 65535:
        console.print(f"[red]invalid --port[/] {port}: 0 to 65535")
        raise typer.Exit(2)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as exc:
            console.print(f"[red]cannot listen on {host}:{port}[/]: {exc.strerror}; give "
                          "--host an address or name of this machine")
            raise typer.Exit(2) from None
        except OSError as exc:
            hint = ("give --host an address of this machine" if exc.errno in (
                errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
                else "pick another --port or stop what uses it")
            console.print(f"[red]cannot listen on {host}:{port}[/]: {exc.strerror}; {hint}")
            raise typer.Exit(1) from None


def _own_url(scheme: str, host: str, port: int) -> str:
    """The URL this zone answers at (an IPv6 address in brackets)."""
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


# A --rejoin-after below this is said at start: shorter than a parent's
# usual summary refresh, with room for a busy one.
REJOIN_WARN_S = 15.0


def _rejoin_warning(rejoin_after: float) -> str | None:
    if rejoin_after >= REJOIN_WARN_S:
        return None
    return (f"--rejoin-after {rejoin_after:g}: a parent asks for this zone's summary every "
            "5 s by default (its --summary-interval), slower when busy: this zone may "
            f"register again while it is registered; {REJOIN_WARN_S:g} s or more is safe "
            "(default 60)")


def _check_child_options(advertise_url: str | None, scheme: str, host: str,
                         port: int) -> None:
    """What the parent would refuse at registration, after start-up and in the
    log only (the zone then serves alone): said now, exit 2."""
    from strato.zone.protocol import zone_url
    url = advertise_url or _own_url(scheme, host, port)
    try:
        zone_url(url)
    except ValueError as exc:
        what = "--advertise-url" if advertise_url else "the URL made of --host and --port"
        console.print(f"[red]invalid {what}[/] {url!r}: {escape(str(exc))} (the parent calls "
                      "this zone there; e.g. --advertise-url http://10.0.0.5:8780)")
        raise typer.Exit(2) from None


_LOCK: Any = None  # the lock file of the SQLite database this process serves
# Set once the port is bound and "serving" said: from then on the lock file
# stays when the process ends (as it always has), else it goes if this
# process made it (a --db naming a file that is not a database, say).
_SERVING = False


def _lock_sqlite(url: str) -> None:
    """One server per SQLite file: a second `strato serve` on the same file
    (two zones sharing a database by mistake) ends in one line (exit 1). The
    lock is the kernel's (flock): it goes with the process, kill -9 too. A
    lock file this process made is removed if it ends before serving."""
    global _LOCK
    if not url.startswith("sqlite:///") or url == "sqlite:///:memory:":
        return
    import atexit
    import fcntl

    path = Path(url[len("sqlite:///"):]).expanduser().resolve()
    if not path.parent.is_dir():
        return  # _prepare_database says what is wrong
    name = f"{path}.lock"
    while True:
        try:
            fd, made = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), True
        except FileExistsError:
            fd, made = os.open(name, os.O_RDWR | os.O_CREAT, 0o600), False
        lock = os.fdopen(fd, "r+")  # held for the process's life
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o600)  # made by an earlier version: the pid is nobody else's
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            console.print(f"[red]{path} is already served[/] by {holder}: one strato serve "
                          "per SQLite file (give each zone its own --db, or use PostgreSQL "
                          "with --workers)", soft_wrap=True)
            raise typer.Exit(1) from None
        try:
            current = os.stat(name).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        # Removed, after we opened it, by a server that ended before serving:
        # a lock on that file locks nothing; take the file there now.
        lock.close()
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    _LOCK = lock
    if made:
        atexit.register(_drop_lock, name, lock)


def _drop_lock(name: str, lock: Any) -> None:
    """At exit: the lock file this process made goes, unless it served."""
    if not _SERVING:
        with contextlib.suppress(OSError):
            os.unlink(name)  # (still locked: nobody takes the file being removed)
        lock.close()


def _owner_only(path: Path) -> None:
    """A zone's database holds its children's credentials: readable by its
    owner only. New files (the database, its WAL and shared-memory files) are
    made so by the umask; files made by an earlier version are tightened."""
    os.umask(0o077)
    try:
        with path.open("rb") as f:
            if f.read(16) not in (b"", b"SQLite format 3\x00"):
                return  # not a database (a --db naming another file): left as it is
    except OSError:
        pass  # not there yet, or not readable: said when it is opened
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if p.exists() and p.stat().st_uid == os.getuid():
                p.chmod(0o600)
        except OSError:
            pass  # not ours to change: the operator's choice


def _interruptibly(work: Callable[..., Any], *args: Any) -> Any:
    """`work(*args)` in a thread of its own, this (main) thread waiting for it
    in short joins: Ctrl-C is seen at once, where SQLite's wait for a database
    another process holds (up to 60 s) kept it from Python until it ended."""
    import threading

    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = work(*args)
        except BaseException as exc:  # (typer.Exit too: raised here, below)
            done["error"] = exc

    worker = threading.Thread(target=run, name="strato-start", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in done:
        raise done["error"]
    return done.get("value")


def _prepare_database(url: str, create: bool) -> str | None:
    """Migrate the schema; the revision it had before (None: an empty
    database). A database that cannot be used ends in one line saying what to
    do (exit 1), not a traceback: `serve` and `db upgrade` alike."""
    import sqlalchemy as sa

    from strato.store.migrate import current_revision, upgrade
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///"):]).expanduser().resolve()
        where = path.parent
        if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
            console.print(f"[red]cannot use {url}[/]: the directory {where} does not exist "
                          "or is not writable; pass --data-dir or --db with a writable path")
            raise typer.Exit(1)
        _owner_only(path)
    database = Database(url)
    try:
        try:
            before = current_revision(database)
            upgrade(database)
        except sa.exc.OperationalError as exc:
            if url.startswith("postgresql") and _pg_missing(url):
                name = sa.engine.make_url(url).database
                if not create:
                    console.print(f"[red]database {name!r} does not exist[/] at "
                                  f"{_redact(url)}: create it (createdb {name}) or pass "
                                  "--create-db")
                    raise typer.Exit(1) from None
                _pg_create(url)
                database.dispose()
                database = Database(url)
                before = None
                upgrade(database)
                console.print(f"created database {name!r}")
            else:
                first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
                console.print(f"[red]cannot use the database[/] {_redact(url)}: "
                              f"{escape(first)}")
                raise typer.Exit(1) from None
        except sa.exc.DatabaseError as exc:
            # (not OperationalError: a file that is not a SQLite database, say)
            first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            console.print(f"[red]cannot use the database[/] {_redact(url)}: "
                          f"{escape(first)}", soft_wrap=True)
            raise typer.Exit(1) from None
        except sa.exc.ArgumentError as exc:
            console.print(f"[red]invalid --db[/] {_redact(url)}: {escape(str(exc))}")
            raise typer.Exit(2) from None
    finally:
        database.dispose()
    return before


def _children_in(url: str) -> list[str]:
    """The names of the child zones registered in the database at `url`."""
    from strato.store.children import list_children
    database = Database(url)
    try:
        with database.read() as conn:
            return [c.name for c in list_children(conn)]
    finally:
        database.dispose()


def _pg_admin_url(url: str) -> Any:
    import sqlalchemy as sa
    return sa.engine.make_url(url).set(database="postgres")


def _pg_missing(url: str) -> bool:
    """The server answers and has no database of that name."""
    import sqlalchemy as sa
    name = sa.engine.make_url(url).database
    engine = sa.create_engine(_pg_admin_url(url))
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                {"n": name}).first() is None
    except sa.exc.SQLAlchemyError:
        return False  # the server itself is not reachable: another message
    finally:
        engine.dispose()


def _pg_create(url: str) -> None:
    import sqlalchemy as sa
    name = sa.engine.make_url(url).database or ""
    engine = sa.create_engine(_pg_admin_url(url), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            quoted = conn.dialect.identifier_preparer.quote(name)
            conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
    finally:
        engine.dispose()


# As a request's weigher.class_weights (model/schedule.py): 0 to this.
MOST_CLASS_WEIGHT = 1e6


def _check_class_weights(weights: dict[str, float]) -> None:
    """ValueError naming what is wrong with serve's --class-weights: a class
    that is neither a standard one nor a CUSTOM_ name (a typo, VCPUS, would
    weigh nothing, silently; a request naming it is a 400), or a weight out
    of a request's range (0 to 1e6)."""
    from strato.model.names import is_custom_name, is_standard_resource_class

    unknown = [rc for rc in weights
               if not (is_standard_resource_class(rc) or is_custom_name(rc))]
    if unknown:
        raise ValueError(f"unknown resource class(es): {', '.join(unknown)} (a standard "
                         "class such as VCPU, MEMORY_MB, DISK_GB, or CUSTOM_...)")
    out = {rc: w for rc, w in weights.items() if not 0 <= w <= MOST_CLASS_WEIGHT}
    if out:
        raise ValueError("a weight is 0 to 1000000: "
                         + ", ".join(f"{rc}={w:g}" for rc, w in out.items()))


INTERRUPTED = 130  # as a shell reports a command Ctrl-C stopped (128 + SIGINT)


def _interruptible(command: Callable[..., None]) -> Callable[..., None]:
    """Ctrl-C while `strato serve` starts (options checked, the schema
    migrated, the application built, before uvicorn takes the signal) ends in
    one line and exit 130; Typer's own handling exits 130 without a word. Once
    serving, Ctrl-C is a graceful stop (uvicorn's), exit 0."""
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]: strato serve stopped before it was "
                          "serving")
            raise typer.Exit(INTERRUPTED) from None
    return run


@app.command(short_help="Run a zone server (one zone of a tree, or a zone alone).")
@_interruptible
def serve(
    ctx: typer.Context,
    config: str = typer.Option(None, "--config", envvar="STRATO_CONFIG",
                               help="A TOML file of these settings (named as the options "
                               "are); options and STRATO_* variables override it. "
                               "strato config show prints what is in effect."),
    db: str = typer.Option(None, envvar="STRATO_DB", help="Database URL: "
                           "sqlite:////abs/path.db or postgresql://user@host/dbname. "
                           "Default: strato.db in --data-dir."),
    data_dir: str = typer.Option(None, envvar="STRATO_DATA_DIR",
                                 help="The directory of the default SQLite file, strato.db "
                                 "(made if missing; one per zone). Default: "
                                 "$XDG_DATA_HOME/strato, else ~/.local/share/strato."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8780, help="Port to listen on."),
    auth_token: str = typer.Option(None, envvar="STRATO_AUTH_TOKEN",
                                   help="Admin token clients must send as X-Auth-Token. "
                                   "Without one the server runs in development mode "
                                   "(Placement noauth2 behaviour) on loopback only."),
    workers: int = typer.Option(1, min=1, help="Server processes (PostgreSQL only for >1)."),
    log_level: str = typer.Option("warning", help="Log level of the server's own lines "
                                  "(access lines are logged at info)."),
    log_format: str = typer.Option("text", help="text or json (one JSON object a line)."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log",
                                    envvar="STRATO_ACCESS_LOG",
                                    help="A line per HTTP request (at info)."),
    stale_after: float = typer.Option(90.0, envvar="STRATO_STALE_AFTER", min=1.0,
                                      help="Seconds without a report after which a provider "
                                      "that has an agent is stale (excluded from new "
                                      "placements)."),
    weigher: str = typer.Option(None, envvar="STRATO_WEIGHER",
                                help="How allocation candidates are ranked: spread (most "
                                "free room first) or pack. Default: spread."),
    class_weights: str = typer.Option(None, envvar="STRATO_CLASS_WEIGHTS",
                                      help="Per resource class weight in the ranking, e.g. "
                                      "VCPU=2,MEMORY_MB=1 (others 1; CLASS:WEIGHT "
                                      "works too): a standard class or CUSTOM_..., "
                                      "0 to 1000000, as in a request's weigher."),
    randomize_candidates: bool = typer.Option(None, envvar="STRATO_RANDOMIZE_CANDIDATES",
                                              help="Break ranking ties randomly instead of "
                                              "by provider uuid."),
    max_candidates: int = typer.Option(None, envvar="STRATO_MAX_CANDIDATES",
                                       help="Stop building allocation candidates after this "
                                       "many (Placement's max_allocation_candidates): at "
                                       "least 1, or -1 for no cap (the default)."),
    max_combinations: int = typer.Option(
        None, envvar="STRATO_MAX_COMBINATIONS",
        help="Most combinations of nested providers one request may examine when it "
        "builds candidates (bounds its time and memory; what was found by then is the "
        "answer). Default: 100000, about a second."),
    zone: str = typer.Option("local", envvar="STRATO_ZONE",
                             help="This zone's name in the zone tree: 1-63 letters, digits, "
                             "'-', '_' or '.', starting with a letter or digit."),
    parent: str = typer.Option(None, envvar="STRATO_PARENT",
                               help="URL of the parent zone to register with at start-up."),
    parent_token: str = typer.Option(None, envvar="STRATO_PARENT_TOKEN",
                                     help="Token to send to the parent zone."),
    advertise_url: str = typer.Option(None, help="URL the parent should call this zone at "
                                      "(default http://HOST:PORT)."),
    location_prefix: str = typer.Option(None, help="Where this zone is, e.g. 'dfw' or "
                                        "'dfw/room1': parents prune by it."),
    tag: list[str] = typer.Option([], "--tag", help="A tag every provider of this zone "
                                  "has (repeatable), e.g. --tag hipaa."),
    summary_interval: float = typer.Option(5.0, min=0.1, help="Seconds between refreshes of the "
                                           "children's summaries."),
    rejoin_after: float = typer.Option(
        60.0, min=1.0, envvar="STRATO_REJOIN_AFTER",
        help="With --parent: seconds without a call from the parent (it asks for this "
        "zone's summary every few seconds) after which this zone registers again, in case "
        "the parent lost its record of it (a database restored or started afresh)."),
    child_timeout: float = typer.Option(5.0, min=0.1, help="Most seconds one call to a child zone "
                                        "may take (less when the request has less left) "
                                        "before the child is skipped and probed."),
    request_timeout: float = typer.Option(30.0, min=0.1, help="A schedule request's whole "
                                          "budget at the zone a client asked (its deadline "
                                          "unless the client sets an earlier one)."),
    hold_ttl: float = typer.Option(30.0, min=0.5, help="Seconds a held part of a cross-zone "
                                   "placement lives unless confirmed."),
    schedule_concurrency: int = typer.Option(
        1, min=1, max=64, envvar="STRATO_SCHEDULE_CONCURRENCY",
        help="Schedule requests planned at once on this zone's own providers, per "
        "process (others queue; their claims overlap and share commits)."),
    cors_allowed_origin: list[str] = typer.Option(
        [], "--cors-allowed-origin", help="An origin allowed to make CORS requests "
        "(repeatable); none: no CORS, as Placement without [cors] allowed_origin."),
    cors_allow_header: list[str] = typer.Option(
        [], "--cors-allow-header", help="A header CORS requests may send (repeatable)."),
    policy: str = typer.Option("legacy", envvar="STRATO_POLICY",
                               help="Placement's policy defaults: legacy (its default), "
                               "secure (new defaults only) or open (any authenticated "
                               "caller)."),
    policy_file: str = typer.Option(
        None, envvar="STRATO_POLICY_FILE",
        help="An operator's policy file (Placement's YAML format, read by oslo.policy): "
        "its rules replace --policy's defaults; read again when it changes."),
    create_db: bool = typer.Option(False, "--create-db", help="Create the PostgreSQL "
                                   "database named in --db if it does not exist."),
    ledger_commit: str = typer.Option(
        "sync", envvar="STRATO_LEDGER_COMMIT",
        help="sync (default): a request's answer at a zone with children waits "
        "for the disk before it is sent (its parts never wait: those lost with "
        "the machine are found at the children on start-up). async: the answer "
        "does not wait either (it survives the process dying, and the machine "
        "dying after 0.1 s); claims on providers always wait. See "
        "docs/operations.md."),
    max_header_bytes: int = typer.Option(
        64 * 1024, envvar="STRATO_MAX_HEADER_BYTES",
        help="Most bytes of a request's line and headers (431 past it)."),
    max_headers: int = typer.Option(100, envvar="STRATO_MAX_HEADERS",
                                    help="Most header lines in a request (431 past it)."),
    header_timeout: float = typer.Option(
        10.0, envvar="STRATO_HEADER_TIMEOUT",
        help="Seconds a request's headers may take to arrive (408, closed); a "
        "connection that sends nothing is closed after this long too."),
    body_timeout: float = typer.Option(
        30.0, envvar="STRATO_BODY_TIMEOUT",
        help="Seconds a request body may pause before the connection is closed."),
    min_body_rate: int = typer.Option(
        1024, envvar="STRATO_MIN_BODY_RATE",
        help="Bytes a second a request body must average: it has --body-timeout "
        "seconds, plus one per this many bytes sent (408, closed)."),
    max_connections: int = typer.Option(
        1000, envvar="STRATO_MAX_CONNECTIONS",
        help="Open connections (and requests at work) per process; past it, 503."),
    metrics_token: str = typer.Option(
        None, envvar="STRATO_METRICS_TOKEN",
        help="Put GET /metrics behind this token (Authorization: Bearer TOKEN, as "
        "Prometheus sends it, or X-Auth-Token); default: open, as /healthz."),
    registration_token: str = typer.Option(
        None, envvar="STRATO_REGISTRATION_TOKEN",
        help="A token child zones register with (their --parent-token): it may register "
        "a zone and nothing else, so children hold no admin rights here."),
    link_token: str = typer.Option(
        None, envvar="STRATO_LINK_TOKEN",
        help="The token this zone gives its parent to call it with, in place of "
        "--auth-token: placements, claims, cancels of the parent's own requests, "
        "summaries and the Placement calls it routes below; it may list this zone's "
        "children, not change them."),
    keystone_url: str = typer.Option(
        None, envvar="STRATO_KEYSTONE_URL",
        help="Validate X-Auth-Token with this Keystone (e.g. http://keystone:5000/v3), "
        "as Placement does: the token's user, project and roles meet Placement's "
        "policy. --auth-token, if set too, stays an admin token. Needs pip install "
        "'strato[keystone]'."),
    keystone_user: str = typer.Option(None, envvar="STRATO_KEYSTONE_USER",
                                      help="This zone's service user in Keystone."),
    keystone_password: str = typer.Option(None, envvar="STRATO_KEYSTONE_PASSWORD",
                                          help="Its password."),
    keystone_project: str = typer.Option("service", envvar="STRATO_KEYSTONE_PROJECT",
                                         help="Its project."),
    keystone_domain: str = typer.Option("Default", envvar="STRATO_KEYSTONE_DOMAIN",
                                        help="The domain of the user and project."),
    token_cache_seconds: float = typer.Option(
        300.0, min=0, envvar="STRATO_TOKEN_CACHE_SECONDS",
        help="How long a token Keystone validated is trusted without asking again "
        "(never past its expiry)."),
    tls_cert: str = typer.Option(
        None, envvar="STRATO_TLS_CERT",
        help="This zone's certificate (PEM): serve https, and show it to the zones it "
        "calls."),
    tls_key: str = typer.Option(None, envvar="STRATO_TLS_KEY",
                                help="The key of --tls-cert (PEM)."),
    tls_ca: str = typer.Option(
        None, envvar="STRATO_TLS_CA",
        help="A CA (PEM): mutual TLS. Clients must show a certificate it signed, and "
        "the zones this one calls are verified against it."),
    audit_log: str = typer.Option(
        None, envvar="STRATO_AUDIT_LOG",
        help="Write every write request (who, project, roles, route, request id, "
        "outcome) as a JSON line to this file (made 0600; reopened after logrotate), "
        "or - for standard error. Default: none."),
    trace_exporter: str = typer.Option(
        "off", "--trace", envvar="STRATO_TRACE",
        help="OpenTelemetry traces: off (default), otlp (to OTEL_EXPORTER_OTLP_ENDPOINT, "
        "default http://localhost:4318) or console; needs pip install 'strato[trace]'. "
        "A trace follows a request through every zone (W3C traceparent)."),
    sqlite_synchronous: str = typer.Option(
        "FULL", envvar="STRATO_SQLITE_SYNCHRONOUS",
        help="SQLite's durability: FULL (default: every commit is on disk before it is "
        "answered; survives power loss) or NORMAL (survives a crash of the process, "
        "not of the machine; no fsync per commit). See docs/operations.md."),
) -> None:
    """Run a Strato zone server (a zone of a zone tree, or a standalone one)."""
    import uvicorn

    from strato.api.app import create_app
    from strato.api.server import GuardedHttp, Limits
    from strato.engine.service import EngineConfig, parse_class_weights

    url = _db_url(db, data_dir, ctx)
    if log_level.upper() not in LOG_LEVELS:
        console.print(f"[red]invalid --log-level[/]: {log_level} "
                      f"({', '.join(LOG_LEVELS).lower()})")
        raise typer.Exit(2)
    if log_format not in logs.FORMATS:
        console.print(f"[red]invalid --log-format[/]: {log_format} (text or json)")
        raise typer.Exit(2)
    if policy not in ("legacy", "secure", "open"):
        console.print(f"[red]invalid --policy[/]: {policy} (legacy, secure or open)")
        raise typer.Exit(2)
    if policy_file is not None:
        from strato.api.policy import PolicyFile, PolicyMode

        try:
            rules = PolicyFile(policy_file, PolicyMode(policy))
        except ValueError as exc:
            console.print(f"[red]invalid --policy-file[/]: {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        if rules.unknown:
            console.print(f"[yellow]--policy-file names rules this zone does not have[/]: "
                          f"{', '.join(rules.unknown)}", soft_wrap=True)
    try:
        weights = None if class_weights is None else parse_class_weights(class_weights)
        if weights is not None:
            _check_class_weights(weights)
    except ValueError as exc:
        console.print(f"[red]invalid --class-weights[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        # Fail here, with the reason, rather than in every worker at start-up.
        EngineConfig.from_env(weigher=weigher, class_weights=weights,
                              randomize=randomize_candidates, max_candidates=max_candidates,
                              max_combinations=max_combinations)
    except ValueError as exc:
        console.print(f"[red]invalid ranking option[/]: {escape(str(exc))}")
        raise typer.Exit(2) from None
    try:
        location_prefix = canonical_location(location_prefix)  # type: ignore[assignment]
        tag = canonical_tags(tag)
    except LocationError as exc:
        console.print(f"[red]invalid zone metadata[/]: {escape(str(exc))}")
        raise typer.Exit(2) from None
    from strato.api.routes.zone import _ZONE_NAME as REGISTERED_NAME
    if not re.match(REGISTERED_NAME, zone):
        # A parent refuses it at registration (in the log, after start-up),
        # and so would one that adds this zone by hand later; the ids of the
        # parts this zone sends (`…@zone#…`) could not be read back.
        console.print(f"[red]invalid --zone[/] {zone!r}: 1-63 letters, digits, '-', '_' or "
                      "'.', starting with a letter or digit (e.g. dfw or dfw-r1)",
                      soft_wrap=True)
        raise typer.Exit(2)
    if keystone_url is not None:
        if not _is_http_url(keystone_url) or not keystone_user or not keystone_password:
            lacking = [what for what, ok in (
                (f"--keystone-url must be an http(s) URL, not {keystone_url!r}",
                 _is_http_url(keystone_url)),
                ("--keystone-user (STRATO_KEYSTONE_USER) is missing", keystone_user),
                ("--keystone-password (STRATO_KEYSTONE_PASSWORD) is missing",
                 keystone_password)) if not ok]
            console.print("[red]invalid Keystone options[/]: " + escape("; ".join(lacking))
                          + " (Strato checks tokens with that service user)", soft_wrap=True)
            raise typer.Exit(2)
        try:
            import keystoneauth1  # noqa: F401
        except ImportError:
            console.print("[red]--keystone-url needs keystoneauth1[/]: pip install "
                          "'strato[keystone]'")
            raise typer.Exit(2) from None
    if auth_token is not None and not auth_token.strip():
        # ("--auth-token $TOKEN" with the variable unset): not development mode.
        console.print("[red]invalid --auth-token[/]: it is empty; give a token, or leave the "
                      "option out for development mode (loopback only)")
        raise typer.Exit(2)
    if auth_token is None and keystone_url is None and not _is_loopback(host):
        console.print(f"[red]refusing to listen on {host} without --auth-token[/]: "
                      "development mode (no token) is for loopback only")
        raise typer.Exit(2)
    if link_token is not None:
        from strato.zone.protocol import TOKEN_PATTERN

        if not re.match(TOKEN_PATTERN, link_token) or link_token in (auth_token,
                                                                     registration_token):
            console.print("[red]invalid --link-token[/]: it must be printable (it goes into "
                          "a header) and differ from --auth-token and --registration-token",
                          soft_wrap=True)
            raise typer.Exit(2)
    if ledger_commit not in ("sync", "async"):
        console.print(f"[red]invalid --ledger-commit[/]: {ledger_commit} (sync or async)")
        raise typer.Exit(2)
    sqlite_synchronous = sqlite_synchronous.upper()
    if sqlite_synchronous not in ("FULL", "NORMAL"):
        console.print(f"[red]invalid --sqlite-synchronous[/]: {sqlite_synchronous} "
                      "(FULL or NORMAL)")
        raise typer.Exit(2)
    multiproc = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiproc and not (Path(multiproc).is_dir() and os.access(multiproc, os.W_OK)):
        console.print(f"[red]invalid PROMETHEUS_MULTIPROC_DIR[/]: {multiproc} is not a "
                      "writable directory (make it, empty, before each start; or unset it "
                      "and strato serve --workers N makes its own)", soft_wrap=True)
        raise typer.Exit(2)
    if audit_log and audit_log != "-":
        where = Path(audit_log).expanduser().resolve()
        if not where.parent.is_dir() or not os.access(where.parent, os.W_OK) or (
                where.exists() and not os.access(where, os.W_OK)):
            console.print(f"[red]invalid --audit-log[/]: cannot write {where} (make its "
                          "directory, or give the user running strato the right to write "
                          "there)", soft_wrap=True)
            raise typer.Exit(2)
    try:
        tls = Tls.of(tls_cert, tls_key, tls_ca)
    except ValueError as exc:
        console.print(f"[red]invalid TLS option[/]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    scheme = "https" if tls is not None else "http"
    if trace_exporter not in trace.EXPORTERS:
        console.print(f"[red]invalid --trace[/]: {trace_exporter} (off, otlp or console)")
        raise typer.Exit(2)
    try:
        trace.configure(trace_exporter)
    except trace.TraceUnavailable as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    limits = Limits(max_header_bytes=max_header_bytes, max_headers=max_headers,
                    header_timeout=header_timeout, body_timeout=body_timeout,
                    min_body_rate=min_body_rate, max_connections=max_connections)
    try:
        limits.check()
    except ValueError as exc:
        console.print(f"[red]invalid server limit[/]: {escape(str(exc))}")
        raise typer.Exit(2) from None
    limits.export()  # for --workers: each worker's protocol reads them
    GuardedHttp.limits = limits
    if workers > 1 and url.startswith("sqlite"):
        console.print("[red]--workers > 1 needs PostgreSQL[/]")
        raise typer.Exit(2)
    if auth_token is None and keystone_url is None:
        console.print("[yellow]development mode[/]: no --auth-token, accepting noauth2-style "
                      f"tokens on {host} only")
    settings = Settings(db_url=url, auth_token=auth_token, stale_after=stale_after,
                        weigher=weigher, class_weights=weights,
                        randomize_candidates=randomize_candidates,
                        max_candidates=max_candidates, max_combinations=max_combinations,
                        zone_name=zone,
                        parent_url=parent, parent_token=parent_token,
                        advertise_url=advertise_url or _own_url(scheme, host, port),
                        location_prefix=location_prefix, zone_tags=tuple(tag),
                        zone_credential=link_token or auth_token,
                        summary_interval=summary_interval, rejoin_after=rejoin_after,
                        child_timeout=child_timeout, request_timeout=request_timeout,
                        hold_ttl=hold_ttl, schedule_concurrency=schedule_concurrency,
                        cors_allowed_origins=tuple(cors_allowed_origin),
                        cors_allow_headers=tuple(cors_allow_header), policy=policy,
                        sqlite_synchronous=sqlite_synchronous, ledger_commit=ledger_commit,
                        metrics_token=metrics_token, audit_log=audit_log,
                        tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca,
                        keystone_url=keystone_url, keystone_user=keystone_user,
                        keystone_password=keystone_password,
                        keystone_project=keystone_project, keystone_domain=keystone_domain,
                        token_cache_seconds=token_cache_seconds,
                        registration_token=registration_token, link_token=link_token,
                        policy_file=policy_file)
    if parent is not None and not _is_http_url(parent):
        console.print(f"[red]invalid --parent[/]: {parent!r} is not an http:// or https:// "
                      "URL (e.g. http://10.0.0.1:8780)")
        raise typer.Exit(2)
    if port == 0 and parent is not None and not advertise_url:
        console.print("[red]--port 0 with --parent needs --advertise-url[/]: the parent "
                      "would be told to call this zone at port 0")
        raise typer.Exit(2)
    if parent is not None:
        _check_child_options(advertise_url, scheme, host, port)
        said = _rejoin_warning(rejoin_after)
        if said:
            console.print(f"[yellow]{escape(said)}[/]", soft_wrap=True)
    _check_port(host, port)
    # Migrate once, before workers start, so they do not race on it.
    _lock_sqlite(url)
    _interruptibly(_prepare_database, url, create_db)
    if log_format not in logs.FORMATS:
        console.print(f"[red]invalid --log-format[/]: {log_format} (text or json)")
        raise typer.Exit(2)
    log_config = logs.config(log_level, log_format)
    logging.config.dictConfig(log_config)
    if workers > 1:
        if parent or tag or location_prefix:
            console.print("[red]zone tree options need --workers 1[/] (one process per zone)")
            raise typer.Exit(2)
        kids = _children_in(url)
        if kids:
            console.print(f"[red]this zone has child zones ({', '.join(kids[:5])})[/]: a zone "
                          "with children runs --workers 1 (one process per zone)")
            raise typer.Exit(2)
        os.environ["STRATO_DB"] = url
        os.environ["STRATO_WORKERS"] = str(workers)
        if auth_token:
            os.environ["STRATO_AUTH_TOKEN"] = auth_token
        os.environ["STRATO_STALE_AFTER"] = str(stale_after)
        os.environ["STRATO_SCHEDULE_CONCURRENCY"] = str(schedule_concurrency)
        # Workers rebuild Settings from the environment (app_from_env).
        ranking = {"STRATO_WEIGHER": weigher, "STRATO_CLASS_WEIGHTS": class_weights,
                   "STRATO_MAX_CANDIDATES": None if max_candidates is None
                   else str(max_candidates),
                   "STRATO_MAX_COMBINATIONS": None if max_combinations is None
                   else str(max_combinations),
                   "STRATO_RANDOMIZE_CANDIDATES": None if randomize_candidates is None
                   else str(int(randomize_candidates))}
        os.environ.update({k: v for k, v in ranking.items() if v is not None})
        os.environ["STRATO_POLICY"] = policy
        os.environ["STRATO_LEDGER_COMMIT"] = ledger_commit
        os.environ["STRATO_TRACE"] = trace_exporter
        if metrics_token:
            os.environ["STRATO_METRICS_TOKEN"] = metrics_token
        if audit_log:
            os.environ["STRATO_AUDIT_LOG"] = audit_log
        for name, value in (("TLS_CERT", tls_cert), ("TLS_KEY", tls_key), ("TLS_CA", tls_ca),
                            ("KEYSTONE_URL", keystone_url), ("KEYSTONE_USER", keystone_user),
                            ("KEYSTONE_PASSWORD", keystone_password),
                            ("KEYSTONE_PROJECT", keystone_project),
                            ("KEYSTONE_DOMAIN", keystone_domain),
                            ("TOKEN_CACHE_SECONDS", str(token_cache_seconds)),
                            ("REGISTRATION_TOKEN", registration_token),
                            ("LINK_TOKEN", link_token),
                            ("POLICY_FILE", policy_file)):
            if value:
                os.environ[f"STRATO_{name}"] = value
        # Metrics summed over the workers (api/metrics.py): their files go to
        # a directory of this run's own, gone when it stops.
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            import atexit
            import shutil
            import tempfile

            metrics_dir = tempfile.mkdtemp(prefix="strato-metrics-")
            atexit.register(shutil.rmtree, metrics_dir, ignore_errors=True)
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        os.environ["STRATO_CORS_ALLOWED_ORIGINS"] = ",".join(cors_allowed_origin)
        os.environ["STRATO_CORS_ALLOW_HEADERS"] = ",".join(cors_allow_header)
        server_config = uvicorn.Config("strato.cli.main:app_from_env", factory=True, host=host,
                                port=port, workers=workers, log_config=log_config,
                                access_log=access_log, http=GuardedHttp, ws="none",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                                # A worker busy starting (its index) or serving
                                # answers the supervisor's ping late: killed
                                # after uvicorn's 5 s, its connections reset.
                                timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
                                limit_concurrency=limits.max_connections,
                                **(tls.server_options() if tls else {}))
    else:
        server_config = uvicorn.Config(create_app(settings, migrate=False), host=host, port=port,
                                log_config=log_config, access_log=access_log,
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, http=GuardedHttp,
                                ws="none", limit_concurrency=limits.max_connections,
                                **(tls.server_options() if tls else {}))
    _listen_and_serve(server_config, lambda bound: f"strato serving on "
                      f"{_own_url(scheme, host, bound)} database={_redact(url)}")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _listen_and_serve(config: Any, serving: Callable[[int], str]) -> None:
    """Bind the address, say "serving" (only now: the port is ours and
    listening; `serving` is given the bound port, the one --port 0 picked),
    then serve, in one process or in config.workers (as uvicorn.run does,
    with the announcement between the two)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    if config.workers == 1:
        config.load_app()
    server = uvicorn.Server(config=config)
    sock = config.bind_socket()
    sock.listen(config.backlog)  # connections queue from now on (served once started)
    global _SERVING
    _SERVING = True
    console.print(serving(sock.getsockname()[1]))
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    if config.workers == 1 and not server.started:
        raise typer.Exit(3)  # the application did not start: its error is above


# On SIGTERM, requests still at work get this long: a request can have a
# deadline of --request-timeout (30 s); one cut off is undone, by its own
# worker or by recovery at the next start, and its caller retries.
GRACEFUL_SHUTDOWN_S = 5
# How long a --workers worker may take to answer its supervisor's health ping.
WORKER_HEALTHCHECK_S = 30


def app_from_env() -> FastAPI:
    """uvicorn factory for multi-worker serving."""
    from strato.api.app import create_app
    from strato.engine.service import parse_class_weights

    env = os.environ
    trace.configure(env.get("STRATO_TRACE", "off"))
    weights = env.get("STRATO_CLASS_WEIGHTS")
    randomize = env.get("STRATO_RANDOMIZE_CANDIDATES")
    max_candidates = env.get("STRATO_MAX_CANDIDATES")
    return create_app(Settings(
        db_url=env["STRATO_DB"], auth_token=env.get("STRATO_AUTH_TOKEN"),
        workers=int(env.get("STRATO_WORKERS", 1)),
        stale_after=float(env.get("STRATO_STALE_AFTER", 90.0)),
        schedule_concurrency=int(env.get("STRATO_SCHEDULE_CONCURRENCY", 1)),
        weigher=env.get("STRATO_WEIGHER"),
        class_weights=None if weights is None else parse_class_weights(weights),
        randomize_candidates=None if randomize is None
        else randomize.lower() in ("1", "true", "yes"),
        max_candidates=None if max_candidates is None else int(max_candidates),
        cors_allowed_origins=tuple(o for o in env.get("STRATO_CORS_ALLOWED_ORIGINS",
                                                      "").split(",") if o),
        cors_allow_headers=tuple(h for h in env.get("STRATO_CORS_ALLOW_HEADERS",
                                                    "").split(",") if h),
        policy=env.get("STRATO_POLICY", "legacy"),
        ledger_commit=env.get("STRATO_LEDGER_COMMIT", "sync"),
        metrics_token=env.get("STRATO_METRICS_TOKEN") or None,
        audit_log=env.get("STRATO_AUDIT_LOG") or None,
        tls_cert=env.get("STRATO_TLS_CERT") or None, tls_key=env.get("STRATO_TLS_KEY") or None,
        tls_ca=env.get("STRATO_TLS_CA") or None,
        keystone_url=env.get("STRATO_KEYSTONE_URL") or None,
        keystone_user=env.get("STRATO_KEYSTONE_USER") or None,
        keystone_password=env.get("STRATO_KEYSTONE_PASSWORD") or None,
        keystone_project=env.get("STRATO_KEYSTONE_PROJECT", "service"),
        keystone_domain=env.get("STRATO_KEYSTONE_DOMAIN", "Default"),
        token_cache_seconds=float(env.get("STRATO_TOKEN_CACHE_SECONDS", 300.0)),
        registration_token=env.get("STRATO_REGISTRATION_TOKEN") or None,
        link_token=env.get("STRATO_LINK_TOKEN") or None,
        policy_file=env.get("STRATO_POLICY_FILE") or None),
        migrate=False)


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    db: str = typer.Option(None, help="Database URL (default: SQLite in the data directory)."),
    data_dir: str = typer.Option(None, help="Where the default SQLite file lives."),
    create_db: bool = typer.Option(False, "--create-db", help="Create the PostgreSQL "
                                   "database if it does not exist."),
) -> None:
    """Create or upgrade the schema to the latest revision.

    Exit 1 when the database cannot be used (a directory that does not exist,
    a server that does not answer), 2 for a --db that is not a database URL,
    as strato serve."""
    from strato.store.migrate import head_revision

    url = _db_url(db, data_dir, ctx)
    # As `serve` does it (its file readable by its owner only: the children's
    # credentials live there).
    before = _prepare_database(url, create_db)
    console.print(f"database {_redact(url)}: {before or 'empty'} -> {head_revision()}")


@app.command(short_help="A seven-zone tree on loopback: schedule a workload, show it.")
def demo(
    providers: int = typer.Option(2000, min=4, help="Hosts, spread over the four cells "
                                  "(at least one each)."),
    requests: int = typer.Option(500, min=1, help="Schedule requests sent to the root."),
    clients: int = typer.Option(8, min=1, help="Concurrent clients."),
    keep: bool = typer.Option(False, help="Keep the demo's data directory (databases, logs)."),
) -> None:
    """Start a tree of seven zones on loopback, schedule a mixed workload at the root,
    kill a cell half way, print what happened and check the invariants."""
    from strato.cli.demo import run_demo

    sys.exit(run_demo(providers=providers, requests=requests, keep=keep, clients=clients))


# `strato agent` and `strato providers` live in their own modules (the agent must
# not import the server).
from strato.cli import config as config_file  # noqa: E402
from strato.cli.agent import agent as _agent_command  # noqa: E402
from strato.cli.children import children_app as _children_app  # noqa: E402
from strato.cli.providers import providers_app as _providers_app  # noqa: E402
from strato.cli.release import release as _release_command  # noqa: E402
from strato.cli.schedule import explain as _explain_command  # noqa: E402
from strato.cli.schedule import schedule as _schedule_command  # noqa: E402
from strato.cli.tree import tree as _tree_command  # noqa: E402
from strato.sim.cli import sim as _sim_command  # noqa: E402

# Short help for `strato --help`: each docstring's first sentence is cut there.
app.command("agent", short_help="Report this host to a zone: inventory, location, "
            "heartbeats.")(_agent_command)
app.add_typer(_providers_app, name="providers")
app.command("schedule", short_help="Place and claim consumers in one call.")(_schedule_command)
app.command("explain", short_help="Where a request would go, and what each stage "
            "removed.")(_explain_command)
app.command("release", short_help="Release consumers: delete their allocations.")(
    _release_command)
app.command("tree", short_help="The zone tree: capacity, health, requests in "
            "doubt.")(_tree_command)
app.command("sim", short_help="Simulate a workload: Strato against baselines.")(_sim_command)
app.add_typer(config_file.config_app, name="config")
app.add_typer(_children_app, name="children")


# Repeatable options: Typer would show `--tag <list[str]>`; these say what one takes.
_LIST_METAVARS = {
    "resources": "CLASS=N,...", "resource": "CLASS=N", "reserved": "CLASS=N",
    "reserve": "CLASS=N", "ratio": "CLASS=RATIO", "allocation_ratio": "CLASS=RATIO",
    "class_weight": "CLASS=WEIGHT", "remove_resource": "CLASS", "consumer": "UUID",
    "required": "TRAIT,...", "member_of": "AGGREGATE,...", "affinity": "LEVEL",
    "anti_affinity": "LEVEL", "location": "PATTERN", "tag": "TAG", "forbid_tag": "TAG",
    "trait": "TRAIT", "remove_trait": "TRAIT", "disk_path": "PATH",
    "cors_allowed_origin": "ORIGIN", "cors_allow_header": "HEADER",
}


def _name_list_metavars(command: Any) -> None:
    for param in getattr(command, "params", []):
        if getattr(param, "multiple", False) and param.metavar is None:
            param.metavar = f"<{_LIST_METAVARS.get(param.name or '', 'TEXT')}>"
    for sub in getattr(command, "commands", {}).values():
        _name_list_metavars(sub)


def main() -> None:
    try:
        _main_command()
    except KeyboardInterrupt:  # (in a command, Typer exits 130 itself)
        console.print("[yellow]interrupted[/]")
        raise SystemExit(INTERRUPTED) from None


def _main_command() -> None:
    group = typer.main.get_command(app)
    _name_list_metavars(group)
    args = sys.argv[1:]
    try:
        # Settings from `--config FILE` become the options' defaults, so the
        # command line and the environment still override them.
        defaults = config_file.default_map(args, os.environ, group)
    except config_file.ConfigError as exc:
        console.print(f"[red]invalid configuration[/]: {escape(str(exc))}", soft_wrap=True)
        raise SystemExit(2) from None
    group.main(args=args, prog_name="strato", default_map=defaults)


if __name__ == "__main__":
    main()
