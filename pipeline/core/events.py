"""The run timeline as components see it: a sink they append events to.

Components never write to the store directly for their timeline; the worker
hands them an ``EventSink`` that is fenced on the run's lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class EventSink(Protocol):
    """Append one event to the current run's timeline.

    ``kind`` is a short category (``state``, ``tool``, ``test``, ``setup``,
    ``agent``, ``ci``, ``deploy``, ``notify``, ``publish``, ``log``);
    ``message`` is one human line; ``data`` is small and JSON-serialisable.
    """

    def __call__(
        self, kind: str, message: str, data: Mapping[str, object] | None = None
    ) -> None: ...


class NullSink:
    """An event sink that drops everything (for callers with no run)."""

    def __call__(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        return None
