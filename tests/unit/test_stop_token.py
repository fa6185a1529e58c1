"""The run's stop token, and the view of it that work which must finish sees."""

from __future__ import annotations

from pipeline.core.proc import StopToken


def test_a_view_ignores_only_the_reasons_it_names() -> None:
    """A push shielded from a cancel still stops for a lost lease, with the reason."""
    for reason, seen in (("cancelled", False), ("timeout", False), ("lease_lost", True)):
        token = StopToken()
        view = token.ignoring("cancelled", "timeout")
        assert not view.stopped
        token.stop(reason)
        assert view.stopped is seen and token.stopped
        assert view.wait(0.01) is seen
        if seen:
            assert view.reason == reason


def test_a_view_stops_its_source() -> None:
    token = StopToken()
    token.ignoring("cancelled").stop("shutdown")
    assert token.stopped and token.reason == "shutdown"
