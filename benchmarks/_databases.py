"""Throwaway databases for the queue benchmarks: a SQLite file and a PostgreSQL database."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipeline.testing.databases import fresh_postgres

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@contextlib.contextmanager
def temp_postgres(server_url: str) -> Iterator[str]:
    """A fresh database on the server of ``server_url``, dropped afterwards."""
    with fresh_postgres("afk_bench", server_url) as url:
        yield url


@contextlib.contextmanager
def temp_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="afk-bench-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


@contextlib.contextmanager
def temp_database(engine: str, server_url: str | None = None) -> Iterator[str]:
    """A throwaway database for ``engine`` (``sqlite`` or ``postgresql``)."""
    if engine == "sqlite":
        with temp_sqlite() as url:
            yield url
    else:
        with temp_postgres(server_url or DEFAULT_POSTGRES_URL) as url:
            yield url


def engine_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"
