"""One live progress comment per run, edited in place on the run's issue.

The comment shows the run's state, the agent's current step in one line, the
test gate (green or red, with counts), the pushed SHA, the CI and deploy
verdicts, the review verdict, the cost so far and a link to the run page. It
follows the run's timeline: ``ProgressComment.observe`` takes every event,
state change and recorded fact the run writes (``RunContext`` observers).

The first write happens at the claim, before the run goes on. Edits are
paced: at most one write per ``interval_s`` (5 s) per run, the latest state
coalesced into the next write by a timer; ``close`` always
writes the final state (from a writer thread, so the run's end is not held
up by the pacing; a stopping daemon has it write at once, see
``pipeline.run.progress_final``, which also settles, after a crash, the final
state a killed writer never wrote). A crash never leaves two comments: the comment's id
is recorded on the run after it is posted, and before posting a run looks
for its hidden marker (``<!-- afk-progress run=12 -->``) among the issue's
comments, so a run restarted between posting and recording finds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pipeline.core.errors import (
    CancelRequested,
    EscalationError,
    FatalError,
    LeaseLost,
    RetryableError,
)
from pipeline.core.masking import mask
from pipeline.core.states import TERMINAL_STATES, Outcome, RunState
from pipeline.intake.issue_text import PROGRESS_MARK
from pipeline.intake.sanitize import inert_comments, inert_quote
from pipeline.trackers.base import Tracker, carries_mark

log = logging.getLogger(__name__)

EDIT_INTERVAL_S = 5.0
DRAIN_ATTEMPTS = 3  # failed writes after the run's end before the comment is left as it is
STEP_CHARS = 160
STEP_KINDS = frozenset({"agent", "tool", "test", "publish", "setup", "ci", "deploy", "review"})


def progress_marker(run_id: int) -> str:
    return f"{PROGRESS_MARK}{run_id} -->"


def one_line(text: str, limit: int = STEP_CHARS) -> str:
    """The first non-empty line of ``text``, masked, then cut to ``limit`` characters."""
    line = mask(next((part.strip() for part in text.splitlines() if part.strip()), ""))
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class ProgressView:
    """What the comment says; ``apply`` folds one timeline entry in."""

    run_id: int
    link: str
    state: str = "claimed"
    step: str = ""
    tests_green: int = 0
    tests_red: int = 0
    tests_last: str = ""  # "green (3 passed)" / "red (1 failed)"
    pushed_sha: str | None = None
    ci: str = ""
    deploy: str = ""
    review: str = ""
    cost_usd: float = 0.0
    ending: str = ""

    def apply(self, kind: str, message: str, data: Mapping[str, object]) -> None:
        if kind == "state":
            self.state = str(data.get("state") or message)
        if kind in ("state", "update"):
            self._facts(data)
        if kind == "verdict":
            self.ci, self.deploy = str(data.get("ci", "")), str(data.get("deploy", ""))
        if kind == "test" and "ok" in data:
            self._test(bool(data["ok"]), str(data.get("counts") or ""))
        if kind == "review" and "verdict" in data:
            self.review = one_line(message, 400)
        if kind in STEP_KINDS and message:
            self.step = one_line(message)

    def _facts(self, data: Mapping[str, object]) -> None:
        sha, cost = data.get("pushed_sha"), data.get("cost_usd")
        if isinstance(sha, str) and sha:
            self.pushed_sha = sha
        if isinstance(cost, int | float):
            self.cost_usd = float(cost)

    def _test(self, ok: bool, counts: str) -> None:
        if ok:
            self.tests_green += 1
        else:
            self.tests_red += 1
        word = "green" if ok else "red"
        self.tests_last = f"{word} ({counts})" if counts else word

    def render(self) -> str:
        lines = [f"**afk-pipeline run {self.run_id}: {self.state}**", ""]
        if self.ending:
            lines.append(f"- Outcome: {self.ending}")
        lines.append(f"- Step: {self.step or 'starting'}")
        lines.append(f"- Tests: {self._tests_line()}")
        lines.append(f"- Pushed: {f'`{self.pushed_sha}`' if self.pushed_sha else 'not yet'}")
        lines.append(f"- CI: {self.ci or 'not yet'}")
        lines.append(f"- Deploy: {self.deploy or 'not yet'}")
        if self.review:
            lines.append(f"- Review: {self.review}")
        lines.append(f"- Cost so far: ${self.cost_usd:.2f}")
        text = inert_quote("\n".join(lines))  # the values are others' words: a step, a check
        text += f"\n- Run page: {self.link}"  # the daemon's own link, as configured
        return inert_comments(text) + "\n\n" + progress_marker(self.run_id)

    def _tests_line(self) -> str:
        if not self.tests_last:
            return "not run yet"
        runs = self.tests_green + self.tests_red
        return f"{self.tests_last}; {runs} run(s): {self.tests_green} green, {self.tests_red} red"


def outcome_text(outcome: Outcome) -> str:
    """The final line of a run's progress: why it ended, if not a plain success."""
    if outcome.state == RunState.SUCCEEDED:
        return one_line(outcome.summary or "", 300)
    why = f"{outcome.error_class}: " if outcome.error_class else ""
    return one_line(f"{why}{outcome.error or outcome.state}", 300)


