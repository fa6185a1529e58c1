"""Durable delivery: notifications wait in the store's outbox until a channel takes them.

``Notifier.notify`` writes one outbox row per channel and wakes the
deliverer; the deliverer, a thread of the daemon, sends what is due and
records each attempt. A failed attempt is a WARNING log line and counts in
``pipeline_notifications_failed_total``; the row is tried again with
exponential backoff (capped at ``MAX_BACKOFF_S``), across restarts, until it is
delivered or ``GIVE_UP_AFTER_S`` has passed (an ERROR line). While a run has a
notification not delivered, its JSON and dashboard page say so.

Delivery is at least once: a process that dies between the channel's answer
and the store's record sends that row again once its claim lapses.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from pipeline.config.settings import NotifySettings
from pipeline.notify.channels import channel_key, describe_channel, parse_urls
from pipeline.store.outbox import Attempt, Channel, Notification, NotificationDraft

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 600.0
GIVE_UP_AFTER_S = 24 * 3600.0
CLAIM_S = 120.0  # longer than one send may take (apprise's own timeouts are seconds)
POLL_S = 1.0
# With nothing pending the deliverer still looks this often: every row it must send
# is written by this process (which wakes it) or becomes due at a time it reads.
IDLE_POLL_S = 30.0

Send = Callable[[str, str, str, str], tuple[bool, str]]


class OutboxStore(Protocol):
    """The store verbs the outbox uses (``pipeline.store.Store`` has them)."""

    def add_notification(
        self, draft: NotificationDraft, channels: Sequence[Channel]
    ) -> list[int]: ...

    def take_due_notifications(self, claim_s: float, limit: int = 20) -> list[Notification]: ...

    def next_notification_due_s(self) -> float | None: ...

    def record_attempt(self, attempt: Attempt) -> Notification: ...

    def record_event(
        self, run_id: int, kind: str, message: str, data: Mapping[str, object] | None = None
    ) -> None: ...

    def now(self) -> datetime: ...


def backoff_s(base_s: float, attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: doubling from ``base_s``, capped."""
    return min(MAX_BACKOFF_S, max(0.0, base_s) * 2.0 ** max(0, attempts - 1))


class Outbox:
    """Queues notifications in the store and delivers them from a background thread."""

    def __init__(
        self,
        settings: NotifySettings,
        store: OutboxStore,
        send: Send,
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self.settings = settings
        self.store = store
        self.send = send
        self.poll_s = poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enqueue(self, draft: NotificationDraft, urls: Sequence[str]) -> list[Channel]:
        """One row per channel, written before this returns; delivery follows. The
        channels queued: none when ``draft.key`` was queued before."""
        channels = [Channel(describe_channel(url), channel_key(url)) for url in urls]
        if not self.store.add_notification(draft, channels):
            return []
        self._wake.set()
        return channels

    def deliver_due(self) -> int:
        """Try every due row once; how many were delivered."""
        rows = self.store.take_due_notifications(CLAIM_S)
        if not rows:
            return 0
        urls = self._urls()
        return sum(1 for row in rows if self._attempt(row, urls.get(row.channel_key)))

    def _urls(self) -> dict[str, str]:
        try:
            text = self.settings.urls.resolve()
        except OSError as exc:
            log.warning("notifications: channel URLs unreadable: %s", type(exc).__name__)
            return {}
        return {channel_key(url): url for url in parse_urls(text)}

    def _attempt(self, row: Notification, url: str | None) -> bool:
        if url is None:
            ok, problem = False, "the channel is no longer configured"
        else:
            try:
                ok, problem = self.send(url, row.title, row.body, row.kind)
            except Exception as exc:  # a channel must never take the deliverer down
                ok, problem = False, type(exc).__name__
        if ok:
            self._delivered(self.store.record_attempt(Attempt(row.id, ok=True)))
            return True
        retry = None if url is None else self._retry_in(row)
        done = self.store.record_attempt(Attempt(row.id, ok=False, error=problem, retry_in_s=retry))
        self._failed(done, problem, retry)
        return False

    def _retry_in(self, row: Notification) -> float | None:
        age = (self.store.now() - row.created_at).total_seconds()
        if age >= GIVE_UP_AFTER_S:
            return None
        return backoff_s(self.settings.retry_delay_s, row.attempts + 1)

    def _delivered(self, row: Notification) -> None:
        log.info(
            "notification %d (%s%s) delivered to %s after %d attempt(s)",
            row.id,
            row.kind,
            _about(row),
            row.channel,
            row.attempts,
        )
        self._event(row, f"{row.kind} sent to {row.channel}", ok=True)

    def _failed(self, row: Notification, problem: str, retry_in_s: float | None) -> None:
        if retry_in_s is None:
            log.error(
                "notification %d (%s%s) to %s given up after %d attempt(s): %s",
                row.id,
                row.kind,
                _about(row),
                row.channel,
                row.attempts,
                problem,
            )
            self._event(row, f"{row.kind} to {row.channel} undelivered, given up: {problem}")
            return
        log.warning(
            "notification %d (%s%s) to %s failed (attempt %d): %s; next try in %.0f s",
            row.id,
            row.kind,
            _about(row),
            row.channel,
            row.attempts,
            problem,
            retry_in_s,
        )
        if row.attempts == 1:
            self._event(row, f"{row.kind} to {row.channel} failed, will retry: {problem}")

    def _event(self, row: Notification, message: str, *, ok: bool = False) -> None:
        if row.run_id is None:
            return
        data = {"kind": row.kind, "channel": row.channel, "ok": ok, "attempts": row.attempts}
        try:
            self.store.record_event(row.run_id, "notify", message, data)
        except Exception as exc:  # the timeline is a courtesy; the outbox row is the record
            log.warning("notification %d: cannot record a run event: %s", row.id, exc)

    def start(self) -> None:
        """Deliver in the background until ``stop``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="notify-outbox", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = self.poll_s
            try:
                while self.deliver_due() and not self._stop.is_set():
                    pass
                wait = self._idle_wait()
            except Exception as exc:  # the database may be away for a while
                log.warning("notifications: cannot read the outbox: %s", exc)
            self._wake.wait(wait)
            self._wake.clear()

    def _idle_wait(self) -> float:
        """Sleep until the next row is due (``poll_s`` if one is due but was taken
        elsewhere), at most ``IDLE_POLL_S``."""
        due = self.store.next_notification_due_s()
        if due is None:
            return max(self.poll_s, IDLE_POLL_S)
        return self.poll_s if due <= 0 else min(due, max(self.poll_s, IDLE_POLL_S))


def _about(row: Notification) -> str:
    return f", run {row.run_id}" if row.run_id is not None else ""
