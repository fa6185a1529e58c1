"""What a database error means, in words that send an operator the right way.

"Unavailable" is said of a connection or an operational problem only (the
server is down, refused the login, the file is locked). A value the database
refused (too long for its column, not a number, out of range) says so, naming
the column and its limit where they can be told: SQLite ignores ``String(N)``
lengths, so such a value fails on PostgreSQL only and must not read as an outage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)

_VARCHAR = re.compile(r"character varying\((\d+)\)")
# SQLAlchemy's suffixes on a bound parameter named after its column: name_1, name_m0.
_BIND = re.compile(r"_(m?\d+)$")


def describe_db_error(exc: BaseException) -> str | None:
    """What went wrong, one line to follow "database <url> ", else None (not a database
    error): "unavailable: ..." for a connection or operational error, "refused a value: ..."
    for a data error, "refused the change: ..." for a broken constraint, "error: ..." else."""
    if not isinstance(exc, DBAPIError):
        return None
    detail = _first_line(exc)
    if isinstance(exc, OperationalError | InterfaceError):
        return f"unavailable: {detail}"
    if isinstance(exc, DataError):
        return f"refused a value: {detail}{_where(exc, detail)}"
    if isinstance(exc, IntegrityError):
        return f"refused the change: {detail}"
    return f"error: {detail}"


def _first_line(exc: DBAPIError) -> str:
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _where(exc: DBAPIError, detail: str) -> str:
    """ " (column X of table T)" when psycopg names it; for a value too long for its
    column, which PostgreSQL does not name, the statement's parameters that are."""
    diag = getattr(exc.orig, "diag", None)
    column, table = getattr(diag, "column_name", None), getattr(diag, "table_name", None)
    if column:
        return f" (column {column}" + (f" of table {table})" if table else ")")
    limit = _VARCHAR.search(detail)
    if limit is None:
        return ""
    most = int(limit.group(1))
    narrow = _columns_of_width(most)
    found = sorted(
        f"{name} ({len(value)} characters)"
        for params in _parameter_sets(exc.params)
        for name, value in params.items()
        if isinstance(value, str) and len(value) > most and _BIND.sub("", name) in narrow
    )
    unique = list(dict.fromkeys(found))
    return f" ({', '.join(unique)}; at most {most})" if unique else f" (at most {most})"


def _columns_of_width(most: int) -> set[str]:
    """The names of the schema's ``String(most)`` columns (bound parameters bear them)."""
    from pipeline.store.models import Base

    return {
        column.name
        for table in Base.metadata.tables.values()
        for column in table.columns
        if getattr(column.type, "length", None) == most
    }


def _parameter_sets(params: object) -> list[Mapping[str, object]]:
    if isinstance(params, Mapping):
        return [params]
    if isinstance(params, list | tuple):
        return [p for p in params if isinstance(p, Mapping)]
    return []
