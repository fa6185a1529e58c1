"""The progress comment's text and pacing, with a recording comment slot."""

from __future__ import annotations

import itertools
import threading
import time

from pipeline.core.errors import EscalationError, LeaseLost, RetryableError
from pipeline.core.masking import register_secret
from pipeline.run.implement import summarise_tests
from pipeline.run.progress import (
    STEP_CHARS,
    CommentSlot,
    ProgressComment,
    ProgressView,
    one_line,
    progress_after_error,
    progress_marker,
)


class _Recorder(CommentSlot):
    """A slot that records each written body and when it was written."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.times: list[float] = []
        self.wrote = threading.Event()

    def write(self, body: str) -> None:
        self.bodies.append(body)
        self.times.append(time.monotonic())
        self.wrote.set()


def test_view_shows_every_fact_and_the_marker() -> None:
    """State, step, tests with counts, SHA, CI, deploy, review, cost and link are all shown."""
    view = ProgressView(12, "https://afk.example/runs/12")
    view.apply("state", "testing", {"state": "testing"})
    view.apply("agent", "editing lib.py\nmore detail", {})
    view.apply("test", "tests failed", {"ok": False, "counts": "2 tests, failures=1"})
    view.apply("test", "tests passed", {"ok": True, "counts": "2 tests, all passed"})
    view.apply("update", "", {"pushed_sha": "abc123", "cost_usd": 0.4})
    view.apply("verdict", "healthy", {"ci": "green (1 check)", "deploy": "healthy after 2"})
    view.apply("review", "approved: looks right", {"verdict": "approve"})
    text = view.render()
    assert text.startswith("**afk-pipeline run 12: testing**")
    for part in (
        "- Step: approved: looks right",
        "- Tests: green (2 tests, all passed); 2 run(s): 1 green, 1 red",
        "- Pushed: `abc123`",
        "- CI: green (1 check)",
        "- Deploy: healthy after 2",
        "- Review: approved: looks right",
        "- Cost so far: $0.40",
        "- Run page: https://afk.example/runs/12",
    ):
        assert part in text
    assert text.endswith(progress_marker(12))


def test_the_agents_words_mention_nobody_and_the_link_stays_whole() -> None:
    """The step and the CI line are others' words, edited into the daemon's comment again
    and again: no mention or reference in them (``inert_quote``); the daemon's link is kept."""
    view = ProgressView(4, "https://bot@afk.example/runs/4")
    view.apply("agent", "asking @victim about other/repo#3\n/close", {})
    view.apply("verdict", "red", {"ci": "check @org/team: failure (#9)", "deploy": ""})
    text = view.render()
    for word in ("@victim", "@org/team", "other/repo#3", "(#9)"):
        assert word not in text and word in text.replace("\u200b", ""), text
    assert "\n/close" not in text
    assert "- Run page: https://bot@afk.example/runs/4" in text


def test_test_counts_read_unittest_and_pytest_summaries() -> None:
    """The runner's own counts become one phrase; output without them gives none."""
    assert summarise_tests("Ran 4 tests in 0.01s\n\nOK\n") == "4 tests, all passed"
    assert summarise_tests("Ran 2 tests in 0.01s\n\nFAILED (failures=1)\n") == "2 tests, failures=1"
    assert summarise_tests("== 3 passed, 1 failed in 0.1s ==") == "3 passed, 1 failed"
    assert summarise_tests("make: *** [test] Error 2") == ""


def test_every_state_is_written_in_order_and_paced() -> None:
    """Quick state changes are not coalesced away: each state is written, interval apart."""
    slot = _Recorder()
    progress = ProgressComment(ProgressView(3, "link"), slot, interval_s=0.2)
    progress.start()
    assert slot.wrote.wait(30)
    for state in ("implementing", "testing", "publishing", "watching"):
        progress.observe("agent", f"step in {state}")
        progress.observe("state", state, {"state": state})
    progress.close("succeeded")
    progress.join(60)
    heads = [body.splitlines()[0] for body in slot.bodies]
    states = [head.split(": ", 1)[1].rstrip("*") for head in heads]
    assert states == [
        "claimed",
        "implementing",
        "testing",
        "publishing",
        "watching",
        "succeeded",
    ], heads
    gaps = [b - a for a, b in itertools.pairwise(slot.times)]
    assert all(gap >= 0.2 for gap in gaps), gaps


