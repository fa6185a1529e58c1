"""Notifications through apprise: escalations, freezes and (optionally) successes.

Each configured apprise URL (Slack, Discord, ntfy, e-mail, Matrix, a generic
``json://`` webhook, ...) is a channel. A send never raises and never holds up
the pipeline: it runs on a background thread, a failing channel is retried a
bounded number of times, and every send or give-up is a ``notify`` run event
that names the channel by scheme and host only — apprise URLs carry their
secrets in the user, password, path and sometimes host, so nothing more is
recorded (and for schemes whose "host" is itself a token, only the scheme).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Literal
from urllib.parse import urlsplit

import apprise

from pipeline.config.settings import NotifySettings
from pipeline.core.events import EventSink
from pipeline.core.masking import mask
from pipeline.core.secret_forms import HOST_SCHEMES

Kind = Literal["escalation", "freeze", "success"]

_TYPES: dict[str, str] = {
    "escalation": apprise.NotifyType.FAILURE,
    "freeze": apprise.NotifyType.WARNING,
    "success": apprise.NotifyType.SUCCESS,
}

_load_lock = threading.Lock()
_loaded = False


def _load_plugins() -> None:
    """Load apprise's plugins once, hiding the DeprecationWarning some of them raise on import.

    apprise 1.9+ imports the stdlib ``imghdr`` for its e-mail plugin, which
    warns on Python 3.11/3.12; the warning is apprise's, not ours.
    """
    global _loaded
    with _load_lock:
        if _loaded:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            apprise.Apprise.instantiate("json://localhost")
        _loaded = True


def describe_channel(url: str) -> str:
    """A channel's name without its secrets: ``scheme://host`` or just ``scheme://``."""
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
    except ValueError:
        return "<unparseable url>"
    if not scheme:
        return "<no scheme>"
    return f"{scheme}://{host}" if scheme in HOST_SCHEMES else f"{scheme}://"


def parse_urls(text: str | None) -> list[str]:
    """Apprise URLs from the secret: one per line; blank lines and ``#`` comments skipped."""
    lines = (line.strip() for line in (text or "").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class Notifier:
    """Sends notifications to every configured apprise URL, in the background."""

    def __init__(
        self,
        settings: NotifySettings,
        *,
        background: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.background = background
        self.sleep = sleep
        self._threads: list[threading.Thread] = []

    def notify(self, title: str, body: str, *, kind: Kind, events: EventSink) -> None:
        """Send to every channel; returns at once (unless ``background=False``), never raises.

        The URLs are resolved (so registered for masking) before the title and
        body are masked: a message never carries a secret, a channel's own included.
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

        def job() -> None:
            self._send_all(urls, title, body, kind, events)

        if not self.background:
            job()
            return
        thread = threading.Thread(target=job, name=f"notify-{kind}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

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
            ok, problem = _deliver(url, title, body, kind)
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


def _deliver(url: str, title: str, body: str, kind: str) -> tuple[bool, str]:
    _load_plugins()
    sender = apprise.Apprise()
    if not sender.add(url):
        return False, "not a valid apprise URL"
    try:
        sent = bool(sender.notify(title=title, body=body, notify_type=_TYPES[kind]))
    except Exception as exc:
        return False, type(exc).__name__
    return sent, "" if sent else "the channel refused the message or did not answer"


def _record(events: EventSink, message: str, data: Mapping[str, object]) -> None:
    """Append a ``notify`` event; a sink that fails (the run ended) must not stop sends."""
    try:
        events("notify", message, data)
    except Exception:
        pass
