"""Column types whose values may be longer than the column: names and keys.

Names people read are cut to fit, never refused:

Who labelled an issue, wrote it, asked for a run or froze a repo comes from a
forge, a comment, the CLI or the API, and is only ever shown. A forge may allow
longer names than the column holds (GitLab: 255 characters), and PostgreSQL
refuses a value longer than a ``String(N)`` column where SQLite keeps it whole;
so such a value is cut to the column with a visible marker, on either engine,
instead of failing the write (an issue never queued, a retry refused).

Keys that say an effect was done (``side_effects.key``) hold a slug and a forge's
user name, and may be longer too; one is kept as its start and a digest of the
whole, so it still names one effect alone and finds itself on every engine.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

CUT = "…"


def cut_to(value: str, most: int) -> str:
    """``value``, or its start and ``CUT`` in ``most`` characters if it is longer."""
    return value if len(value) <= most else value[: most - len(CUT)] + CUT


def fitted_key(value: str, most: int) -> str:
    """``value``, or its start, ``#`` and its SHA-256 in ``most`` characters if longer."""
    if len(value) <= most:
        return value
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
    return f"{value[: most - len(digest) - 1]}#{digest}"


class _Fitted(TypeDecorator[str]):
    """``String(length)`` whose longer values are made to fit it by ``fit``."""

    impl = String
    cache_ok = True

    @staticmethod
    def fit(value: str, most: int) -> str:
        raise NotImplementedError

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        most: int | None = getattr(self.impl_instance, "length", None)
        return self.fit(value, most) if value is not None and most else value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return value if value is None else str(value)


class ShownName(_Fitted):
    """``String(length)`` whose longer values are cut to it with a marker (``cut_to``)."""

    cache_ok = True
    fit = staticmethod(cut_to)


class FittedKey(_Fitted):
    """``String(length)`` whose longer values are kept as ``fitted_key`` (writes and lookups)."""

    cache_ok = True
    fit = staticmethod(fitted_key)
