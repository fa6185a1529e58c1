"""Migrations: alembic head on an empty database matches the models, on both engines."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from pipeline.cli.main import main
from pipeline.core.errors import ConfigError
from pipeline.store import Store, migrate
from pipeline.store.models import Base


def _diff(store: Store) -> list[object]:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_upgrade_head_matches_models(database_url: str) -> None:
    """`alembic upgrade head` on an empty database yields exactly the models' schema."""
    store = Store(database_url)
    try:
        store.upgrade()
        assert _diff(store) == []
        assert store.schema_current()
    finally:
        store.close()


def test_partial_indexes_exist_after_upgrade(database_url: str) -> None:
    """Both guarantee indexes are created by the migration, as unique indexes."""
    store = Store(database_url)
    try:
        store.upgrade()
        indexes = {ix["name"]: ix for ix in inspect(store.engine).get_indexes("runs")}
        assert indexes["uq_runs_active_issue"]["unique"]
        assert indexes["uq_runs_busy_repo"]["unique"]
    finally:
        store.close()


def test_upgrade_is_idempotent(database_url: str) -> None:
    """Running the upgrade twice changes nothing and raises nothing."""
    store = Store(database_url)
    try:
        store.upgrade()
        store.upgrade()
        assert migrate.current_revision(store.engine) == migrate.head_revision()
    finally:
        store.close()


def test_downgrade_base_removes_every_table(database_url: str) -> None:
    """`downgrade base` works and leaves only alembic's own bookkeeping."""
    store = Store(database_url)
    try:
        store.upgrade()
        migrate.downgrade(store.engine, "base")
        tables = set(inspect(store.engine).get_table_names())
        assert tables <= {"alembic_version"}
        assert migrate.current_revision(store.engine) is None
        store.upgrade()
        assert _diff(store) == []
    finally:
        store.close()


def test_a_schema_a_newer_release_wrote_is_refused_by_name(database_url: str) -> None:
    """After a newer release migrated the database (a replica upgraded first), this release's
    daemon start (`db upgrade`, the same migration step) and its history commands exit 2
    saying so, instead of alembic's traceback or a false 'run `pipeline db upgrade`'."""
    store = Store(database_url)
    try:
        store.upgrade()
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
        with pytest.raises(ConfigError, match=r"0099_from_the_future.*newer release"):
            store.upgrade()
    finally:
        store.close()
    for args in (["db", "upgrade"], ["runs", "list"]):
        out, err = io.StringIO(), io.StringIO()
        status = main([*args, "--database-url", database_url], out, err)
        said = err.getvalue()
        assert status == 2, (args, said)
        assert "a newer release has migrated it" in said
        assert "run `pipeline db upgrade`" not in said


def test_an_upgrade_logs_its_steps_without_alembic_chatter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At INFO, a first upgrade says which migrations ran, not alembic's "Context impl" and
    "Will assume" lines it printed twice at every daemon start; at DEBUG they are there."""
    with caplog.at_level(logging.INFO):
        _upgraded(tmp_path / "a.db")
    said = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("Running upgrade") for line in said), said
    assert not any(line.startswith(("Context impl", "Will assume")) for line in said), said
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        _upgraded(tmp_path / "b.db")
    said = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("Context impl") for line in said), said


def _upgraded(path: Path) -> None:
    store = Store(f"sqlite:///{path}")
    try:
        store.upgrade()
    finally:
        store.close()
