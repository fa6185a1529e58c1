"""Notification helpers: channel redaction, URL lists, escalation text, skipped sends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.config.settings import NotifySettings, SecretRef
from pipeline.notify.apprise import Notifier
from pipeline.notify.channels import describe_channel, parse_urls
from pipeline.notify.escalation import EndingText, ending_message
from pipeline.testing.sinks import RecordingSink


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("json://user:pass@hooks.example.org:8080/secret/path?token=x", "json://hooks.example.org"),
        ("ntfys://tok@ntfy.sh/topic-secret", "ntfys://ntfy.sh"),
        ("slack://TokenA/TokenB/TokenC/#ops", "slack://"),
        ("discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js", "discord://"),
        ("no scheme at all", "<no scheme>"),
    ],
)
def test_channels_are_named_without_secrets(url: str, shown: str) -> None:
    """Only scheme and (for real hosts) host name a channel; tokens never show."""
    assert describe_channel(url) == shown


def test_url_list_skips_blanks_and_comments() -> None:
    """The secret holds one URL per line; blank lines and comments are ignored."""
    assert parse_urls("\n# ops\njson://a/b\n  \nntfy://c/d\n") == ["json://a/b", "ntfy://c/d"]
    assert parse_urls(None) == []


def test_ending_message_for_a_frozen_repo() -> None:
    """A freeze says what happened, what was kept where, and the unfreeze command."""
    title, body = ending_message(
        EndingText(
            repo="web app",
            run_id=42,
            headline="frozen",
            reason="deploy_broken",
            what_happened="The deploy of abc123 failed its health probe after fix-forwards.",
            kept=(("evidence", "/vol/frozen/42"), ("worktree", "/vol/frozen/42/worktree")),
            frozen=True,
            issue_url="https://forge.invalid/o/r/issues/7",
            sha="abc123",
        )
    )
    assert "run 42 frozen (deploy_broken)" in title
    assert "failed its health probe" in body and "commit abc123" in body
    assert "  - evidence: /vol/frozen/42" in body
    assert "pipeline repos unfreeze 'web app' --note" in body
    assert "pipeline runs retry" not in body


def test_ending_message_for_a_run() -> None:
    """An escalated run in an active repo resumes with runs retry, or with its label."""
    _, body = ending_message(
        EndingText(
            repo="api",
            run_id=9,
            headline="escalated",
            reason="conflict",
            what_happened="Rebase conflict in a.py.",
            kept=(("branch", "afk/run-9"),),
            ready_label="ready-for-agent",
        )
    )
    assert "pipeline runs retry 9" in body and "unfreeze" not in body
    assert "  - branch: afk/run-9" in body and "`ready-for-agent` again" in body


def test_ending_message_after_a_push_offers_a_rewatch() -> None:
    """A run that pushed: the retry, and labelling the issue again, watch its commit again
    and implement nothing (the change is on the branch already); the message says so."""
    _, body = ending_message(
        EndingText(
            repo="api",
            run_id=9,
            headline="escalated",
            reason="deploy_inconclusive",
            what_happened="The watch of 0123456789ab was inconclusive: no CI appeared.",
            ready_label="ready-for-agent",
            sha="0123456789abcdef",
        )
    )
    assert "pipeline runs retry 9" in body and "watches 0123456789ab again" in body
    assert "labelling the issue `ready-for-agent` again, watches" in body
    assert "it implements nothing" in body


def test_success_is_not_sent_unless_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Success notifications are opt-in: nothing is sent or recorded by default."""
    monkeypatch.setenv("AFK_NOTIFY_URLS", "json://127.0.0.1:9/x")
    sink = RecordingSink()
    Notifier(NotifySettings(urls=SecretRef(env="AFK_NOTIFY_URLS")), background=False).notify(
        "t", "b", kind="success", events=sink
    )
    assert sink.events == []


def test_no_channels_is_recorded_not_raised() -> None:
    """Without configured URLs the notification is recorded as not sent."""
    sink = RecordingSink()
    Notifier(NotifySettings(), background=False).notify("t", "b", kind="escalation", events=sink)
    assert sink.kinds() == ["notify"] and "no notification channels" in sink.events[0][1]


def test_invalid_url_is_retried_then_given_up_without_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unusable channel is tried retries+1 times, then recorded without its secret parts."""
    monkeypatch.setenv("AFK_NOTIFY_URLS", "notascheme://hunter2@example.org/s3cret")
    sleeps: list[float] = []
    sink = RecordingSink()
    settings = NotifySettings(urls=SecretRef(env="AFK_NOTIFY_URLS"), retries=2, retry_delay_s=7)
    Notifier(settings, background=False, sleep=sleeps.append).notify(
        "t", "b", kind="freeze", events=sink
    )
    assert sleeps == [7, 7]
    ((_, message, data),) = sink.of_kind("notify")
    assert data == {"kind": "freeze", "channel": "notascheme://", "ok": False, "attempts": 3}
    assert "hunter2" not in repr(sink.events) and "s3cret" not in repr(sink.events)
    assert "failed after 3 attempts" in message


def test_outbox_backoff_doubles_and_is_capped() -> None:
    """A channel that keeps failing is tried again after 2, 4, 8 ... s, at most every 10 min."""
    from pipeline.notify.outbox import MAX_BACKOFF_S, backoff_s

    assert [backoff_s(2.0, n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert backoff_s(2.0, 40) == MAX_BACKOFF_S
    assert backoff_s(0.0, 3) == 0.0


def test_the_daemon_loads_apprise_only_when_it_sends() -> None:
    """apprise costs memory the idle daemon does not need: importing the daemon leaves it out
    (the sends themselves are checked in tests/integration/test_notify*.py)."""
    code = "import sys, pipeline.daemon; print('apprise' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
