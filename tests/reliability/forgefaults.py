"""Forge faults at the intake and lifecycle level, against the loopback fake forges.

Each fault hits the ready-issue listing once. The poll must not raise, must
report the error and back off (at least as long as a ``Retry-After`` or rate
reset says), and the next poll after the back-off must enqueue the issue once.
A comment whose POST times out although the forge stored it must not be
posted a second time when retried.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.settings import RepoSettings, Settings, TrackerSettings
from pipeline.core.errors import PipelineError
from pipeline.intake.lifecycle import Lifecycle, marker
from pipeline.intake.service import Intake
from pipeline.store import Store
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import ManualClock, client_for
from pipeline.trackers import HttpOptions

from .figures import Figures

SLUG = "acme/widgets"
READY = "ready-for-agent"
FORGES = {"github": FakeGitHub, "gitea": FakeGitea, "gitlab": FakeGitLab}


# Long enough that a loaded machine's fake still answers a normal request in time;
# the timeout faults delay their answer well past it.
CLIENT_TIMEOUT_S = 1.5


@dataclass(frozen=True)
class ForgeFault:
    name: str
    forge: str = "github"
    status: int | None = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    delay_s: float = 0.0
    min_backoff_s: float = 0.0  # the poll must wait at least this long before trying again
    comment: bool = False  # the fault hits a comment POST instead of the listing


def _reset_in(seconds: int) -> str:
    return str(int(time.time()) + seconds)


FORGE_FAULTS = (
    *(
        ForgeFault(f"{forge} {status}", forge, status)
        for forge in FORGES
        for status in (500, 502, 503)
    ),
    ForgeFault("github timeout", delay_s=CLIENT_TIMEOUT_S * 2, status=None),
    ForgeFault("gitlab timeout", "gitlab", delay_s=CLIENT_TIMEOUT_S * 2, status=None),
    ForgeFault(
        "github 403 rate limit exhausted",
        status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "@reset120"},
        body='{"message": "API rate limit exceeded"}',
        min_backoff_s=100,
    ),
    ForgeFault(
        "github 403 secondary limit (retry-after)",
        status=403,
        headers={"retry-after": "90"},
        body='{"message": "You have exceeded a secondary rate limit"}',
        min_backoff_s=90,
    ),
    ForgeFault(
        "github 429 retry-after", status=429, headers={"retry-after": "45"}, min_backoff_s=45
    ),
    ForgeFault(
        "gitea 429 retry-after",
        "gitea",
        status=429,
        headers={"retry-after": "30"},
        min_backoff_s=30,
    ),
    ForgeFault("github truncated JSON", status=200, body='[{"number": 1, "title": "on'),
    ForgeFault("gitlab truncated JSON", "gitlab", status=200, body='[{"iid": 1'),
    ForgeFault("github HTML instead of JSON", status=200, body="<html>502 bad gateway</html>"),
    ForgeFault(
        "github comment POST times out after storing",
        status=None,
        delay_s=CLIENT_TIMEOUT_S * 2,
        comment=True,
    ),
)


@contextmanager
def _intake(root: Path, fake: FakeForge, clock: ManualClock) -> Iterator[tuple[Intake, Store]]:
    tracker_settings = TrackerSettings(name="forge", kind=fake.forge, trusted_actors=("alice",))
    repo = RepoSettings(name="widgets", tracker="forge", slug=SLUG, remote_url="unused")
    settings = Settings(
        database_url=f"sqlite:///{root / 'history.db'}",
        volume=root,
        trackers=(tracker_settings,),
        repos=(repo,),
        poll_interval_s=5.0,
    )
    client = client_for(
        fake,
        options=HttpOptions(timeout_s=CLIENT_TIMEOUT_S, mutation_spacing_s=0.0),
        clock=clock,
        trusted_actors=("alice",),
    )
    store = Store(settings.database_url)
    store.upgrade()
    store.sync_repos(settings.repos)
    lifecycle = Lifecycle(store, {"forge": client}, {"forge": tracker_settings})
    try:
        yield Intake(store, settings, {"forge": client}, lifecycle, clock=clock.time), store
    finally:
        store.close()


def forge_fault(root: Path, fault: ForgeFault) -> Figures:
    figures = Figures(scenario=f"forge: {fault.name}", trials=1, faults_injected=1)
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    fake = FORGES[fault.forge](token="sentinel-forge-token")
    number = fake.add_issue(SLUG, "Make it faster", labels=[READY])
    clock = ManualClock(now=time.time())  # the intake's and the client's: one clock
    with fake, _intake(root, fake, clock) as (intake, store):
        if fault.comment:
            _comment_fault(intake, fake, fault, number, figures)
        else:
            _listing_fault(intake, store, fake, fault, clock, figures)
        if any(f.times for f in fake.faults):
            figures.misclassified.append("the injected fault was never hit")
    figures.duration_s = time.monotonic() - started
    return figures


def _inject(fake: FakeForge, fault: ForgeFault, path: str, method: str) -> None:
    headers = {k: _reset_in(120) if v == "@reset120" else v for k, v in fault.headers.items()}
    fake.inject(
        path,
        status=fault.status,
        headers=headers,
        body=fault.body,
        delay_s=fault.delay_s,
        method=method,
    )


def _listing_fault(
    intake: Intake,
    store: Store,
    fake: FakeForge,
    fault: ForgeFault,
    clock: ManualClock,
    figures: Figures,
) -> None:
    _inject(fake, fault, r"/issues$", "GET")
    try:
        report = intake.poll("forge")
    except Exception as exc:
        figures.misclassified.append(f"poll raised {type(exc).__name__}: {exc}")
        return
    if report.error is None:
        figures.misclassified.append("the fault went unreported")
    elif "Traceback" in report.error:
        figures.misclassified.append("a traceback in the poll error")
    waited = intake.health["forge"].not_before - clock.time()
    if waited < fault.min_backoff_s:
        figures.misclassified.append(
            f"backed off {waited:.0f} s, the forge asked for {fault.min_backoff_s:.0f} s"
        )
    if not intake.poll("forge").skipped:
        figures.misclassified.append("polled again inside the back-off")
    clock.advance(max(waited, 0.0) + 1.0)
    time.sleep(max(0.0, fault.delay_s))  # let a delayed fake answer drain
    reports = [intake.poll("forge") for _ in range(3)]
    runs = store.list_runs()
    if len(runs) != 1:
        figures.lost_issues.append(f"{len(runs)} runs after recovery (reports {reports})")


def _comment_fault(
    intake: Intake, fake: FakeForge, fault: ForgeFault, number: int, figures: Figures
) -> None:
    repo = intake.settings.repos[0]
    _inject(fake, fault, rf"/issues/{number}/(comments|notes)$", "POST")
    for _ in range(2):
        try:
            intake.lifecycle.comment_once(repo, number, "run=1:claimed", "claimed by run 1")
        except PipelineError:
            time.sleep(fault.delay_s + 0.3)  # the forge finishes storing the comment
    bodies = [c.body for c in fake.issue(SLUG, number).comments]
    posted = sum(marker("run=1:claimed") in b for b in bodies)
    if posted != 1:
        figures.duplicate_comments.append(f"the claimed comment was posted {posted} times")
