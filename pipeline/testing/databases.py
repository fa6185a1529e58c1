"""Databases for tests and benchmarks: the test PostgreSQL server, fresh databases on either
engine, and stores opened on them with the schema current.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.store import Store

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_url() -> str:
    """The test server's URL: ``PIPELINE_TEST_POSTGRES_URL`` or the local default."""
    return os.environ.get("PIPELINE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


def psycopg_dsn(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as psycopg takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://")


def postgres_problem(url: str | None = None) -> str | None:
    """None when the PostgreSQL server answers, else why not (one line)."""
    try:
        import psycopg

        with psycopg.connect(psycopg_dsn(url or postgres_url()), connect_timeout=3):
            return None
    except Exception as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextmanager
def fresh_postgres(prefix: str = "afk_test", server: str | None = None) -> Iterator[str]:
    """A new empty database on the PostgreSQL server, dropped (connections and all) afterwards."""
    import psycopg

    server = server or postgres_url()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = psycopg_dsn(server)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_database(engine: str, root: Path, prefix: str = "afk_test") -> Iterator[str]:
    """A new empty database on ``engine`` (sqlite: a file under ``root``; postgresql)."""
    if engine == "sqlite":
        yield f"sqlite:///{root / 'history.db'}"
        return
    with fresh_postgres(prefix) as url:
        yield url


@contextmanager
def open_store(database_url: str, repos: Iterable[str] = ()) -> Iterator[Store]:
    """A store on ``database_url`` with the schema current and ``repos`` enrolled; closed after."""
    store = Store(database_url)
    try:
        store.upgrade()
        for name in repos:
            store.ensure_repo(name)
        yield store
    finally:
        store.close()
