"""Config files for test worlds and benchmarks, written through a TOML library.

A world builds its configuration as a plain document (dicts, lists, strings, numbers) and
``write_config`` serialises it, so paths with quotes or backslashes, and any value a test
chooses, are escaped correctly. ``merged`` lays a scenario's changes over a base document.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w


def merged(base: Mapping[str, Any], *changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with each of ``changes`` laid over it, tables merged key by key."""
    out = dict(base)
    for change in changes:
        for key, value in change.items():
            current = out.get(key)
            if isinstance(current, Mapping) and isinstance(value, Mapping):
                out[key] = merged(current, value)
            else:
                out[key] = value
    return out


def write_config(path: Path, document: Mapping[str, Any]) -> Path:
    """Write ``document`` as TOML to ``path`` and return the path."""
    path.write_text(tomli_w.dumps(document), encoding="utf-8")
    return path
