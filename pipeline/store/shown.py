"""A column type for names people read: cut to fit, never refused.

Who labelled an issue, wrote it, asked for a run or froze a repo comes from a
forge, a comment, the CLI or the API, and is only ever shown. A forge may allow
longer names than the column holds (GitLab: 255 characters), and PostgreSQL
refuses a value longer than a ``String(N)`` column where SQLite keeps it whole;
so such a value is cut to the column with a visible marker, on either engine,
instead of failing the write (an issue never queued, a retry refused).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

CUT = "…"


def cut_to(value: str, most: int) -> str:
    """``value``, or its start and ``CUT`` in ``most`` characters if it is longer."""
    return value if len(value) <= most else value[: most - len(CUT)] + CUT


class ShownName(TypeDecorator[str]):
    """``String(length)`` whose longer values are cut to it with a marker (``cut_to``)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        most: int | None = getattr(self.impl_instance, "length", None)
        return cut_to(value, most) if value is not None and most else value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return value if value is None else str(value)
