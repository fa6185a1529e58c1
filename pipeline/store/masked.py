"""Column types that mask secrets on the way into the database and out of it.

The store's one choke point for secrets: every free-text column (event
messages and data, run errors and summaries, escalations, comments, freeze
reasons) is declared with one of these types, so whatever verb writes it and
whoever calls that verb, a registered secret (``pipeline.core.masking``) is stored
as ``***``. Reads mask again, for rows written before a secret was configured.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from pipeline.core.masking import has_secrets, mask, mask_data


class MaskedText(TypeDecorator[str]):
    """``Text`` with every registered secret masked."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return mask(value) if value is not None else None

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return mask(value) if value is not None else None


class MaskedString(TypeDecorator[str]):
    """``String(length)`` with every registered secret masked (masking never lengthens)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return mask(value) if value is not None else None

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return mask(value) if value is not None else None


class MaskedJson(MaskedText):
    """JSON text whose every string (keys too) is masked, leaving the document valid."""

    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return mask_json(value) if value is not None else None

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return mask_json(value) if value is not None else None


def mask_json(text: str) -> str:
    """``text`` masked inside its JSON strings; masked as plain text if it is not JSON."""
    if not has_secrets():
        return text
    try:
        document = json.loads(text)
    except ValueError:
        return mask(text)
    masked = mask_data(document)
    if masked == document:
        return text
    return json.dumps(masked, sort_keys=True)
