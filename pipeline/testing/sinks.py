"""An event sink and a notifier that record what they are given, for tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.core.events import EventSink


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


@dataclass(frozen=True)
class Sent:
    """One notification a ``RecordingNotifier`` was asked to send."""

    title: str
    body: str
    kind: str
    key: str | None


@dataclass
class RecordingNotifier:
    """Keeps every notification; a keyed one only once, as the outbox queues it."""

    sent: list[Sent] = field(default_factory=list)

    def notify(
        self,
        title: str,
        body: str,
        *,
        kind: str,
        events: EventSink,
        run_id: int | None = None,
        key: str | None = None,
    ) -> None:
        if key is None or key not in {sent.key for sent in self.sent}:
            self.sent.append(Sent(title, body, kind, key))
