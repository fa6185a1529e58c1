"""CI sources and the watch that waits for a pushed SHA's CI verdict.

A ``CiSource`` answers one question: what does CI say about this commit right
now (``pending``, ``success``, ``failure``, ``cancelled`` = stopped before a
verdict, or ``none`` = nothing reported yet).
The forge's own CI comes through the tracker (``TrackerCiSource``); Woodpecker
is asked directly over its REST API; ``NoCi`` is for repos without CI.
``watch_ci`` polls a source until a verdict, a timeout for CI to appear at
all, or the overall timeout; the last two are inconclusive.

CI ``cancelled`` on the watched commit (``concurrency: cancel-in-progress``
when a newer push came) is no verdict on it: when the default branch has moved
on to a commit that holds it (``later``), that commit's CI is watched instead;
otherwise the watch goes on, and at its deadline says the CI was cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from pipeline.config.settings import CiSettings, SecretRef
from pipeline.core.errors import FatalError, PipelineError, RetryableError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.trackers.base import CiState, CiStatus
from pipeline.watch.pacing import Pacing

__all__ = [
    "CiOutcome",
    "CiSource",
    "CiState",
    "CiStatus",
    "CiWatchAids",
    "NoCi",
    "TrackerCiSource",
    "WoodpeckerCiSource",
    "judge_woodpecker",
    "watch_ci",
]

# Woodpecker ``StatusValue`` (server/model/const.go, the server's swagger).
_WP_OK = frozenset({"success", "skipped"})
_WP_FAILED = frozenset({"failure", "error", "declined"})
# "killed by user" and "canceled but hasn't been started" (the swagger's words): stopped
# before a verdict, as a GitHub check cancelled by a newer push is; no failure.
_WP_CANCELLED = frozenset({"killed", "canceled"})
_WP_PENDING = frozenset({"pending", "running", "blocked", "created"})


class CiSource(Protocol):
    """What CI says about one commit right now."""

    def state(self, sha: str) -> CiState: ...


class SupportsCommitCiState(Protocol):
    def commit_ci_state(self, slug: str, sha: str) -> CiState: ...


class NoCi:
    """A repo without CI: there is never anything to wait for."""

    def state(self, sha: str) -> CiState:
        return CiState("none", ("no CI configured",))


@dataclass(frozen=True)
class TrackerCiSource:
    """The forge's CI as its tracker reports it (GitHub, Gitea/Forgejo, GitLab)."""

    tracker: SupportsCommitCiState
    slug: str

    def state(self, sha: str) -> CiState:
        return self.tracker.commit_ci_state(self.slug, sha)


def judge_woodpecker(
    pipelines: Iterable[Mapping[str, Any]],
    sha: str,
    link: Callable[[Mapping[str, Any]], str] = lambda p: "",
) -> CiState:
    """The newest Woodpecker pipeline (highest ``number``) whose ``commit`` is ``sha``."""
    mine = [p for p in pipelines if p.get("commit") == sha]
    if not mine:
        return CiState("none")
    newest = max(mine, key=lambda p: int(p.get("number") or 0))
    status = str(newest.get("status"))
    detail = f"woodpecker pipeline #{newest.get('number')} ({newest.get('event')}): {status}"
    errors = [str(e.get("message")) for e in newest.get("errors") or [] if isinstance(e, dict)]
    details = (detail, *(f"error: {message}" for message in errors))
    if status in _WP_FAILED:
        return CiState("failure", details, link(newest))
    if status in _WP_CANCELLED:
        return CiState("cancelled", details, link(newest))
    if status in _WP_OK:
        return CiState("success", details, link(newest))
    return CiState("pending", details, link(newest))


