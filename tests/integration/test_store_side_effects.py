"""Side effects reserved before they happen and settled after, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.store import Channel, NotificationDraft, Store

HOUR_S = 3600.0


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    s = Store(database_url)
    s.upgrade()
    yield s
    s.close()


def test_a_reservation_is_busy_until_settled_or_stale(store: Store) -> None:
    """Taken once; busy while fresh; taken over once stale (by one taker); settled for good."""
    assert store.claim_pending("comment:x", HOUR_S) == "taken"
    assert store.claim_pending("comment:x", HOUR_S) == "busy"
    assert store.has_side_effect("comment:x")
    assert store.claim_pending("comment:x", 0.0) == "taken"  # its holder is presumed dead
    store.settle_side_effect("comment:x")
    assert store.claim_pending("comment:x", 0.0) == "settled"
    assert store.claim_pending("comment:x", HOUR_S) == "settled"


def test_claimed_side_effects_are_settled_at_once(store: Store) -> None:
    """A key recorded after its effect (``claim_side_effect``) is never taken over."""
    assert store.claim_side_effect("ending:run=1", run_id=1)
    assert store.claim_pending("ending:run=1", 0.0) == "settled"


def test_a_keyed_notification_is_queued_once_with_its_key(store: Store) -> None:
    """The key and the outbox rows are written together: a second draft with it queues none."""
    channels = [Channel("json://a", "k1"), Channel("json://b", "k2")]
    draft = NotificationDraft("escalation", "t", "b", key="notify:run=7:ended")
    assert len(store.add_notification(draft, channels)) == 2
    assert store.add_notification(draft, channels) == []
    assert store.has_side_effect("notify:run=7:ended")
    unkeyed = NotificationDraft("escalation", "t", "b")
    assert len(store.add_notification(unkeyed, channels)) == 2
    assert len(store.add_notification(unkeyed, channels)) == 2
