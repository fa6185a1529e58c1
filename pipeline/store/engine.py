"""Engines for SQLite (embedded default) and PostgreSQL (scale-out).

SQLite runs in WAL mode with a busy timeout, and every write transaction
starts with ``BEGIN IMMEDIATE`` so that two processes never both read and then
fail to upgrade to a write lock. The pysqlite driver's own transaction
handling is switched off so that SQLAlchemy's ``begin`` emits our BEGIN.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError

from pipeline.core.errors import ConfigError
from pipeline.core.printable import well_formed

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A pooled PostgreSQL connection idle this long is pinged before use (_postgres_engine).
PING_AFTER_IDLE_S = 1.0
# The server ends a session that sits this long inside a transaction without a statement
# (_limit_stalled_sessions). Every transaction here is a few statements with no waiting in
# between, so only a stopped or wedged process gets there, and its row locks must not stop
# every other replica's sweep.
STALLED_TRANSACTION_MS = 15_000
_IDLE_SINCE = "afk_idle_since"
_WRITE = "afk_write"


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and use the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def make_engine(url: str) -> Engine:
    """An engine for ``url``; raises ConfigError naming what is wrong with it."""
    url = normalise_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"database_url: not a database URL: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, parsed.database)
    if parsed.get_backend_name() == "postgresql":
        return _postgres_engine(url)
    raise ConfigError(
        f"database_url: unsupported database {parsed.get_backend_name()!r}; "
        "use sqlite:///PATH or postgresql://USER@HOST/DB"
    )


def _postgres_engine(url: str) -> Engine:
    """A pooled engine whose connections are checked before use only after sitting idle.

    A connection back in the pool for less than ``PING_AFTER_IDLE_S`` was
    working a moment ago and is used as is; an older one is pinged first, and
    replaced if the server has gone away meanwhile (a restart, a killed
    backend). Pinging every checkout would double the round trips of a
    one-statement claim or finish.
    """
    engine = create_engine(url, pool_size=5, max_overflow=10)
    event.listen(engine, "connect", _limit_stalled_sessions)
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _ping_if_idle)
    event.listen(engine, "before_cursor_execute", _well_formed_params, retval=True)
    return engine


def _limit_stalled_sessions(dbapi_connection: Any, _record: Any) -> None:
    """A process stopped (SIGSTOP, a paused VM) between two statements of a transaction
    holds its row locks for as long as its connection lives, and a sweep that would hand
    its run to another replica waits on them. The server ends such a session after
    ``STALLED_TRANSACTION_MS``; the stopped process, once resumed, finds its lease gone."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"SET idle_in_transaction_session_timeout = {STALLED_TRANSACTION_MS}")
    finally:
        cursor.close()
    dbapi_connection.commit()


def _well_formed_params(
    _conn: Connection,
    _cursor: Any,
    statement: str,
    parameters: Any,
    _context: Any,
    _executemany: bool,
) -> tuple[str, Any]:
    """Parameters with every NUL (PostgreSQL only) and every lone surrogate replaced by
    U+FFFD: PostgreSQL text cannot hold NUL, no database takes text that is not UTF-8, and
    agents' output and tracker text may carry either (JSON escapes half a surrogate pair)."""
    nul = _conn.dialect.name == "postgresql"  # SQLite stores NUL as it is
    return statement, scrub_text(parameters, nul=nul)


def scrub_text(value: Any, *, nul: bool = True) -> Any:
    """``value`` (a string, or a structure of them) as text every database stores."""
    if isinstance(value, str):
        if nul and "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        return well_formed(value)
    if isinstance(value, dict):
        return {scrub_text(key, nul=nul): scrub_text(item, nul=nul) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub_text(item, nul=nul) for item in value)
    return value


def _mark_idle(_dbapi_connection: Any, record: Any) -> None:
    record.info[_IDLE_SINCE] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    since = record.info.get(_IDLE_SINCE)
    if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
        return
    try:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("SELECT 1")
        finally:
            cursor.close()
        if not dbapi_connection.autocommit:
            dbapi_connection.rollback()  # the ping's implicit transaction
    except Exception as exc:  # the pool replaces this connection and tries another
        raise DisconnectionError(f"pooled connection lost: {exc}") from exc


def _sqlite_engine(url: str, database: str | None) -> Engine:
    if database and database != ":memory:":
        path = Path(database)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"database_url: cannot create {path.parent}: {exc.strerror}"
            ) from None
    engine = create_engine(
        url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "before_cursor_execute", _well_formed_params, retval=True)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


@contextlib.contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A write transaction: ``BEGIN IMMEDIATE`` on SQLite, plain on PostgreSQL."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE: True})
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (deferred on SQLite: takes no write lock)."""
    with engine.connect() as conn, conn.begin():
        yield conn


def db_now(conn: Connection) -> datetime:
    """The database's clock as naive UTC: leases and deadlines are measured on it.

    On SQLite the database is this host, so its clock is the host's. On
    PostgreSQL every replica reads the server's clock, so replicas with skewed
    clocks still agree on who holds a lease.
    """
    if conn.dialect.name == "postgresql":
        value = conn.execute(text("SELECT clock_timestamp() AT TIME ZONE 'UTC'")).scalar_one()
        assert isinstance(value, datetime)
        return value
    return datetime.now(UTC).replace(tzinfo=None)


def is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
