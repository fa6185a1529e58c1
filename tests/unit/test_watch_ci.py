"""CI judging on documented payloads, the Woodpecker source, and the watch loop."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.settings import CiSettings, SecretRef
from pipeline.core.errors import FatalError, RetryableError
from pipeline.testing.clock import ManualClock
from pipeline.testing.receiver import Receiver
from pipeline.testing.sinks import RecordingSink
from pipeline.trackers.base import CiState
from pipeline.trackers.github import summarise_ci
from pipeline.watch.ci import (
    CiWatchAids,
    NoCi,
    TrackerCiSource,
    WoodpeckerCiSource,
    ci_source,
    judge_woodpecker,
    watch_ci,
)
from pipeline.watch.pacing import Pacing

FIXTURES = Path(__file__).parent.parent / "fixtures"
GREEN = "6dcb09b5b57875f334f61aebed695e2e4193db5e"


def load(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def runs(*items: dict[str, Any]) -> dict[str, Any]:
    return {"total_count": len(items), "check_runs": list(items)}


def check_run(conclusion: str | None, status: str = "completed", **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = copy.deepcopy(load("ci/github/check-run-completed.json"))
    run.update(status=status, conclusion=conclusion, **extra)
    return run


def judge_github(check_runs: dict[str, Any], combined: dict[str, Any]) -> CiState:
    """The GitHub judge the tracker uses, on the two documented payloads."""
    return summarise_ci(check_runs["check_runs"], combined["statuses"], "test")


NO_STATUSES = {"state": "pending", "statuses": [], "sha": GREEN, "total_count": 0}
NO_RUNS = {"total_count": 0, "check_runs": []}


def test_actions_only_repo_with_green_runs_is_success() -> None:
    """Check runs green and a combined status of pending with no statuses is success."""
    state = judge_github(runs(check_run("success")), NO_STATUSES)
    assert state.state == "success"


def test_documented_examples_are_judged() -> None:
    """The octokit examples: a neutral run plus two successful statuses is success."""
    state = judge_github(load("ci/github/check-runs.json"), load("ci/github/combined-status.json"))
    assert state.state == "success"
    assert "check mighty_readme: neutral" in state.details
    assert "status security/brakeman: success" in state.details


@pytest.mark.parametrize(
    "conclusion", ["failure", "timed_out", "action_required", "startup_failure"]
)
def test_failing_conclusions_are_failure(conclusion: str) -> None:
    """Each failing check-run conclusion makes the commit's CI a failure with a log link."""
    state = judge_github(
        runs(check_run("success", name="lint", id=1), check_run(conclusion, name="test", id=2)),
        NO_STATUSES,
    )
    assert state.state == "failure"
    assert state.log_hint == "https://github.com/github/hello-world/runs/4"


def test_cancelled_run_is_no_verdict() -> None:
    """A cancelled check (a newer push superseded it) is neither failure nor success.

    It used to count as a failure: a colleague's push under ``cancel-in-progress``
    started a fix-forward of a healthy change (ADR 0008).
    """
    state = judge_github(
        runs(check_run("success", name="lint", id=1), check_run("cancelled", name="test", id=2)),
        NO_STATUSES,
    )
    assert state.state == "cancelled"
    failed = runs(check_run("failure", name="lint", id=1), check_run("cancelled", name="t", id=2))
    assert judge_github(failed, NO_STATUSES).state == "failure"


@pytest.mark.parametrize("conclusion", ["some_future_conclusion", None])
def test_unknown_conclusion_is_no_verdict(conclusion: str | None) -> None:
    """A completed run with a conclusion GitHub may add one day is not read as green."""
    state = judge_github(
        runs(check_run("success", name="lint", id=1), check_run(conclusion, name="t", id=2)),
        NO_STATUSES,
    )
    assert state.state == "pending"


def test_unknown_status_state_is_no_verdict() -> None:
    """A commit status in a state the judge does not know keeps the verdict open."""
    combined = copy.deepcopy(load("ci/github/combined-status.json"))
    combined["statuses"][0]["state"] = "some_future_state"
    assert judge_github(NO_RUNS, combined).state == "pending"


def test_in_progress_run_is_pending() -> None:
    """A run still in progress keeps the verdict pending even when others passed."""
    in_progress = load("ci/github/check-run-in-progress.json")
    state = judge_github(runs(check_run("success", name="lint"), in_progress), NO_STATUSES)
    assert state.state == "pending"


def test_failing_status_beats_green_runs() -> None:
    """A failing commit status fails the commit even when every check run is green."""
    combined = copy.deepcopy(load("ci/github/combined-status.json"))
    combined["statuses"][1]["state"] = "error"
    combined["state"] = "error"
    state = judge_github(runs(check_run("success")), combined)
    assert state.state == "failure" and state.log_hint == "https://ci.example.com/2000/output"


