"""Injected forge faults: each is classified, waited out as told, and then recovers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from pipeline.core.errors import FatalError, RetryableError
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import ManualClock, client_for
from pipeline.trackers import HttpOptions

SLUG = "acme/widgets"
READY = "ready-for-agent"
SENTINEL = "SENTINEL-t0k3n-6f1d2c"
ISSUES = r"/issues$"


@pytest.fixture(params=["github", "gitea", "gitlab"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    cls = {"github": FakeGitHub, "gitea": FakeGitea, "gitlab": FakeGitLab}[request.param]
    forge: FakeForge = cls(token=SENTINEL)
    forge.add_issue(SLUG, "one", labels=[READY])
    with forge:
        yield forge


def _sent(fake: FakeForge) -> int:
    return len(fake.requests)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retryable_and_next_call_works(fake: FakeForge, status: int) -> None:
    """A 5xx is RetryableError('forge_5xx') and the following poll succeeds."""
    client = client_for(fake)
    fake.inject(ISSUES, status=status)
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "forge_5xx" and str(status) in str(info.value)
    assert [i.title for i in client.list_ready(SLUG) or []] == ["one"]


def test_timeout_is_network_error(fake: FakeForge) -> None:
    """A server slower than the timeout is RetryableError('network'); the next call works."""
    # A timeout with room for a loaded machine's normal answers; the fault waits well past it.
    client = client_for(fake, options=HttpOptions(timeout_s=1.0, mutation_spacing_s=0.0))
    fake.inject(ISSUES, status=None, delay_s=2.5)
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "network" and "no answer within 1s" in str(info.value)
    assert client.list_ready(SLUG) is not None


def test_connection_refused_is_network_error(fake: FakeForge) -> None:
    """A forge that is not listening is RetryableError('network')."""
    client = client_for(fake)
    assert fake.served is not None
    fake.served.stop()  # the server goes away; the client stays open
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "network"


@pytest.mark.parametrize(
    "body", ['{"truncated": [1, 2', "<html>bad gateway</html>", '[{"number": 1'], ids=str
)
def test_malformed_json_is_bad_response(fake: FakeForge, body: str) -> None:
    """Malformed or truncated JSON is RetryableError('forge_bad_response') naming the URL."""
    client = client_for(fake)
    fake.inject(ISSUES, status=200, body=body)
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    message = str(info.value)
    assert info.value.kind == "forge_bad_response"
    assert f"{SLUG}/issues" in message.replace("%2F", "/") and "not valid JSON" in message
    assert "Traceback" not in message
    assert client.list_ready(SLUG) is not None


def test_wrong_shape_is_bad_response(fake: FakeForge) -> None:
    """Valid JSON of the wrong shape names the missing field, not a KeyError."""
    client = client_for(fake)
    fake.inject(ISSUES, status=200, body='[{"title": "no number"}]')
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "forge_bad_response" and "is missing" in str(info.value)


def test_429_retry_after_is_honoured(fake: FakeForge) -> None:
    """429 with retry-after: the client refuses to call until then, then works again."""
    clock = ManualClock()
    client = client_for(fake, clock=clock)
    fake.inject(ISSUES, status=429, headers={"Retry-After": "30"})
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "forge_rate_limited" and info.value.retry_after_s == 30
    sent = _sent(fake)
    clock.advance(29)
    with pytest.raises(RetryableError) as early:
        client.comment(SLUG, 1, "too soon")
    assert early.value.kind == "forge_rate_limited"
    assert early.value.retry_after_s == pytest.approx(1)
    assert _sent(fake) == sent  # refused without touching the network
    clock.advance(1)
    assert client.list_ready(SLUG) is not None


def test_reset_header_is_honoured(fake: FakeForge) -> None:
    """A limit with only a reset epoch (x-ratelimit-reset, RateLimit-Reset) waits until then."""
    clock = ManualClock()
    client = client_for(fake, clock=clock)
    reset = str(int(clock.now) + 120)
    if isinstance(fake, FakeGitLab):
        headers, status = {"RateLimit-Remaining": "0", "RateLimit-Reset": reset}, 429
    else:
        headers, status = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}, 403
    body = '{"message": "API rate limit exceeded"}'
    fake.inject(ISSUES, status=status, headers=headers, body=body)
    with pytest.raises(RetryableError) as info:
        client.list_ready(SLUG)
    assert info.value.kind == "forge_rate_limited"
    assert info.value.retry_after_s == pytest.approx(120)
    clock.advance(60)
    with pytest.raises(RetryableError):
        client.list_ready(SLUG)
    clock.advance(60)
    assert client.list_ready(SLUG) is not None


def test_github_secondary_limit_without_headers_waits_a_minute() -> None:
    """GitHub's secondary limit (403, message only) waits the documented minute."""
    clock = ManualClock()
    fake = FakeGitHub(token=SENTINEL)
    fake.add_issue(SLUG, "one", labels=[READY])
    with fake:
        client = client_for(fake, clock=clock)
        body = '{"message": "You have exceeded a secondary rate limit."}'
        fake.inject(r"/comments$", status=403, body=body, method="POST")
        with pytest.raises(RetryableError) as info:
            client.comment(SLUG, 1, "hello")
        assert info.value.retry_after_s == 60
        clock.advance(60)
        client.comment(SLUG, 1, "hello")
    assert [c.body for c in fake.issue(SLUG, 1).comments] == ["hello"]


