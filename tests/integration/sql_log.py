"""Count the SQL statements an engine sends (the cost tests of polls and claims)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event

WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE")


class StatementLog:
    """Every SQL statement an engine sends while the block runs, in order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[str] = []

    def __enter__(self) -> StatementLog:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.statements.append(statement.strip())

    def count(self, prefix: str | None = None) -> int:
        if prefix is None:
            return len(self.statements)
        return sum(1 for s in self.statements if s.upper().startswith(prefix))

    @property
    def queries(self) -> int:
        """Statements that are not transaction control or the pool's pre-ping."""
        control = ("BEGIN", "COMMIT", "ROLLBACK", "SELECT 1")
        return sum(1 for s in self.statements if not s.upper().startswith(control))

    @property
    def writes(self) -> list[str]:
        return [s for s in self.statements if s.upper().startswith(WRITE_VERBS)]
