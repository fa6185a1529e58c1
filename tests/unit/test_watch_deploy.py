"""The deploy analysis on scripted probes and a fake clock: never sleeps."""

from __future__ import annotations

import httpx

from pipeline.config.settings import DeploySettings, ProbeSettings
from pipeline.core.proc import StopToken
from pipeline.testing.clock import ManualClock
from pipeline.testing.sinks import RecordingSink
from pipeline.watch.deploy import (
    DeployOutcome,
    DescendantVersions,
    ProbeResult,
    ProbeRunner,
    ProbeStatus,
    _judge_http,
    version_matches,
    watch_deploy,
)
from pipeline.watch.pacing import Pacing

PROBE = ProbeSettings(kind="http", url="http://127.0.0.1:9/health")
SHA = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def scripted(*statuses: ProbeStatus) -> ProbeRunner:
    answers = list(statuses)

    def run(probe: ProbeSettings, sha: str) -> ProbeResult:
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        return ProbeResult(status, f"probe said {status}")

    return run


def analyse(
    *statuses: ProbeStatus, **settings: object
) -> tuple[DeployOutcome, ManualClock, RecordingSink]:
    values: dict[str, object] = {
        "probes": (PROBE,),
        "initial_delay_s": 5.0,
        "interval_s": 10.0,
        "count": 3,
        "failure_limit": 0,
        "progress_deadline_s": 100.0,
    }
    values.update(settings)
    clock, sink = ManualClock(now=0.0), RecordingSink()
    outcome = watch_deploy(
        DeploySettings(**values),
        SHA,
        sink,
        None,  # type: ignore[arg-type]
        pacing=Pacing(clock, clock.sleep),
        probe_runner=scripted(*statuses),
    )
    return outcome, clock, sink


def test_all_good_measurements_are_healthy() -> None:
    """Initial delay, then count measurements interval apart, all ok: healthy."""
    outcome, clock, sink = analyse("ok")
    assert outcome.verdict == "healthy"
    assert clock.sleeps == [5.0, 10.0, 10.0]
    assert len(sink.of_kind("deploy")) == 4


def test_failures_beyond_the_limit_are_broken_early() -> None:
    """The second failure with failure_limit 1 ends the analysis as broken at once."""
    outcome, _, _ = analyse("failed", "ok", "failed", "ok", failure_limit=1, count=5)
    assert outcome.verdict == "broken"
    assert outcome.failures == 2 and outcome.measurements == 3
    assert "probe said failed" in outcome.evidence


def test_failures_within_the_limit_are_healthy() -> None:
    """One failed measurement within failure_limit 1 still ends healthy."""
    outcome, _, _ = analyse("failed", "ok", failure_limit=1)
    assert outcome.verdict == "healthy"


def test_not_rolled_out_waits_then_counts() -> None:
    """Measurements of the old version are not counted; the analysis continues after."""
    outcome, clock, _ = analyse("not_rolled_out", "not_rolled_out", "ok")
    assert outcome.verdict == "healthy" and outcome.measurements == 3
    assert clock.now == 5 + 4 * 10


def test_progress_deadline_makes_it_inconclusive() -> None:
    """Never rolled out before the progress deadline: inconclusive, not broken."""
    outcome, clock, _ = analyse("not_rolled_out", progress_deadline_s=60.0)
    assert outcome.verdict == "inconclusive"
    assert "progress deadline" in outcome.evidence
    assert clock.now == 65


def test_no_probes_is_healthy_without_waiting() -> None:
    """A repo without probes has nothing to watch."""
    outcome, clock, _ = analyse("failed", probes=())
    assert outcome.verdict == "healthy" and clock.sleeps == []


def test_stop_ends_the_analysis_inconclusive() -> None:
    """A stop request ends the watch as inconclusive with the reason."""
    stop = StopToken()
    stop.stop("cancel")
    outcome = watch_deploy(
        DeploySettings(probes=(PROBE,)),
        SHA,
        RecordingSink(),
        stop,
        pacing=Pacing(sleep=lambda s: None),
        probe_runner=scripted("ok"),
    )
    assert outcome.verdict == "inconclusive" and "stopped" in outcome.evidence


def test_a_probe_killed_by_a_stop_is_not_a_failed_measurement() -> None:
    """A stop (cancel, shutdown) that kills a command probe mid-measurement: no verdict of
    broken, and no failed measurement on the timeline, however low the failure limit."""
    stop, sink = StopToken(), RecordingSink()

    def killed(probe: ProbeSettings, sha: str) -> ProbeResult:
        stop.stop("shutdown")  # the probe's command is killed by the stop, so it "fails"
        return ProbeResult("failed", "$ ./probe -> exit None")

    outcome = watch_deploy(
        DeploySettings(probes=(PROBE,), failure_limit=0),
        SHA,
        sink,
        stop,
        pacing=Pacing(sleep=lambda s: None),
        probe_runner=killed,
    )
    assert outcome.verdict == "inconclusive" and "stopped" in outcome.evidence
    assert (outcome.measurements, outcome.failures) == (0, 0)
    assert not any(message.startswith("measurement") for _, message, _ in sink.events)


def test_version_matching_accepts_abbreviations() -> None:
    """A reported version equal to the SHA or a 7+ digit prefix of it matches."""
    assert version_matches(SHA, SHA) and version_matches(SHA[:7], SHA)
    assert not version_matches(SHA[:6], SHA) and not version_matches("v1.2", SHA)


def test_a_later_commit_holding_the_sha_is_rolled_out() -> None:
    """Someone pushed on top of the run's commit and that is deployed: the commit is live.
    Each reported version is looked up once; an unrelated one is still not rolled out."""
    later, older = "a" * 40, "b" * 40
    probe = ProbeSettings(kind="http", url="http://127.0.0.1:9/health", json_field="version")
    asked: list[str] = []

    def ask(version: str) -> bool:
        asked.append(version)
        return version == later

    holds = DescendantVersions(ask)
    for _ in range(2):
        result = _judge_http(probe, SHA, httpx.Response(200, json={"version": later}), holds)
        assert result.status == "ok" and "holding 4b825dc642cb" in result.output
    assert asked == [later]
    result = _judge_http(probe, SHA, httpx.Response(200, json={"version": older}), holds)
    assert result.status == "not_rolled_out"
    assert _judge_http(probe, SHA, httpx.Response(200, json={"version": later})).status == (
        "not_rolled_out"
    )
