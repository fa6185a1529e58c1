"""Wake the claimer when the queue changes, instead of waiting for its tick (ADR 0020).

- PostgreSQL: triggers on ``runs`` (migration 0004) ``NOTIFY afk_runs`` when a
  run becomes claimable or a busy run ends; every replica ``LISTEN``s on its
  own connection, so a run enqueued through any replica wakes all of them.
  The notification is sent at commit, so the claimer always sees the row.
- SQLite (one host, usually one process): a temporary trigger on each of this
  process's connections marks the connection; when the connection goes back to
  the pool, after its commit, the callback runs.

The claim loop's interval tick stays as the fallback: a lost notification, a
dropped listener connection or a run enqueued by another process on SQLite is
picked up at the next tick. While ``quiet()`` holds (the listener is up; on
SQLite, no connection anywhere has committed since the last look, which
``PRAGMA data_version`` on a connection of our own tells without touching a
table) an idle claimer may skip that tick.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event, text

log = logging.getLogger(__name__)

CHANNEL = "afk_runs"
_DIRTY = "afk_queue_changed"
_BUSY = "('preparing', 'implementing', 'testing', 'publishing', 'watching')"
_SQLITE_TRIGGERS = (
    "CREATE TEMP TRIGGER IF NOT EXISTS afk_wake_insert AFTER INSERT ON main.runs "
    "WHEN NEW.state = 'queued' BEGIN SELECT afk_queue_changed(); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS afk_wake_update AFTER UPDATE OF state ON main.runs "
    f"WHEN (NEW.state = 'queued' AND OLD.state <> 'queued') "
    f"OR (OLD.state IN {_BUSY} AND NEW.state NOT IN {_BUSY}) "
    "BEGIN SELECT afk_queue_changed(); END",
)
RECONNECT_S = 1.0
# How long the listener blocks waiting for a notification before it checks for stop
# (``stop`` also wakes it at once through a channel of its own).
LISTEN_TIMEOUT_S = 2.0


class QueueWake:
    """Calls ``callback`` soon after a run is queued or a busy run ends."""

    def __init__(self, engine: Engine, url: str, callback: Callable[[], None]) -> None:
        self.engine = engine
        self.url = url
        self.callback = callback
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._version_conn: sqlite3.Connection | None = None
        self._version: int | None = None
        # ``quiet`` runs on the claim thread and ``stop`` on another: closing the
        # connection while a statement runs on it crashes the interpreter.
        self._version_lock = threading.Lock()
        self._stop_channel = f"afk_wake_stop_{uuid.uuid4().hex[:12]}"

    def start(self) -> None:
        if self.engine.dialect.name == "postgresql":
            self._thread = threading.Thread(target=self._listen, name="queue-wake", daemon=True)
            self._thread.start()
        else:
            event.listen(self.engine, "checkout", self._on_checkout)
            event.listen(self.engine, "checkin", self._on_checkin)
            self._open_version_watch()
            self._listening.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._wake_listener()
            self._thread.join(timeout=5.0)
        elif event.contains(self.engine, "checkout", self._on_checkout):
            event.remove(self.engine, "checkout", self._on_checkout)
            event.remove(self.engine, "checkin", self._on_checkin)
        with self._version_lock:
            if self._version_conn is not None:
                self._version_conn.close()
                self._version_conn = None

    def wait_listening(self, timeout_s: float) -> bool:
        """True once notifications are being received (tests, benchmarks)."""
        return self._listening.wait(timeout_s)

    def quiet(self) -> bool:
        """True when no change can have gone unannounced since the last call.

        PostgreSQL: the listener is up. SQLite: nothing was committed by any
        connection (another process's included). Call from one thread only.
        """
        if self.engine.dialect.name == "postgresql":
            return self._listening.is_set()
        with self._version_lock:
            if self._version_conn is None:
                return False
            try:
                version = int(self._version_conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return False
        unchanged = version == self._version
        self._version = version
        return unchanged

    def _open_version_watch(self) -> None:
        """A connection of our own to the SQLite file, for ``PRAGMA data_version``."""
        database = self.engine.url.database
        if not database or database == ":memory:" or database.startswith("file:"):
            return  # no file another process could change: the tick stays
        try:
            conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
            self._version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            log.warning("queue wake: cannot watch %s for commits (%s)", database, exc)
            return
        self._version_conn = conn

    # -- SQLite: in-process --------------------------------------------------------

    def _on_checkout(self, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if record.info.get("afk_wake_installed"):
            return

        def changed() -> None:
            record.info[_DIRTY] = True

        dbapi_conn.create_function(_DIRTY, 0, changed)
        for statement in _SQLITE_TRIGGERS:
            dbapi_conn.execute(statement)
        record.info["afk_wake_installed"] = True

    def _on_checkin(self, _dbapi_conn: Any, record: Any) -> None:
        if record is not None and record.info.pop(_DIRTY, False):
            self.callback()

    # -- PostgreSQL: LISTEN/NOTIFY -------------------------------------------------

    def _wake_listener(self) -> None:
        """End the listener's wait now rather than at its next timeout (a stop then takes
        milliseconds, not up to ``LISTEN_TIMEOUT_S``); if this fails, the timeout still ends it."""
        if not self._listening.is_set():
            return
        try:
            with self.engine.connect() as conn:
                conn.execute(
                    text("SELECT pg_notify(:channel, '')"), {"channel": self._stop_channel}
                )
                conn.commit()
        except Exception as exc:
            log.debug("queue wake: could not wake the listener to stop (%s)", exc)

    def _listen(self) -> None:
        import psycopg

        dsn = self.url.replace("postgresql+psycopg://", "postgresql://")
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    conn.execute(f"LISTEN {self._stop_channel}")
                    self._listening.set()
                    self.callback()  # anything queued while we were not listening
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=LISTEN_TIMEOUT_S, stop_after=1):
                            if note.channel == CHANNEL:
                                self.callback()
            except psycopg.Error as exc:
                self._listening.clear()
                log.warning("queue wake: listener lost (%s); the claim tick covers it", exc)
                self._stop.wait(RECONNECT_S)