def progress_after_error(
    progress: ProgressComment, exc: BaseException, stop_reason: str | None, last_attempt: bool
) -> None:
    """The last write of an attempt that raised, as the worker will judge it
    (``pipeline.queue.worker.write_outcome``); none if the run is not ours to end."""
    left = stop_reason not in (None, "cancelled", "timeout")  # shutdown, lost lease
    if left or isinstance(exc, LeaseLost) or not isinstance(exc, Exception):
        progress.abandon()  # another owner, or this daemon after its restart, goes on
    elif getattr(exc, "error_class", "") == "shutdown":
        progress.abandon()
    elif stop_reason == "cancelled" or isinstance(exc, CancelRequested):
        progress.close(RunState.CANCELLED, one_line(str(exc), 300))
    elif isinstance(exc, EscalationError):
        progress.close(RunState.ESCALATED, one_line(f"{exc.reason}: {exc}", 300))
    elif isinstance(exc, FatalError):
        progress.close(RunState.FAILED, one_line(f"{exc.kind}: {exc}", 300))
    else:
        kind = exc.kind if isinstance(exc, RetryableError) else type(exc).__name__
        if stop_reason == "timeout":
            kind = "timeout"
        if last_attempt:
            progress.close(RunState.FAILED, one_line(f"{kind}: {exc}; no attempts left", 300))
        else:
            progress.close("retrying", one_line(f"{kind}: {exc}; the run is tried again", 300))


class CommentSlot:
    """The run's one comment on its issue: found by marker, else posted; then edited."""

    def __init__(
        self,
        tracker: Tracker,
        where: tuple[str, int],
        run_id: int,
        known_id: str | None,
        remember: Callable[[str], None],
    ) -> None:
        self.tracker = tracker
        self.slug, self.number = where
        self.marker = progress_marker(run_id)
        self.comment_id = known_id
        self.remember = remember

    def write(self, body: str) -> None:
        """One forge write: an edit, or the post that creates the comment."""
        if self.comment_id is None:
            self.comment_id = self._find()
            if self.comment_id is None:
                self.comment_id = self.tracker.comment(self.slug, self.number, body)
                self.remember(self.comment_id)
                return
            self.remember(self.comment_id)
        try:
            self.tracker.edit_comment(self.slug, self.number, self.comment_id, body)
        except FatalError as exc:
            if exc.kind == "missing_comment":  # a human deleted it: post a new one next time
                self.comment_id = None
            raise

    def _find(self) -> str | None:
        for comment in self.tracker.list_comments(self.slug, self.number):
            if carries_mark(comment, self.marker) and comment.id:
                return comment.id
        return None


class Finals(Protocol):
    """Who follows the final writes (``pipeline.run.progress_final.ProgressFinals``)."""

    def closing(self, progress: ProgressComment) -> None: ...

    def drained(self, progress: ProgressComment, *, final: bool) -> None: ...


