"""The intake benchmark runs end to end on a small world (a smoke test, nothing timed)."""

from __future__ import annotations

import json

import pytest

from benchmarks import intake


def test_intake_benchmark_prints_one_json_summary(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged cycles cost no rate-limit points; both pickups queue a run; JSON comes last."""
    monkeypatch.setenv(intake.SECRET_ENV, "restored-after-the-test")
    code = intake.main(["--json", "--repos", "3", "--cycles", "2", "--poll-interval-s", "0.3"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # The exit code also reflects the speed target, which belongs to the benchmark, not a test.
    assert code in (0, 1)
    assert (summary["repos"], summary["requests"], summary["requests_304"]) == (3, 6, 6)
    assert summary["rate_limit_points_unchanged"] == 0 and summary["runs_queued"] == 2
    assert summary["pickup_poll_s"] > 0 and summary["pickup_webhook_s"] > 0
