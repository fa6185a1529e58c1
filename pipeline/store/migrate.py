"""Alembic migrations, run programmatically (``pipeline db upgrade``, daemon start).

Upgrading is idempotent and safe when several replicas start at once: on
PostgreSQL a transaction-level advisory lock serialises them; on SQLite the
write transaction starts with ``BEGIN IMMEDIATE``.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, text

from pipeline.core.errors import ConfigError
from pipeline.store.engine import write_tx

MIGRATION_LOCK_KEY = 7_316_243_001
# What alembic says at INFO on every start, migrating or not: kept for a debug log only.
_CHATTER = ("Context impl ", "Will assume ")


class _ChatterFilter(logging.Filter):
    """Alembic's "Context impl SQLiteImpl." and "Will assume non-transactional DDL." lines
    (twice at each daemon start) say nothing a user acts on; "Running upgrade" lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        chatter = str(record.msg).startswith(_CHATTER)
        return not chatter or logging.getLogger().isEnabledFor(logging.DEBUG)


logging.getLogger("alembic.runtime.migration").addFilter(_ChatterFilter())


def _script_location() -> str:
    return str(Path(str(resources.files("pipeline.migrations"))))


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", _script_location())
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str | None:
    script = ScriptDirectory(_script_location())
    return script.get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def newer_schema(revision: str | None) -> str | None:
    """Why this release cannot use a database at ``revision``, or None when it can.

    A revision these migrations do not know was written by a newer release (a
    replica upgraded first): this one must not run on it, nor try to migrate it.
    """
    if revision is None:
        return None
    try:
        ScriptDirectory(_script_location()).get_revision(revision)
    except CommandError:
        return (
            f"the database schema is at revision {revision!r}, which this afk-pipeline "
            f"(schema {head_revision()!r}) does not know: a newer release has migrated it. "
            "Install that release here too; a database is never migrated back"
        )
    return None


def schema_problem(engine: Engine) -> str | None:
    """None when the schema is this release's; else what is wrong and what to run."""
    revision = current_revision(engine)
    if revision == head_revision():
        return None
    newer = newer_schema(revision)
    if newer is not None:
        return newer
    return "the schema is missing or out of date; run `pipeline db upgrade` first"


def _refuse_newer(conn: Connection) -> None:
    problem = newer_schema(MigrationContext.configure(conn).get_current_revision())
    if problem is not None:
        raise ConfigError(f"database_url: {problem}")


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; a no-op when it is already there.

    A schema a newer release wrote is refused (``ConfigError``) rather than met with
    alembic's "Can't locate revision" traceback.
    """
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        _refuse_newer(conn)
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    with write_tx(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
