"""What the CLI says of a database error: "unavailable" only when it is one.

A value PostgreSQL refuses (too long for its ``varchar(N)`` column, out of
range) used to be reported as "database unavailable", sending an operator after
a connection problem. SQLite ignores ``varchar`` lengths, so these are
PostgreSQL's alone.
"""

from __future__ import annotations

import io

import pytest
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from pipeline.cli import history
from pipeline.cli.main import main
from pipeline.store import describe_db_error
from pipeline.store.models import RunRow
from pipeline.testing.databases import open_store

pytestmark = pytest.mark.postgres
TOO_LONG = "value too long for type character varying(200)"


def _refusal(postgres_url: str) -> DBAPIError:
    with open_store(postgres_url) as store, pytest.raises(DBAPIError) as caught:
        store.ensure_repo("r" * 250)
    return caught.value


def test_a_value_too_long_names_its_column_and_limit(postgres_url: str) -> None:
    said = describe_db_error(_refusal(postgres_url))
    assert said == f"refused a value: {TOO_LONG} (name (250 characters); at most 200)"


def test_a_number_out_of_range_is_a_refused_value(postgres_url: str) -> None:
    with open_store(postgres_url, ["alpha"]) as store:
        run = store.enqueue("alpha").run
        with pytest.raises(DBAPIError) as caught, store.engine.begin() as conn:
            conn.execute(update(RunRow).where(RunRow.id == run.id).values(priority=2**40))
    assert describe_db_error(caught.value) == "refused a value: integer out of range"


def test_the_cli_says_refused_not_unavailable(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``main``: exit 1, the value's problem, no word of an outage."""
    refusal = _refusal(postgres_url)

    def refused(*_: object) -> int:
        raise refusal

    monkeypatch.setattr(history, "cmd_repos_list", refused)
    out, err = io.StringIO(), io.StringIO()
    assert main(["repos", "list", "--database-url", postgres_url], out, err) == 1
    said = err.getvalue()
    assert said.startswith("pipeline: database postgresql://") and "unavailable" not in said
    assert f"refused a value: {TOO_LONG} (name (250 characters); at most 200)\n" in said


def test_an_unreachable_server_is_still_unavailable() -> None:
    with pytest.raises(DBAPIError) as caught, open_store("postgresql://u@127.0.0.1:1/none"):
        pass
    assert str(describe_db_error(caught.value)).startswith("unavailable: ")
