"""An event sink that records events, for tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class RecordingSink:
    """Keeps every event it is given, in order."""

    events: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)

    def __call__(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        self.events.append((kind, message, dict(data or {})))

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.events]

    def of_kind(self, kind: str) -> list[tuple[str, str, dict[str, object]]]:
        return [event for event in self.events if event[0] == kind]
