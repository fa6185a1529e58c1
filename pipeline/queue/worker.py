"""One claimed run as the scheduler executes it: its context and its outcome.

The run pipeline (a callable later issues supply) gets a ``RunContext`` whose
every write is fenced on the lease. When the run must stop (cancel, lost
lease, timeout, shutdown) the scheduler sets the context's ``StopToken``;
``pipeline.core.proc.run_command`` then kills the agent's process group, and the
outcome is decided here from the stop reason or the classified error.
"""

from __future__ import annotations

import errno
import logging
import random
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pipeline.config.settings import SchedulerSettings
from pipeline.core.errors import (
    CancelRequested,
    EscalationError,
    FatalError,
    IssueWithdrawn,
    LeaseLost,
    PipelineError,
    RetryableError,
)
from pipeline.core.proc import StopToken
from pipeline.core.states import TERMINAL_STATES, TIMEOUT_CLASS, Outcome, RunState
from pipeline.store.records import Run
from pipeline.store.repos import FreezePolicy, RepoFreeze
from pipeline.store.roles import WorkerStore

log = logging.getLogger(__name__)

MAX_BACKOFF_EXPONENT = 30


class ShuttingDown(PipelineError):
    """The daemon is stopping: the run is left to lease recovery, nothing is written."""

    error_class = "shutdown"


