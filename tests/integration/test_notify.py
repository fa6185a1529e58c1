"""Notifications over real sockets: apprise json:// to a loopback receiver."""

from __future__ import annotations

import threading

import pytest

from pipeline.config.settings import NotifySettings, SecretRef
from pipeline.core.masking import register_secret
from pipeline.notify.apprise import Notifier
from pipeline.testing.ports import free_port
from pipeline.testing.receiver import Receiver
from pipeline.testing.sinks import RecordingSink


def settings(monkeypatch: pytest.MonkeyPatch, *urls: str, retries: int = 2) -> NotifySettings:
    monkeypatch.setenv("AFK_NOTIFY_URLS", "\n".join(urls))
    return NotifySettings(urls=SecretRef(env="AFK_NOTIFY_URLS"), retries=retries, retry_delay_s=0.0)


def test_escalation_reaches_a_json_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    """An apprise json:// URL delivers title and message to the loopback receiver."""
    sink = RecordingSink()
    with Receiver() as receiver:
        notifier = Notifier(settings(monkeypatch, f"json://127.0.0.1:{receiver.port}/afk/hook"))
        notifier.notify(
            "run 3 escalated",
            "conflict in a.py\nresume: pipeline runs retry 3",
            kind="escalation",
            events=sink,
        )
        assert notifier.flush(timeout_s=20)
        (request,) = receiver.received
    assert request.method == "POST" and request.path.startswith("/afk/hook")
    payload = request.json()
    assert isinstance(payload, dict)
    assert payload["title"] == "run 3 escalated"
    assert "pipeline runs retry 3" in payload["message"] and payload["type"] == "failure"
    assert sink.of_kind("notify")[0][2] == {
        "kind": "escalation",
        "ok": True,
        "attempts": 1,
        "channel": "json://127.0.0.1",
    }


def test_failing_channel_is_retried_and_others_still_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A channel answering 500 is retried, then given up; a healthy one still receives."""
    sink = RecordingSink()
    with Receiver(default_status=500) as failing, Receiver() as healthy:
        notifier = Notifier(
            settings(
                monkeypatch,
                f"json://127.0.0.1:{failing.port}/down",
                f"json://127.0.0.1:{healthy.port}/up",
            )
        )
        notifier.notify("repo frozen", "evidence kept", kind="freeze", events=sink)
        assert notifier.flush(timeout_s=30)
        assert len(failing.received) == 3 and len(healthy.received) == 1
    outcomes = [data["ok"] for _, _, data in sink.of_kind("notify")]
    assert outcomes == [False, True]


def test_dead_channel_never_blocks_or_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead channel: notify returns while its retries still wait; the give-up is an event."""
    sink = RecordingSink()
    retrying, release = threading.Event(), threading.Event()

    def held_sleep(seconds: float) -> None:  # the retry wait, held until the test releases it
        retrying.set()
        release.wait(30)

    notifier = Notifier(
        settings(monkeypatch, f"json://127.0.0.1:{free_port()}/dead"), sleep=held_sleep
    )
    notifier.notify("t", "b", kind="escalation", events=sink)
    assert not release.is_set() and sink.of_kind("notify") == []  # returned, nothing given up
    assert retrying.wait(30), "the delivery never reached its first retry"
    release.set()
    assert notifier.flush(timeout_s=30)
    ((_, message, data),) = sink.of_kind("notify")
    assert data["ok"] is False and data["attempts"] == 3 and "failed after 3" in message


def test_secrets_in_a_notification_are_masked_the_channels_own_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Title and body reach the channel masked, also the channel URL's own password."""
    register_secret("SNTL-notify-push-token-5e")
    with Receiver() as receiver:
        url = f"json://bot:SNTL-notify-pass-9f@127.0.0.1:{receiver.port}/hook"
        notifier = Notifier(settings(monkeypatch, url))
        notifier.notify(
            "run 1: SNTL-notify-push-token-5e",
            "saw SNTL-notify-pass-9f in a log",
            kind="escalation",
            events=RecordingSink(),
        )
        assert notifier.flush(timeout_s=20)
        (request,) = receiver.received
    payload = request.json()
    assert isinstance(payload, dict)
    assert payload["title"] == "run 1: ***" and payload["message"] == "saw *** in a log"
