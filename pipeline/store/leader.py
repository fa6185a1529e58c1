"""Which replica exports the database-wide metrics: the one that holds a lock.

Every replica reads the same database, so if each exported the queue depth,
``sum()`` over replicas would count every queued run once per replica. The
replica holding the metrics lock exports them and the others do not:

- PostgreSQL: a session advisory lock, held on a connection of its own for as
  long as the process lives. A replica that dies, or whose connection drops,
  lets go at once, and the next replica scraped takes the lock.
- SQLite: an exclusive ``flock`` on a file beside the database, released by
  the kernel when the process ends (several processes on one host may share a
  SQLite file). An in-memory database has one process, which leads.

A lock held this way needs a session that outlives a transaction: behind a
pooler in transaction mode (PgBouncer's ``pool_mode = transaction``) two
replicas could both believe they lead; connect the daemon directly.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from pipeline.store.base import StoreBase

log = logging.getLogger(__name__)
# A fixed 64-bit key for pg_try_advisory_lock: "afk-metr" in ASCII.
METRICS_LOCK_KEY = 0x61666B2D6D657472
_MUTEX = threading.Lock()


class LeaderMixin(StoreBase):
    """``hold_metrics_lead``: True while this store's process exports database-wide metrics."""

    _lead_conn: Connection | None = None
    _lead_fd: int | None = None

    def hold_metrics_lead(self) -> bool:
        """Keep the lead if this store holds it, else try to take it; True when it leads.

        Raises the database's error when it cannot be asked.
        """
        with _MUTEX:
            if self.dialect == "postgresql":
                return self._hold_advisory_lock()
            return self._hold_file_lock()

    def release_metrics_lead(self) -> None:
        """Let another replica lead (on close; a process that ends lets go by itself)."""
        if self._lead_conn is not None:
            conn, self._lead_conn = self._lead_conn, None
            try:
                conn.close()
            except SQLAlchemyError as exc:  # the session is gone, and its lock with it
                log.debug("metrics lead: closing the lock's connection: %s", exc)
        if self._lead_fd is not None:
            fd, self._lead_fd = self._lead_fd, None
            os.close(fd)

    def _hold_advisory_lock(self) -> bool:
        if self._lead_conn is not None:
            try:
                self._lead_conn.execute(text("SELECT 1"))
                return True
            except SQLAlchemyError:
                log.warning("metrics lead: lost the database session that held the lock")
                self.release_metrics_lead()
        # A database that does not answer raises: the caller reports it as down.
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            query = text("SELECT pg_try_advisory_lock(:key)")
            taken = bool(conn.execute(query, {"key": METRICS_LOCK_KEY}).scalar())
        except BaseException:
            conn.close()
            raise
        if taken:
            self._lead_conn = conn
        else:
            conn.close()
        return taken

    def _hold_file_lock(self) -> bool:
        if self._lead_fd is not None:
            return True
        path = _lock_path(self.url)
        if path is None:
            return True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lead_fd = fd
        return True


def _lock_path(url: str) -> Path | None:
    """The lock file beside an SQLite database; None for an in-memory one."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    return Path(database + ".metrics-lead")