def backoff_delay(
    failures: int,
    *,
    base_s: float,
    max_s: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Capped exponential backoff with full jitter; a server's Retry-After wins when longer.

    ``failures`` is how many failures the run had before this one.
    """
    ceiling = min(max_s, base_s * 2 ** min(max(failures, 0), MAX_BACKOFF_EXPONENT))
    delay = (rng or random).uniform(0.0, ceiling)
    if retry_after_s is not None and retry_after_s > delay:
        return retry_after_s
    return delay


def stop_error(reason: str | None, timeout_s: float | None = None) -> PipelineError:
    """The error a pipeline raises from ``RunContext.check`` for a stop reason."""
    if reason == "cancelled":
        return CancelRequested("the run was cancelled")
    if reason == "lease_lost":
        return LeaseLost("the run's lease was lost; another owner may hold it")
    if reason == "timeout":
        limit = f" of {timeout_s:g} s" if timeout_s is not None else ""
        return RetryableError(TIMEOUT_CLASS, f"the run hit its time limit{limit}")
    return ShuttingDown(f"the worker is stopping ({reason})")


RunObserver = Callable[[str, str, Mapping[str, object]], None]


class RunContext:
    """What the run pipeline gets: the run, a stop token and fenced writes.

    ``observers`` see every event, state change (kind ``state``) and recorded
    fact (kind ``update``) after it is written, e.g. the run's progress comment.
    """

    def __init__(
        self, run: Run, owner: str, store: WorkerStore, stop: StopToken, kill_grace_s: float
    ) -> None:
        self.run = run
        self.owner = owner
        self.attempt = run.attempt
        self.store = store
        self.stop = stop
        self.kill_grace_s = kill_grace_s
        self.observers: list[RunObserver] = []

    def _tell(self, kind: str, message: str, data: Mapping[str, object]) -> None:
        for observer in self.observers:
            observer(kind, message, data)

    def events(self, kind: str, message: str, data: Mapping[str, object] | None = None) -> None:
        """Append to the run's timeline (an ``EventSink``); LeaseLost stops the run."""
        self._fenced(
            lambda: self.store.append_event_fenced(
                self.run.id, self.owner, self.attempt, kind, message, data
            )
        )
        self._tell(kind, message, data or {})

    def set_state(self, state: str, message: str | None = None, **fields: object) -> None:
        def write() -> None:
            self.run = self.store.transition(
                self.run.id, self.owner, self.attempt, state, message, **fields
            )

        self._fenced(write)
        self._tell("state", message or state, {**fields, "state": state})

    def update(self, **fields: object) -> None:
        self._fenced(lambda: self.store.update_run(self.run.id, self.owner, self.attempt, **fields))
        self._tell("update", "", fields)

    def check(self) -> None:
        """Raise the stop's error (CancelRequested, LeaseLost, timeout) if the run must stop."""
        if self.stop.stopped:
            raise stop_error(self.stop.reason)

    def _fenced(self, write: Callable[[], None]) -> None:
        try:
            write()
        except LeaseLost:
            self.stop.stop("lease_lost")
            raise


@dataclass
class Worker:
    """Book-keeping for one run this process is executing."""

    run: Run
    ctx: RunContext
    started: float
    deadline: float | None
    last_renewed: float
    last_beat: float
    stop_at: float | None = None
    settled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    @property
    def stop(self) -> StopToken:
        return self.ctx.stop

    def request_stop(self, reason: str, now: float) -> None:
        if not self.stop.stopped:
            self.stop_at = now
        self.stop.stop(reason)

    def claim_settlement(self) -> bool:
        """True for the one caller (worker thread or monitor) that writes the outcome."""
        with self.lock:
            if self.settled:
                return False
            self.settled = True
            return True


def write_outcome(
    store: WorkerStore,
    worker: Worker,
    settings: SchedulerSettings,
    result: Outcome | str | None,
    exc: BaseException | None,
    freeze_policy: FreezePolicy | None = None,
) -> Run | None:
    """Write what the run's end means; None when nothing may be written (lease lost).

    A run stopped by its time limit ends with the error class ``timeout``
    (retried like any transient failure), never as ``cancelled``, and a run
    stopped by the daemon's shutdown is left to lease recovery: whatever the
    pipeline raised while being stopped, the stop's reason decides. An ending
    ``freeze_policy`` asks a freeze for is written together with that freeze.
    """
    run, reason = worker.run, worker.stop.reason
    if reason == "lease_lost" or isinstance(exc, LeaseLost):
        return None
    ending = _Ending(store, worker, freeze_policy)
    outcome = _as_outcome(result) if exc is None else None
    if outcome is not None:
        return ending.finish(outcome)
    if reason == "timeout":
        exc = stop_error("timeout", run.timeout_s)
    elif reason == "cancelled" or (reason is None and isinstance(exc, CancelRequested)):
        said = str(exc) if isinstance(exc, IssueWithdrawn) else "cancelled while running"
        return ending.finish(Outcome(RunState.CANCELLED, "cancelled", said))
    elif reason is not None or isinstance(exc, ShuttingDown):
        # Shutting down, whatever the stopped step raised (a killed git or agent raises
        # CancelRequested): the lease expires and a sweep requeues the run.
        return None
    if exc is None:
        exc = RuntimeError(f"the run pipeline returned {result!r}, not an outcome")
    return _write_error(ending, settings, exc)


@dataclass(frozen=True)
class _Ending:
    """The fenced writes that end (or retry) one run, each with the freeze it calls for."""

    store: WorkerStore
    worker: Worker
    freeze_policy: FreezePolicy | None

    def freeze(self, outcome: Outcome) -> RepoFreeze | None:
        policy = self.freeze_policy
        return policy(self.worker.run, outcome) if policy is not None else None

    def finish(self, outcome: Outcome) -> Run:
        return self.store.finish(
            self.worker.run.id,
            self.worker.ctx.owner,
            self.worker.ctx.attempt,
            outcome.state,
            error_class=outcome.error_class,
            error=outcome.error,
            summary=outcome.summary,
            freeze=self.freeze(outcome),
        )

    def retry(self, delay_s: float, error_class: str, error: str) -> Run:
        """A counted failure; the freeze is written only if it uses up the attempts."""
        used_up = self.freeze(Outcome(RunState.FAILED, error_class, error))
        ctx = self.worker.ctx
        run: Run = self.store.schedule_retry(
            self.worker.run.id,
            ctx.owner,
            ctx.attempt,
            delay_s=delay_s,
            error_class=error_class,
            error=error,
            freeze=used_up,
        )
        if run.state == RunState.RETRY_WAIT:
            log.warning(
                "run %s: attempt %s failed (%s), retry in %.0fs: %s",
                run.id,
                ctx.attempt,
                error_class,
                delay_s,
                error[:300],
            )
        return run


def _as_outcome(result: Outcome | str | None) -> Outcome | None:
    """The pipeline's result as a terminal ``Outcome`` (``None`` is a plain success)."""
    if result is None:
        return Outcome(RunState.SUCCEEDED)
    if isinstance(result, Outcome):
        return result if result.state in TERMINAL_STATES else None
    if result in TERMINAL_STATES:
        return Outcome(RunState(result))
    return None


def _write_error(ending: _Ending, settings: SchedulerSettings, exc: BaseException) -> Run:
    if isinstance(exc, FatalError):
        return ending.finish(Outcome(RunState.FAILED, exc.kind, str(exc)))
    if isinstance(exc, EscalationError):
        return ending.finish(Outcome(RunState.ESCALATED, exc.reason, str(exc)))
    run, owner, attempt = ending.worker.run, ending.worker.ctx.owner, ending.worker.ctx.attempt
    kind, retry_after = unexpected_kind(exc), None
    if isinstance(exc, RetryableError):
        kind, retry_after = exc.kind, exc.retry_after_s
    else:
        ending.store.append_event_fenced(
            run.id,
            owner,
            attempt,
            "error",
            f"internal error: {type(exc).__name__}: {exc}",
            {"traceback": summarise_traceback(exc)},
        )
    delay = backoff_delay(
        run.failures,
        base_s=settings.backoff_base_s,
        max_s=settings.backoff_max_s,
        retry_after_s=retry_after,
    )
    message = str(exc) if isinstance(exc, RetryableError) else f"{type(exc).__name__}: {exc}"
    return ending.retry(delay, kind, message)


def unexpected_kind(exc: BaseException) -> str:
    """A retry kind for an error nobody classified: disk full, network, or internal."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk_full"
    if isinstance(exc, ConnectionError | TimeoutError):
        return "network"
    return "internal"


def summarise_traceback(exc: BaseException, lines: int = 12) -> str:
    """The last frames of ``exc``'s traceback, bounded for the timeline."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])
