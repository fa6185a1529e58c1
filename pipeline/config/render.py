"""Render effective settings for ``pipeline config show``: TOML-like text or JSON.

Secrets appear only as ``SecretRef.describe()`` (``<env NAME>``), never resolved.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from pipeline.config.settings import SecretRef, Settings

# Tuples of named dataclasses shown as tables keyed by name.
_NAMED = frozenset({"trackers", "agents", "repos"})
# Tuples of (key, value) pairs shown as tables.
_PAIRS = frozenset({"env", "agent_overrides"})
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def to_plain(value: Any, name: str = "") -> Any:
    """JSON-ready data: dicts, lists, strings, numbers, booleans and None."""
    if isinstance(value, SecretRef):
        return value.describe()
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        if name in _NAMED:
            return {item.name: _without_name(to_plain(item)) for item in value}
        if name in _PAIRS:
            return {key: to_plain(item) for key, item in value}
        return [to_plain(item) for item in value]
    return value


def _without_name(table: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in table.items() if key != "name"}


def render_json(settings: Settings) -> str:
    return json.dumps(to_plain(settings), indent=2) + "\n"


def render_toml(settings: Settings) -> str:
    lines = _table_lines(to_plain(settings), "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _table_lines(table: dict[str, Any], prefix: str) -> list[str]:
    lines: list[str] = []
    nested: list[tuple[str, Any]] = []
    for key, value in table.items():
        if value is None:
            lines.append(f"# {_key(key)} is unset")
        elif isinstance(value, dict) or _is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        full = f"{prefix}{_key(key)}"
        if isinstance(value, dict):
            inner = _table_lines(value, f"{full}.")
            # A table holding only tables needs no header of its own.
            header = [] if inner and inner[0] == "" else ["", f"[{full}]"]
            lines += [*header, *inner]
        else:
            for item in value:
                lines += ["", f"[[{full}]]", *_table_lines(item, f"{full}.")]
    return lines


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return json.dumps(str(value))