class ProgressComment:
    """Paced writes of a ``ProgressView`` through a ``CommentSlot``.

    Changes within one state coalesce into the next write; a state is never
    coalesced away: when the state changes before the old one was shown, the
    old view waits in a backlog and is written first, so every state the run
    passed through appears on the issue, in order, at most one write per
    ``interval_s``.
    """

    def __init__(
        self,
        view: ProgressView,
        slot: CommentSlot,
        interval_s: float = EDIT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.view = view
        self.slot = slot
        self.interval_s = interval_s
        self.clock = clock
        self.finals: Finals | None = None
        self._hurry = threading.Event()  # write the final state now, earlier states skipped
        self._ended = False  # closed with the run's terminal state
        self._lock = threading.Lock()  # the view, the backlog and the timer
        self._writing = threading.Lock()  # one forge write at a time
        self._backlog: list[str] = []  # views of earlier states not shown yet, oldest first
        self._dirty = False  # the current view is not written yet
        self._shown = False  # the current state was written (or is in the backlog)
        self._closed = False
        self._timer: threading.Timer | None = None
        self._drainer: threading.Thread | None = None
        self._last_write: float | None = None

    def observe(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        """Fold one timeline entry in; the comment follows within ``interval_s``."""
        with self._lock:
            if self._closed:
                return
            self._fold(lambda: self.view.apply(kind, message, data or {}))
        self._schedule()

    def _fold(self, change: Callable[[], None]) -> None:
        """Apply ``change`` to the view (under ``_lock``), keeping an unshown state's view."""
        before, state = self.view.render(), self.view.state
        change()
        if self.view.render() == before:
            return
        if self.view.state != state:
            if not self._shown:
                self._backlog.append(before)
            self._shown = False
        self._dirty = True

    def start(self) -> None:
        """Write the comment as it is now, before the run goes on.

        The run was just claimed: the issue shows it before any work is done,
        so even a daemon that dies at its next step leaves the comment its
        restart edits. A failed write does not hold the run: the timer retries it.
        """
        with self._lock:
            self._dirty = True
        with self._writing:
            self._write()
        self._schedule()

    def close(self, state: str, ending: str = "") -> None:
        """Write the backlog and the final state, paced, without holding the run up.

        The writer is not a daemon thread (the run's worker thread is one, and a
        thread inherits that): a daemon stopping gracefully still writes the
        final state before its process exits.
        """
        with self._lock:
            if self._closed:
                return
            self._closed, self._ended = True, state in TERMINAL_STATES
            self._cancel_timer()
            self._fold(lambda: self._end(state, ending))
        name = f"progress-{self.view.run_id}"
        self._drainer = threading.Thread(target=self._drain, name=name, daemon=False)
        if self.finals is not None:
            self.finals.closing(self)
        self._drainer.start()

    def hurry(self) -> None:
        """Write the final state now, unpaced, skipping states not shown yet (a daemon stops)."""
        self._hurry.set()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the writes ``close`` started (tests; the daemon never waits)."""
        if self._drainer is not None:
            self._drainer.join(timeout_s)

    def _drain(self) -> None:
        written = False
        try:
            written = self._drain_writes()
        finally:
            if self.finals is not None:
                self.finals.drained(self, final=written and self._ended)

    def _drain_writes(self) -> bool:
        """Write what is left, paced; True once the forge holds the final state."""
        failures = 0
        with self._writing:
            while failures < DRAIN_ATTEMPTS:
                with self._lock:
                    if not (self._dirty or self._backlog):
                        return True
                self._hurry.wait(self._wait())
                failures += 0 if self._write() else 1
        return False

    def _end(self, state: str, ending: str) -> None:
        self.view.state, self.view.ending = state, ending

    def abandon(self) -> None:
        """Stop writing without a final state (the run's lease is gone or the daemon stops)."""
        with self._lock:
            self._closed = True
            self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay: float | None = None) -> None:
        with self._lock:
            pending = self._dirty or bool(self._backlog)
            if self._closed or self._timer is not None or not pending:
                return
            timer = threading.Timer(self._wait() if delay is None else delay, self._flush)
            timer.daemon = True
            self._timer = timer
        timer.start()

    def _wait(self) -> float:
        """Seconds until the next write is allowed."""
        if self._last_write is None:
            return 0.0
        return max(0.0, self._last_write + self.interval_s - self.clock())

    def _flush(self) -> None:
        with self._writing:
            with self._lock:
                self._timer = None
                if self._closed:
                    return
                wait = self._wait()
            if wait > 0:  # another write went out since this timer was set
                self._schedule(wait)
                return
            self._write()
        self._schedule()  # the backlog, or changes that came in while writing

    def _next_body(self) -> tuple[str, bool]:
        """The next body to write (under ``_lock``) and whether it came from the backlog."""
        if self._hurry.is_set():
            self._backlog.clear()
        if self._backlog:
            return self._backlog.pop(0), True
        self._dirty, self._shown = False, True
        return self.view.render(), False

    def _write(self) -> bool:
        """Write the next body, under ``_writing``; a failure is logged and retried later."""
        with self._lock:
            body, from_backlog = self._next_body()
        try:
            self.slot.write(mask(body))
            return True
        except Exception as exc:  # the forge may be down: the run goes on regardless
            with self._lock:
                if from_backlog:
                    self._backlog.insert(0, body)
                else:
                    self._dirty = True
            log.warning("run %s: progress comment not written (%s)", self.view.run_id, exc)
            return False
        finally:
            # Measured after the answer: the next write leaves ``interval_s`` after
            # this one reached the forge, whatever the network did.
            self._last_write = self.clock()
