"""PostgreSQL pooled connections: a server that dropped them is noticed before use."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from pipeline.store import Store
from pipeline.store import engine as engine_module


def _kill_backends_of(url: str, victim: Store) -> int:
    """Terminate every server backend of ``victim``'s database but our own."""
    with victim.engine.connect() as conn:
        database = conn.execute(text("SELECT current_database()")).scalar_one()
    admin = create_engine(engine_module.normalise_url(url))
    try:
        with admin.connect() as conn:
            killed = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"
                ),
                {"db": database},
            ).scalar_one()
    finally:
        admin.dispose()
    return int(killed)


def test_connections_dropped_by_the_server_are_replaced_unseen(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the server drops every pooled connection (a restart), the next read works:
    an idle pooled connection is pinged and replaced, not handed out dead."""
    store = Store(postgres_url)
    try:
        store.upgrade()
        store.ensure_repo("alpha")
        assert _kill_backends_of(postgres_url, store) >= 1
        monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.0)
        assert [repo.name for repo in store.list_repos()] == ["alpha"]
    finally:
        store.close()


def test_a_connection_back_a_moment_ago_is_used_as_is(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the idle window a pooled connection goes straight to its statement (a ping
    would double the round trips of a one-statement claim or finish): one that died in
    that window fails that one call and is replaced for the next."""
    store = Store(postgres_url)
    try:
        store.upgrade()
        store.ensure_repo("alpha")
        monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)
        assert _kill_backends_of(postgres_url, store) >= 1
        with pytest.raises(OperationalError):
            store.list_repos()
        assert [repo.name for repo in store.list_repos()] == ["alpha"]
    finally:
        store.close()