def test_statuses_only_repo_pending_status_is_pending() -> None:
    """A repo with statuses and no check runs waits on a pending status."""
    combined = copy.deepcopy(load("ci/github/combined-status.json"))
    combined["statuses"][0]["state"] = "pending"
    assert judge_github(NO_RUNS, combined).state == "pending"


def test_nothing_reported_is_none() -> None:
    """No check runs and no statuses means no CI has reported yet."""
    assert judge_github(NO_RUNS, NO_STATUSES).state == "none"


def test_rerun_supersedes_the_failed_attempt() -> None:
    """A re-run with the same name and a higher id replaces the failed first attempt."""
    state = judge_github(
        runs(check_run("failure", name="test", id=7), check_run("success", name="test", id=9)),
        NO_STATUSES,
    )
    assert state.state == "success"


def test_woodpecker_fixture_is_parsed_per_commit() -> None:
    """Woodpecker pipelines are matched on ``commit``; the newest pipeline for it counts."""
    pipelines = load("woodpecker/pipelines.json")
    assert judge_woodpecker(pipelines, GREEN).state == "success"
    running = "9c1f0b1a47d3e2f6a8b5c4d3e2f1a0b9c8d7e6f5"
    rerun = "e83c5163316f89bfbde7d9ab23ca2e25604af290"
    assert judge_woodpecker(pipelines, running).state == "pending"
    assert judge_woodpecker(pipelines, rerun).state == "success"
    failed = judge_woodpecker(pipelines, "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
    assert failed.state == "failure"
    assert "error: [linter] yaml: unknown key 'stpes'" in failed.details
    assert judge_woodpecker(pipelines, "0" * 40).state == "none"


@pytest.mark.parametrize("status", ["killed", "canceled"])
def test_woodpecker_killed_or_canceled_pipeline_is_no_verdict(status: str) -> None:
    """``killed`` ("killed by user") and ``canceled`` ("canceled but hasn't been started",
    StatusValue in the server's swagger) stopped before a verdict: no failure.

    Both used to count as a failure, as GitHub's ``cancelled`` did."""
    pipelines = copy.deepcopy(load("woodpecker/pipelines.json"))
    newest = pipelines[0]
    newest["status"] = status
    assert judge_woodpecker(pipelines, newest["commit"]).state == "cancelled"
    restarted = {**newest, "id": newest["id"] + 1, "number": newest["number"] + 1}
    assert (
        judge_woodpecker([{**restarted, "status": "success"}, *pipelines], newest["commit"]).state
        == "success"
    )


def test_woodpecker_source_reads_the_api_with_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Woodpecker source GETs the pipelines list with a bearer token and links the run."""
    monkeypatch.setenv("WP_TOKEN", "wp-secret")
    with Receiver() as server:
        server.route("GET", "/api/repos/7/pipelines", load("woodpecker/pipelines.json"))
        source = WoodpeckerCiSource(server.url, SecretRef(env="WP_TOKEN"), "7")
        state = source.state("4b825dc642cb6eb9a060e54bf8d69288fbee4904")
        request = server.received[0]
    assert state.state == "failure"
    assert state.log_hint == f"{server.url}/repos/7/pipeline/43"
    assert request.headers["Authorization"] == "Bearer wp-secret"
    assert "perPage=50" in request.path


def test_woodpecker_source_classifies_http_errors() -> None:
    """401/404 are configuration errors; a 5xx is retryable."""
    with Receiver(default_status=404) as server:
        with pytest.raises(FatalError, match=r"ci\.repo_id"):
            WoodpeckerCiSource(server.url, None, "7").state(GREEN)
        server.set_default_status(502)
        with pytest.raises(RetryableError):
            WoodpeckerCiSource(server.url, None, "7").state(GREEN)


class Scripted:
    """A CI source answering from a script; the last answer repeats."""

    def __init__(self, *answers: CiState | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def state(self, sha: str) -> CiState:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


CI = CiSettings(kind="github", appear_timeout_s=60, timeout_s=600, poll_interval_s=10)


def test_watch_returns_the_verdict_once_ci_finishes() -> None:
    """Pending then failure: the watch returns failure with the details and log link."""
    clock, sink = ManualClock(now=0.0), RecordingSink()
    source = Scripted(
        CiState("none"),
        CiState("pending"),
        CiState("pending"),
        CiState("failure", ("check test: failure",), "https://ci/1"),
    )
    outcome = watch_ci(source, GREEN, CI, sink, None, CiWatchAids(Pacing(clock, clock.sleep)))
    assert (outcome.state, outcome.log_hint) == ("failure", "https://ci/1")
    assert clock.now == 30
    assert [data["state"] for _, _, data in sink.of_kind("ci")] == ["none", "pending", "failure"]


def test_no_ci_appearing_is_inconclusive() -> None:
    """Nothing reported within appear_timeout_s ends the watch as none_appeared."""
    clock = ManualClock(now=0.0)
    outcome = watch_ci(
        Scripted(CiState("none")),
        GREEN,
        CI,
        RecordingSink(),
        None,
        CiWatchAids(Pacing(clock, clock.sleep)),
    )
    assert outcome.state == "none_appeared" and outcome.inconclusive
    assert clock.now == 60


def test_ci_pending_forever_times_out_inconclusive() -> None:
    """CI that started but never finishes times out after timeout_s, inconclusive."""
    clock = ManualClock(now=0.0)
    outcome = watch_ci(
        Scripted(CiState("pending", ("check test: in_progress",))),
        GREEN,
        CI,
        RecordingSink(),
        None,
        CiWatchAids(Pacing(clock, clock.sleep)),
    )
    assert outcome.state == "timeout" and outcome.inconclusive
    assert "check test: in_progress" in outcome.detail and clock.now == 600


def test_transient_errors_are_polled_through() -> None:
    """A retryable source error is recorded and the watch keeps polling."""
    clock, sink = ManualClock(now=0.0), RecordingSink()
    source = Scripted(RetryableError("ci_network", "connection reset"), CiState("success"))
    outcome = watch_ci(source, GREEN, CI, sink, None, CiWatchAids(Pacing(clock, clock.sleep)))
    assert outcome.state == "success"
    assert any("connection reset" in message for _, message, _ in sink.of_kind("ci"))


def test_no_ci_is_skipped_immediately() -> None:
    """A repo without CI is not waited for."""
    outcome = watch_ci(NoCi(), GREEN, CI, RecordingSink(), None)
    assert outcome.state == "skipped" and not outcome.inconclusive


def test_tracker_source_and_factory() -> None:
    """Forge CI kinds go through the tracker; woodpecker needs its URL and repo id."""

    class Tracker:
        def commit_ci_state(self, slug: str, sha: str) -> CiState:
            return CiState("success", (f"{slug}@{sha}",))

    source = ci_source(CI, tracker=Tracker(), slug="o/r")
    assert isinstance(source, TrackerCiSource)
    assert source.state("abc").details == ("o/r@abc",)
    assert isinstance(ci_source(CiSettings(), tracker=None, slug="o/r"), NoCi)
    with pytest.raises(FatalError, match=r"ci\.base_url"):
        ci_source(CiSettings(kind="woodpecker"), tracker=None, slug="o/r")


def test_woodpecker_200_without_json_is_a_retryable_bad_response() -> None:
    """A 200 carrying an HTML page is ``ci_bad_response`` (retried), not a raw decode error."""
    with Receiver() as server:
        server.route("GET", "/api/repos/7/pipelines", b"<html>maintenance</html>")
        with pytest.raises(RetryableError) as caught:
            WoodpeckerCiSource(server.url, None, "7").state(GREEN)
    assert caught.value.kind == "ci_bad_response"


def test_cancelled_ci_is_judged_by_a_later_commit_holding_it() -> None:
    """Cancelled on the watched commit: the later commit's CI decides, and says so."""
    later = "a" * 40
    answers = {GREEN: CiState("cancelled", ("check test: cancelled",)), later: CiState("success")}
    asked: list[str] = []

    class BySha:
        def state(self, sha: str) -> CiState:
            asked.append(sha)
            return answers[sha]

    clock = ManualClock(now=0.0)
    aids = CiWatchAids(
        Pacing(clock, clock.sleep), later=lambda sha: later if sha == GREEN else None
    )
    outcome = watch_ci(BySha(), GREEN, CI, RecordingSink(), None, aids)
    assert outcome.state == "success" and asked == [GREEN, later]
    assert outcome.detail.startswith(f"judged by {later[:12]}") and outcome.judged == later


def test_cancelled_ci_with_nothing_later_waits_then_says_why() -> None:
    """Cancelled and not superseded: no failure; at the deadline, inconclusive with the reason."""
    clock = ManualClock(now=0.0)
    outcome = watch_ci(
        Scripted(CiState("cancelled", ("check test: cancelled",))),
        GREEN,
        CI,
        RecordingSink(),
        None,
        CiWatchAids(Pacing(clock, clock.sleep), later=lambda sha: None),
    )
    assert outcome.state == "timeout" and outcome.inconclusive and clock.now == 600
    assert "was cancelled" in outcome.detail and "no later commit" in outcome.detail