@dataclass
class WoodpeckerCiSource:
    """Woodpecker's pipelines for a repo (``GET /api/repos/{repo_id}/pipelines``).

    The list has no commit filter, so the newest pages are read and matched on
    the ``commit`` field here.
    """

    base_url: str
    token: SecretRef | str | None
    repo_id: str
    pages: int = 2
    per_page: int = 50
    timeout_s: float = 15.0
    transport: httpx.BaseTransport | None = None

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")

    def _headers(self) -> dict[str, str]:
        token = self.token.resolve() if isinstance(self.token, SecretRef) else self.token
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _page(self, client: httpx.Client, page: int) -> list[Mapping[str, Any]]:
        path = f"/api/repos/{self.repo_id}/pipelines"
        try:
            response = client.get(path, params={"page": page, "perPage": self.per_page})
        except httpx.HTTPError as exc:
            raise RetryableError("ci_network", f"woodpecker {self.base_url}{path}: {exc}") from exc
        if response.status_code in (401, 403, 404):
            raise FatalError(
                "ci_config",
                f"woodpecker {self.base_url}{path} answered "
                f"{response.status_code}; check ci.base_url, ci.repo_id, ci.token",
            )
        if response.status_code >= 400:
            raise RetryableError("ci_http", f"woodpecker {path} answered {response.status_code}")
        try:
            data = response.json()
        except ValueError as exc:  # a 200 with an HTML error page or a cut-off body
            raise RetryableError(
                "ci_bad_response",
                f"woodpecker {path}: answered {response.status_code} without JSON",
            ) from exc
        if not isinstance(data, list):
            raise RetryableError("ci_bad_response", f"woodpecker {path}: expected a JSON list")
        return [item for item in data if isinstance(item, dict)]

    def link(self, pipeline: Mapping[str, Any]) -> str:
        return f"{self.base_url}/repos/{self.repo_id}/pipeline/{pipeline.get('number')}"

    def state(self, sha: str) -> CiState:
        with httpx.Client(
            base_url=self.base_url,
            headers=self._headers(),
            timeout=self.timeout_s,
            transport=self.transport,
        ) as client:
            for page in range(1, self.pages + 1):
                pipelines = self._page(client, page)
                verdict = judge_woodpecker(pipelines, sha, self.link)
                if verdict.state != "none" or len(pipelines) < self.per_page:
                    return verdict
        return CiState("none")


def ci_source(ci: CiSettings, *, tracker: SupportsCommitCiState | None, slug: str) -> CiSource:
    """The source a repo's ``[ci]`` settings name."""
    if ci.kind == "none":
        return NoCi()
    if ci.kind == "woodpecker":
        if not ci.base_url or not ci.repo_id:
            raise FatalError("ci_config", "ci.kind = 'woodpecker' needs ci.base_url and ci.repo_id")
        return WoodpeckerCiSource(ci.base_url, ci.token, ci.repo_id)
    if tracker is None:
        raise FatalError("ci_config", f"ci.kind = {ci.kind!r} needs the repo's tracker")
    return TrackerCiSource(tracker, slug)


SUMMARY_CHARS = 240
OutcomeState = Literal["success", "failure", "skipped", "none_appeared", "timeout", "stopped"]
# The default branch's head when it is a later commit holding the given one, else None.
Later = Callable[[str], str | None]


@dataclass(frozen=True)
class CiOutcome:
    """``judged``: the commit whose CI gave the verdict when not the watched one (after a
    cancel, a later commit of the default branch holding it), else ``""``."""

    state: OutcomeState
    detail: str
    log_hint: str = ""
    judged: str = ""

    @property
    def inconclusive(self) -> bool:
        return self.state in ("none_appeared", "timeout")

    @property
    def summary(self) -> str:
        """``detail`` as one bounded line, for the issue's comments: check names are the
        workflow's to choose (any length, any line breaks); the timeline keeps it whole."""
        lines = (" ".join(line.split()) for line in self.detail.splitlines())
        text = "; ".join(line for line in lines if line)
        return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


@dataclass(frozen=True)
class CiWatchAids:
    """What a watch may lean on: its pacing, and ``later`` for a cancelled CI."""

    pacing: Pacing = field(default_factory=Pacing)
    later: Later | None = None


