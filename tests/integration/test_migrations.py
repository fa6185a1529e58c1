"""Migrations: alembic head on an empty database matches the models, on both engines."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

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
