"""Alembic environment: runs on the connection the store hands in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from pipeline.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is None:
    engine = config.attributes["engine"]
    with engine.begin() as conn:
        run_migrations(conn)
else:
    run_migrations(connection)