def test_exhausted_rate_limit_from_the_fake_itself() -> None:
    """When the fake's own counter runs out, the client waits for its reset."""
    clock = ManualClock()
    fake = FakeGitHub(token=SENTINEL, rate_limit=3)
    fake.rate_reset = int(clock.now) + 300
    fake.add_issue(SLUG, "one", labels=[READY])
    with fake:
        client = client_for(fake, clock=clock)
        client.list_ready(SLUG)
        client.get_issue(SLUG, 1)  # issue + comments: the second spends the last point
        with pytest.raises(RetryableError) as info:
            client.labeller(SLUG, 1, READY)
    assert info.value.kind == "forge_rate_limited"
    assert info.value.retry_after_s == pytest.approx(300)


def test_forbidden_without_rate_limit_is_fatal(fake: FakeForge) -> None:
    """A plain 403 (no rate-limit sign) is a fatal permission error."""
    fake.inject(ISSUES, status=403, body='{"message": "Resource not accessible by token"}')
    with pytest.raises(FatalError) as info:
        client_for(fake).list_ready(SLUG)
    assert info.value.kind == "forge_forbidden"
    assert "Resource not accessible" in str(info.value)


def test_mutations_are_spaced_and_serialised(fake: FakeForge) -> None:
    """Writes from several threads go one at a time, at least mutation_spacing_s apart."""
    clock = ManualClock()
    client = client_for(fake, clock=clock, options=HttpOptions(mutation_spacing_s=1.0))
    threads = [threading.Thread(target=client.comment, args=(SLUG, 1, f"c{n}")) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fake.issue(SLUG, 1).comments) == 4
    assert clock.sleeps == [1.0, 1.0, 1.0]


def test_token_never_leaks(fake: FakeForge, caplog: pytest.LogCaptureFixture) -> None:
    """The token appears in no error message, repr or log line, whatever fails."""
    caplog.set_level(logging.DEBUG)
    clock = ManualClock()
    client = client_for(fake, clock=clock, options=HttpOptions(timeout_s=0.2))
    seen: list[str] = [repr(client), repr(client.http)]
    faults = [
        {"status": 500},
        {"status": 401},
        {"status": 200, "body": "{oops"},
        {"status": None, "delay_s": 0.5},
        {"status": 429, "headers": {"Retry-After": "1"}},
    ]
    for fault in faults:
        fake.inject(ISSUES, **fault)  # type: ignore[arg-type]
        with pytest.raises((RetryableError, FatalError)) as info:
            client.list_ready(SLUG)
        seen += [str(info.value), repr(info.value), str(info.value.__cause__)]
        clock.advance(5)
    with pytest.raises(FatalError) as missing:
        client.get_issue("acme/gone", 1)
    seen.append(str(missing.value))
    seen.append(caplog.text)
    assert all(SENTINEL not in text for text in seen)
    assert any(r.authorized for r in fake.requests)  # the token did reach the forge


def test_fault_counts_and_method_filters(fake: FakeForge) -> None:
    """An injected fault hits exactly `times` matching requests, and only the given method."""
    client = client_for(fake)
    fake.inject(r"/(comments|notes)$", status=503, times=2, method="POST")
    assert client.list_comments(SLUG, 1) == []  # GET is not affected
    for _ in range(2):
        with pytest.raises(RetryableError):
            client.comment(SLUG, 1, "retry me")
    client.comment(SLUG, 1, "retry me")
    assert [c.body for c in fake.issue(SLUG, 1).comments] == ["retry me"]
    assert [r.status for r in fake.requests if r.method == "POST"] == [503, 503, 201]
