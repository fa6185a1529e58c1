"""The notification outbox on SQLite and PostgreSQL: durable, retried, visible until delivered."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from pipeline.config.settings import NotifySettings, SecretRef
from pipeline.http.metrics import Metrics
from pipeline.notify.apprise import Notifier
from pipeline.store import Store
from pipeline.testing.deploy_target import free_port
from pipeline.testing.receiver import Receiver
from pipeline.testing.sinks import RecordingSink


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    s = Store(database_url)
    s.upgrade()
    s.ensure_repo("alpha")
    yield s
    s.close()


def _settings(monkeypatch: pytest.MonkeyPatch, url: str) -> NotifySettings:
    monkeypatch.setenv("AFK_NOTIFY_URLS", url)
    return NotifySettings(urls=SecretRef(env="AFK_NOTIFY_URLS"), retry_delay_s=0.0)


def _metric(store: Store, name: str) -> float:
    metrics = Metrics()
    metrics.watch_store(store, capacity=1)
    for line in metrics.render().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_a_notification_survives_a_down_channel_and_a_restart(
    store: Store,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Channel down: the run is marked undelivered, the failure logged and counted; after a
    restart with the channel back it is delivered exactly once."""
    port = free_port()
    settings = _settings(monkeypatch, f"json://127.0.0.1:{port}/hook")
    run = store.enqueue("alpha").run
    notifier = Notifier(settings, store=store)
    notifier.notify(
        "run escalated", "resume: retry", kind="escalation", events=RecordingSink(), run_id=run.id
    )
    assert notifier.outbox is not None
    with caplog.at_level(logging.WARNING, logger="pipeline.notify.outbox"):
        assert notifier.outbox.deliver_due() == 0
    assert any("failed (attempt 1)" in r.getMessage() for r in caplog.records)
    shown = store.get_run(run.id)
    assert shown is not None and shown.notifications_undelivered == 1
    assert _metric(store, "pipeline_notifications_failed_total") == 1.0
    store.close()

    restarted = Store(database_url)  # a new process: only the database carries over
    with Receiver(port=port) as receiver:
        again = Notifier(settings, store=restarted)
        assert again.outbox is not None
        assert again.outbox.deliver_due() == 1
        assert again.outbox.deliver_due() == 0
        (request,) = receiver.received
    payload = request.json()
    assert isinstance(payload, dict) and payload["title"] == "run escalated"
    after = restarted.get_run(run.id)
    assert after is not None and after.notifications_undelivered == 0
    assert _metric(restarted, "pipeline_notifications_undelivered") == 0.0
    kinds = [e.data.get("ok") for e in restarted.run_events(run.id) if e.kind == "notify"]
    assert kinds[-1] is True
    restarted.close()


def test_a_claimed_row_is_not_sent_twice(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deliverers sharing the store: a row taken by one is not taken by the other."""
    settings = _settings(monkeypatch, "json://127.0.0.1:9/x")
    Notifier(settings, store=store).notify("t", "b", kind="freeze", events=RecordingSink())
    first = store.take_due_notifications(claim_s=60)
    second = store.take_due_notifications(claim_s=60)
    assert len(first) == 1 and second == []


def test_a_channel_removed_from_the_config_is_given_up(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A row whose channel is no longer configured is abandoned with an ERROR line."""
    run = store.enqueue("alpha").run
    Notifier(_settings(monkeypatch, "json://127.0.0.1:9/old"), store=store).notify(
        "t", "b", kind="escalation", events=RecordingSink(), run_id=run.id
    )
    now = Notifier(_settings(monkeypatch, "json://127.0.0.1:9/new"), store=store)
    assert now.outbox is not None
    with caplog.at_level(logging.ERROR, logger="pipeline.notify.outbox"):
        now.outbox.deliver_due()
    assert any("given up" in r.getMessage() for r in caplog.records)
    (row,) = store.run_notifications(run.id)
    assert row.state == "abandoned"
    shown = store.get_run(run.id)
    assert shown is not None and shown.notifications_undelivered == 1


def test_the_stored_notification_is_masked(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret in a notification never reaches the outbox table."""
    from pipeline.core.masking import register_secret

    register_secret("SNTL-outbox-secret-77")
    run = store.enqueue("alpha").run
    Notifier(_settings(monkeypatch, "json://127.0.0.1:9/x"), store=store).notify(
        "t SNTL-outbox-secret-77",
        "b SNTL-outbox-secret-77",
        kind="escalation",
        events=RecordingSink(),
        run_id=run.id,
    )
    with store.engine.connect() as conn:
        raw = conn.exec_driver_sql("SELECT title, body FROM notifications").all()
    assert "SNTL" not in repr(raw)


def test_a_channel_name_longer_than_its_column_is_recorded_cut(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The channel's name (scheme and host) comes from the config and the store keeps 300
    characters of it: PostgreSQL refused a longer one, so nothing was queued to notify."""
    host = ".".join(["h" * 60] * 5)  # 304 characters
    run = store.enqueue("alpha").run
    Notifier(_settings(monkeypatch, f"json://{host}/x"), store=store).notify(
        "t", "b", kind="escalation", events=RecordingSink(), run_id=run.id
    )
    (row,) = store.run_notifications(run.id)
    assert row.channel == f"json://{host}"[:299] + "…"
