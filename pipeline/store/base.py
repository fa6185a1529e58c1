"""The store's shared plumbing: engine, transactions, the run-event writer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

from sqlalchemy import Connection, Engine, insert, select, text
from sqlalchemy.exc import OperationalError

from pipeline.core.masking import mask
from pipeline.store.engine import (
    db_now,
    make_engine,
    normalise_url,
    read_tx,
    scrub_text,
    write_tx,
)
from pipeline.store.models import RepoRow, RunEventRow, RunRow

MAX_EVENT_MESSAGE = 4000


def dump_data(data: Mapping[str, object] | None) -> str:
    """Event data as JSON text; anything not serialisable is shown as text. Lone
    surrogates go too: escaped in JSON they would be stored, then break every reader."""
    return json.dumps(scrub_text(dict(data or {}), nul=False), default=str, sort_keys=True)


class StoreBase:
    """Owns the engine; every domain verb lives in a mixin beside this one."""

    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self.engine: Engine = make_engine(self.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def ping(self) -> bool:
        """True when the database answers."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except OperationalError:
            return False

    def now(self) -> datetime:
        """The database clock (naive UTC)."""
        with read_tx(self.engine) as conn:
            return db_now(conn)

    def _write(self) -> Any:
        return write_tx(self.engine)

    def _read(self) -> Any:
        return read_tx(self.engine)

    @staticmethod
    def _append_event(
        conn: Connection,
        run: tuple[int, int],
        kind: str,
        message: str,
        data: Mapping[str, object] | None = None,
        now: datetime | None = None,
    ) -> None:
        """Add an event to the timeline of ``run`` (its id and attempt) in this transaction."""
        run_id, attempt = run
        conn.execute(
            insert(RunEventRow).values(
                run_id=run_id,
                attempt=attempt,
                ts=now or db_now(conn),
                kind=kind,
                # Masked before it is cut, so no piece of a secret survives the cut;
                # the column type masks the data (and everything else) again.
                message=mask(message)[:MAX_EVENT_MESSAGE],
                data_json=dump_data(data),
            )
        )

    @staticmethod
    def _repo_id(conn: Connection, name: str) -> int | None:
        value = conn.execute(select(RepoRow.id).where(RepoRow.name == name)).scalar_one_or_none()
        return int(value) if value is not None else None

    @staticmethod
    def _run_attempt(conn: Connection, run_id: int) -> int:
        value = conn.execute(select(RunRow.attempt).where(RunRow.id == run_id)).scalar_one()
        return int(value)