def test_the_first_write_is_done_before_the_run_goes_on() -> None:
    """``start`` writes on the run's own thread: a daemon that dies at the run's next step
    (right after its push, say) still leaves the comment its restart edits."""
    slot = _Recorder()
    writers: list[threading.Thread] = []
    record = slot.write

    def on_this_thread(body: str) -> None:
        writers.append(threading.current_thread())
        record(body)

    slot.write = on_this_thread  # type: ignore[method-assign]
    progress = ProgressComment(ProgressView(6, "link"), slot, interval_s=0.05)
    progress.start()
    assert writers == [threading.current_thread()]
    assert "run 6: claimed" in slot.bodies[0]
    progress.abandon()


def test_failed_write_is_retried_and_the_run_goes_on() -> None:
    """A forge error is logged, not raised, and the next write carries the latest view."""
    slot = _Recorder()
    calls = {"n": 0}
    record = slot.write

    def flaky(body: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("forge down")
        record(body)

    slot.write = flaky  # type: ignore[method-assign]
    progress = ProgressComment(ProgressView(4, "link"), slot, interval_s=0.05)
    progress.start()
    progress.observe("agent", "working")
    progress.close("succeeded", "done")
    progress.join(60)
    assert slot.bodies and "run 4: succeeded" in slot.bodies[-1] and "working" in slot.bodies[-1]


def _ending(exc: BaseException, stop_reason: str | None, last_attempt: bool = False) -> str | None:
    """The first line of the final write after ``exc``, or None if nothing was written."""
    slot = _Recorder()
    progress = ProgressComment(ProgressView(5, "link"), slot, interval_s=0.01)
    progress_after_error(progress, exc, stop_reason, last_attempt)
    progress.join(60)
    return slot.bodies[-1].splitlines()[0] if slot.bodies else None


def test_an_attempt_that_raised_ends_as_the_worker_will_judge_it() -> None:
    """Escalated, retrying or failed on the last attempt; nothing when the run is not ours."""
    network = RetryableError("network", "connection reset")
    assert _ending(EscalationError("blocked", "which port?"), None) == (
        "**afk-pipeline run 5: escalated**"
    )
    assert _ending(network, None) == "**afk-pipeline run 5: retrying**"
    assert _ending(network, None, last_attempt=True) == "**afk-pipeline run 5: failed**"
    assert _ending(network, "shutdown") is None
    assert _ending(LeaseLost("gone"), "lease_lost") is None


def test_the_final_writer_outlives_a_daemon_worker_thread() -> None:
    """Closed from a daemon thread (the run's worker is one), the writer is still not a
    daemon thread, so a process that exits waits for the final state."""
    progress = ProgressComment(ProgressView(7, "link"), _Recorder(), interval_s=0.01)
    worker = threading.Thread(target=progress.close, args=("succeeded",), daemon=True)
    worker.start()
    worker.join(60)
    assert progress._drainer is not None and not progress._drainer.daemon
    progress.join(60)


def test_a_hurried_writer_skips_the_states_not_shown_and_writes_the_end() -> None:
    """A stopping daemon: the final state is written at once, the unshown states left out."""
    slot = _Recorder()
    progress = ProgressComment(ProgressView(8, "link"), slot, interval_s=10)
    progress.start()
    for state in ("implementing", "testing"):
        progress.observe("state", state, {"state": state})
    progress.close("escalated", "blocked: which port?")
    progress.hurry()
    progress.join(60)
    heads = [body.splitlines()[0] for body in slot.bodies]
    assert heads == ["**afk-pipeline run 8: claimed**", "**afk-pipeline run 8: escalated**"]


def test_a_step_line_masks_a_key_before_cutting_it() -> None:
    """A step cut inside a key keeps none of it (after a ``…``, ``mask`` would recognise
    only a piece of at least 4 characters)."""
    key = "sntl-agent-key-7Qx9vLp2"
    register_secret(key)
    for shown in range(1, len(key)):
        line = one_line(f"{'y' * (STEP_CHARS - 1 - shown)}{key} more\nnext")
        assert key[:shown] + "…" not in line and len(line) <= STEP_CHARS, shown