def watch_ci(
    source: CiSource,
    sha: str,
    ci: CiSettings,
    events: EventSink,
    stop: StopToken | None,
    aids: CiWatchAids | None = None,
) -> CiOutcome:
    """Poll ``source`` for ``sha`` until a verdict or a timeout.

    Transient source errors are recorded and polled through; configuration
    errors (``FatalError``) propagate. One ``ci`` event per change of state.
    """
    if isinstance(source, NoCi):
        events("ci", "no CI configured; skipping", {"sha": sha})
        return CiOutcome("skipped", "no CI configured")
    aids = aids or CiWatchAids()
    return _CiWatch(source, sha, ci, events, stop, aids, judged=sha).run()


@dataclass
class _CiWatch:
    """One watch of one SHA's CI: its polls and what it has seen so far.

    ``judged`` is the commit whose CI is read: ``sha``, or after a cancel a later
    commit of the default branch that holds it.
    """

    source: CiSource
    sha: str
    ci: CiSettings
    events: EventSink
    stop: StopToken | None
    aids: CiWatchAids
    judged: str
    seen_any: bool = False
    last: str = ""

    def poll(self) -> CiState:
        try:
            current = self.source.state(self.judged)
        except RetryableError as exc:
            self.events("ci", f"CI source error (will poll again): {exc}", {"kind": exc.kind})
            current = CiState("pending" if self.seen_any else "none")
        if current.state != self.last:
            self.last = current.state
            self.events(
                "ci",
                f"CI for {self.judged[:12]}: {current.state}",
                {
                    "state": current.state,
                    "details": list(current.details)[:20],
                    "log_hint": current.log_hint,
                },
            )
        self.seen_any = self.seen_any or current.state in ("pending", "cancelled")
        return current

    def follow(self) -> None:
        """The judged commit's CI was cancelled: judge a later commit holding it, if any."""
        try:
            later = self.aids.later(self.judged) if self.aids.later else None
        except PipelineError as exc:  # the remote unreachable just now: ask at the next poll
            self.events("ci", f"could not look for a later commit (will ask again): {exc}")
            return
        if later:
            self.events(
                "ci",
                f"CI for {self.judged[:12]} was cancelled; judged by {later[:12]}, "
                f"a later commit of the default branch holding {self.sha[:12]}",
                {"state": "cancelled", "judged_by": later},
            )
            self.judged, self.last = later, ""

    def verdict(self, current: CiState) -> CiOutcome:
        detail, judged = "\n".join(current.details), ""
        if self.judged != self.sha:
            judged = self.judged
            detail = (
                f"judged by {self.judged[:12]}, a later commit holding {self.sha[:12]} "
                f"(whose CI was cancelled):\n{detail}"
            )
        state: OutcomeState = "success" if current.state == "success" else "failure"
        return CiOutcome(state, detail, current.log_hint, judged)

    def given_up(self, elapsed: float, current: CiState) -> CiOutcome | None:
        ci, sha = self.ci, self.sha[:12]
        if not self.seen_any and elapsed >= ci.appear_timeout_s:
            detail = f"no CI appeared for {sha} within {ci.appear_timeout_s:.0f}s"
            return _give_up(self.events, "none_appeared", detail)
        if elapsed < ci.timeout_s:
            return None
        if current.state == "cancelled":
            detail = (
                f"CI for {self.judged[:12]} was cancelled before it judged the commit, and "
                f"no later commit of the default branch holds {sha} to judge it by "
                f"(waited {ci.timeout_s:.0f}s for one):\n"
            )
        else:
            detail = f"CI for {sha} still pending after {ci.timeout_s:.0f}s:\n"
        return _give_up(self.events, "timeout", detail + "\n".join(current.details))

    def run(self) -> CiOutcome:
        pause, clock, stop = self.aids.pacing.pause(self.stop), self.aids.pacing.clock, self.stop
        started = clock()
        while not (stop is not None and stop.stopped):
            current = self.poll()
            if current.state in ("success", "failure"):
                return self.verdict(current)
            if current.state == "cancelled":
                self.follow()
            ended = self.given_up(clock() - started, current)
            if ended is not None:
                return ended
            pause(self.ci.poll_interval_s)
        return CiOutcome("stopped", f"stopped: {stop.reason if stop else ''}")


def _give_up(events: EventSink, state: OutcomeState, detail: str) -> CiOutcome:
    events("ci", detail, {"state": state})
    return CiOutcome(state, detail)
