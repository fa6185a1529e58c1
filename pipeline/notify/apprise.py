"""Notifications through apprise: escalations, freezes and (optionally) successes.

Each configured apprise URL (Slack, Discord, ntfy, e-mail, Matrix, a generic
``json://`` webhook, ...) is a channel. A send never raises and never holds up
the pipeline. With an outbox (the daemon), ``notify`` writes the notification
to the store and the outbox delivers it, retrying across restarts
(``pipeline.notify.outbox``). Without one (tools, tests), it sends on a
background thread and retries a bounded number of times. Every send or
give-up is a ``notify`` run event that names the channel by scheme and host
only (``pipeline.notify.channels``).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from pipeline.config.settings import NotifySettings
from pipeline.core.events import EventSink
from pipeline.core.masking import mask
from pipeline.notify.channels import describe_channel, parse_urls
from pipeline.notify.outbox import Outbox, OutboxStore
from pipeline.store.outbox import NotificationDraft

if TYPE_CHECKING:
    import apprise

Kind = Literal["escalation", "freeze", "success", "recovered"]

log = logging.getLogger(__name__)

# apprise's ``NotifyType`` values. apprise itself is imported at the first send: a
# daemon that never sends (or not yet) does not carry it in memory.
# "recovered" answers an earlier escalation (a tracker answers again): always sent.
_TYPES: dict[str, str] = {
    "escalation": "failure",
    "freeze": "warning",
    "success": "success",
    "recovered": "success",
}

_load_lock = threading.Lock()
_loaded = False


def _load_plugins() -> ModuleType:
    """Load apprise's plugins once, hiding the DeprecationWarning some of them raise on import.

    apprise 1.9+ imports the stdlib ``imghdr`` for its e-mail plugin, which
    warns on Python 3.11/3.12; the warning is apprise's, not ours.
    """
    global _loaded
    import apprise

    with _load_lock:
        if not _loaded:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                apprise.Apprise.instantiate("json://localhost")
            _loaded = True
    return apprise


class Notifier:
    """Sends notifications to every configured apprise URL: through ``store``'s outbox
    when one is given, else directly in the background."""

    def __init__(
        self,
        settings: NotifySettings,
        *,
        store: OutboxStore | None = None,
        background: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.outbox = Outbox(settings, store, deliver) if store is not None else None
        self.background = background
        self.sleep = sleep
        self._threads: list[threading.Thread] = []

    def notify(
        self,
        title: str,
        body: str,
        *,
        kind: Kind,
        events: EventSink,
        run_id: int | None = None,
        key: str | None = None,
    ) -> None:
        """Send to every channel; returns at once (unless ``background=False``), never raises.

        The URLs are resolved (so registered for masking) before the title and
        body are masked: a message never carries a secret, a channel's own included.
        With an outbox the notification is in the store when this returns, ``run_id``
        ties it to the run whose page shows it until it is delivered, and a ``key``
        already recorded queues nothing (``OutboxMixin.add_notification``).
        """
        if kind == "success" and not self.settings.notify_success:
            return
        try:
            urls = parse_urls(self.settings.urls.resolve())
        except OSError as exc:
            _record(events, f"notification URLs unreadable: {type(exc).__name__}", {})
            return
        if not urls:
            _record(events, f"{kind} not sent: no notification channels configured", {"kind": kind})
            return
        title, body = mask(title), mask(body)
        if self.outbox is not None:
            self._enqueue(NotificationDraft(kind, title, body, run_id, key), urls, events)
        else:
            self._send_now(urls, NotificationDraft(kind, title, body, run_id), events)

    def _send_now(self, urls: Sequence[str], draft: NotificationDraft, events: EventSink) -> None:
        """Without an outbox: send on a background thread (or this one), retrying a little."""

        def job() -> None:
            self._send_all(urls, draft.title, draft.body, draft.kind, events)

        if not self.background:
            job()
            return
        thread = threading.Thread(target=job, name=f"notify-{draft.kind}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _enqueue(self, draft: NotificationDraft, urls: Sequence[str], events: EventSink) -> None:
        assert self.outbox is not None
        try:
            channels = self.outbox.enqueue(draft, urls)
        except Exception as exc:  # the database is away: say so, never raise
            log.error("notification %r could not be queued: %s", draft.title, exc)
            _record(events, f"{draft.kind} not queued: {type(exc).__name__}", {"ok": False})
            return
        if not channels:
            return  # queued before, under the same key
        names = ", ".join(c.name for c in channels)
        _record(events, f"{draft.kind} queued for {names}", {"kind": draft.kind, "queued": True})

    def start(self) -> None:
        """Start delivering the outbox (a no-op without one)."""
        if self.outbox is not None:
            self.outbox.start()

    def stop(self) -> None:
        if self.outbox is not None:
            self.outbox.stop()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait for sends in flight (shutdown, tests); True when all are done."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _send_all(
        self, urls: Sequence[str], title: str, body: str, kind: str, events: EventSink
    ) -> None:
        for url in urls:
            try:
                self._send_one(url, title, body, kind, events)
            except Exception as exc:  # a notifier must never take the daemon down
                _record(
                    events,
                    f"{kind} to {describe_channel(url)} crashed: {type(exc).__name__}",
                    {"kind": kind, "ok": False},
                )

    def _send_one(self, url: str, title: str, body: str, kind: str, events: EventSink) -> None:
        channel = describe_channel(url)
        attempts = self.settings.retries + 1
        problem = ""
        for attempt in range(1, attempts + 1):
            ok, problem = deliver(url, title, body, kind)
            if ok:
                _record(
                    events,
                    f"{kind} sent to {channel}",
                    {"kind": kind, "channel": channel, "ok": True, "attempts": attempt},
                )
                return
            if attempt < attempts:
                self.sleep(self.settings.retry_delay_s)
        _record(
            events,
            f"{kind} to {channel} failed after {attempts} attempts: {problem}",
            {"kind": kind, "channel": channel, "ok": False, "attempts": attempts},
        )


def deliver(url: str, title: str, body: str, kind: str) -> tuple[bool, str]:
    """Send one message to one apprise URL: (delivered, what went wrong)."""
    library = _load_plugins()
    sender: apprise.Apprise = library.Apprise()
    if not sender.add(url):
        return False, "not a valid apprise URL"
    try:
        notify_type = library.NotifyType(_TYPES[kind])
        sent = bool(sender.notify(title=title, body=body, notify_type=notify_type))
    except Exception as exc:
        return False, type(exc).__name__
    return sent, "" if sent else "the channel refused the message or did not answer"


def _record(events: EventSink, message: str, data: Mapping[str, object]) -> None:
    """Append a ``notify`` event; a sink that fails (the run ended) must not stop sends."""
    try:
        events("notify", message, data)
    except Exception:
        pass
