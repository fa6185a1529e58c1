"""Effective settings back in the file's shape, for ``pipeline config show``.

The output loads again: a ``SecretRef`` is written as the ``*_env`` / ``*_file``
reference it came from (never resolved), paths absolute, defaults spelled out.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import tomli_w

from pipeline.config.settings import SecretRef, Settings

# Settings fields whose key in the file is another.
_KEYS = {
    "capacity_bytes": "capacity",
    "bwrap_path": "bwrap",
    "source": "from",
    "target": "to",
    "agent_overrides": "agent_options",
}
_PAIRS = frozenset({"env", "agent_overrides"})  # tuples of (key, value): tables in the file


def to_file(settings: Settings) -> dict[str, Any]:
    """The file (a TOML document as data) that loads into ``settings``."""
    data = _table(settings, skip={"source", "trackers", "agents", "repos"})
    http = data["http"]
    host, port = http.pop("listen_host"), http.pop("listen_port")
    http["listen"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    for section in ("trackers", "agents", "repos"):
        items = getattr(settings, section)
        data[section] = {item.name: _table(item, skip={"name"}) for item in items}
    return data


def _table(item: Any, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for field in dataclasses.fields(item):
        if field.name not in skip:
            _put(table, field.name, getattr(item, field.name))
    return table


def _put(table: dict[str, Any], name: str, value: Any) -> None:
    if isinstance(value, SecretRef):
        for part in ("env", "file"):
            if getattr(value, part) is not None:
                table[f"{name}_{part}"] = str(getattr(value, part))
    elif name in _PAIRS:
        inner: dict[str, Any] = {}
        table[_KEYS.get(name, name)] = inner
        for key, item in value:
            _put(inner, key, item)
    elif value is not None:
        table[_KEYS.get(name, name)] = _value(value)


def _value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _table(value)
    if isinstance(value, tuple | list):
        return [_value(item) for item in value]
    return value


def render_json(settings: Settings) -> str:
    return json.dumps(to_file(settings), indent=2) + "\n"


def render_toml(settings: Settings) -> str:
    return tomli_w.dumps(to_file(settings))
