"""A forge that refuses the daemon's token or cannot find the repo: poll less, tell a human once.

A 401 (the token is missing, wrong, expired or revoked), a 403 that is not a
rate limit (the token lacks a permission or a scope) or a 404 (the repo is gone
or renamed, its slug is wrong, or the token cannot see it: GitHub and GitLab
answer a private repo the token has no access to 404, not 403) is not fixed by
asking again, so polling at full rate only repeats the same failure. A repo
whose ready list is refused so is polled again after a back-off that doubles from the poll
interval up to ``MAX_POLL_BACKOFF_S`` (the other repos of the tracker keep their
pace); the first refusal raises one escalation per repo (a row, as the repo's
escalations are kept) and one notification per tracker and poll naming the
tracker, each repo and the status; the first answer after it clears the
back-off, and one more notification says polling is back. Rate limits are
not refusals: they are waited out as the forge says (``pipeline.trackers.http``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.notify.escalation import Notifies, NotifyKind

log = logging.getLogger(__name__)

MAX_POLL_BACKOFF_S = 900.0
# FatalError kinds of ``pipeline.trackers.http`` that say the ready list was refused.
REFUSED_STATUS = {"forge_auth": "401", "forge_forbidden": "403", "missing_repo": "404"}
# What each status says, in a human's words.
MEANING = {
    "401": "the token is missing, wrong, expired or revoked",
    "403": "the token lacks a permission or a scope",
    "404": "the repo is missing or the token cannot see it",
}


class Escalates(Protocol):
    """The store's escalation verb (``Store.add_escalation``)."""

    def add_escalation(
        self, repo: str, reason: str, detail: str, run_id: int | None = None, *, once: str = ""
    ) -> int | None: ...


@dataclass
class Refusal:
    """One repo whose tracker refuses the token: since when, how often, next try."""

    tracker: str
    repo: str
    slug: str
    status: str  # "401" | "403" | "404"
    error: str
    since: str  # ISO 8601 UTC: the first refusal of this episode
    failures: int = 1
    not_before: float = 0.0  # on the intake's clock


class AccessWatch:
    """Back-off and the human's notice for repos whose tracker refuses the token.

    ``refused`` and ``answered`` record what one poll saw; ``tell`` (at the end of
    the poll) sends what changed as one notification per tracker.
    """

    def __init__(
        self,
        interval_s: Callable[[str], float],
        clock: Callable[[], float],
        notifier: Notifies | None = None,
        store: Escalates | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.notifier = notifier
        self.store = store
        self._refused: dict[tuple[str, str], Refusal] = {}
        self._new: list[Refusal] = []  # first refusals not told yet
        self._back: list[Refusal] = []  # ended refusals not told yet
        self._lock = threading.Lock()

    def waiting(self, repo: RepoSettings) -> bool:
        """True while ``repo`` is backed off after a refusal."""
        refusal = self._refused.get((repo.tracker, repo.name))
        return refusal is not None and self.clock() < refusal.not_before

    def refused(self, repo: RepoSettings, exc: Exception) -> Refusal | None:
        """Record ``exc`` if it is a refusal of the token; the repo's refusal, else None."""
        if not isinstance(exc, FatalError) or exc.kind not in REFUSED_STATUS:
            return None
        status = REFUSED_STATUS[exc.kind]
        with self._lock:
            refusal = self._refused.get((repo.tracker, repo.name))
            if refusal is None:
                since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                refusal = Refusal(repo.tracker, repo.name, repo.slug, status, str(exc), since, 0)
                self._refused[(repo.tracker, repo.name)] = refusal
                self._new.append(refusal)
            refusal.failures += 1
            refusal.error, refusal.status = str(exc), status
            wait = min(
                MAX_POLL_BACKOFF_S, self.interval_s(repo.tracker) * 2 ** (refusal.failures - 1)
            )
            refusal.not_before = self.clock() + wait
        log.warning(
            "tracker %s refuses the ready list of %s (%s: %s); next poll of it in %.0fs: %s",
            repo.tracker,
            repo.slug,
            status,
            MEANING[status],
            wait,
            refusal.error,
        )
        return refusal

    def answered(self, repo: RepoSettings) -> None:
        """The forge answered ``repo``: its refusal, if any, is over."""
        with self._lock:
            refusal = self._refused.pop((repo.tracker, repo.name), None)
            if refusal is not None:
                self._back.append(refusal)
        if refusal is not None:
            log.warning("tracker %s answers for %s again; polling resumed", repo.tracker, repo.slug)

    def refusals(self) -> list[Refusal]:
        """Every repo refused now, for health and status."""
        with self._lock:
            return sorted(self._refused.values(), key=lambda r: (r.tracker, r.repo))

    def tell(self, tracker: str) -> None:
        """Send what changed for ``tracker`` since the last call: new refusals, recoveries."""
        with self._lock:
            new = [r for r in self._new if r.tracker == tracker]
            back = [r for r in self._back if r.tracker == tracker]
            self._new = [r for r in self._new if r.tracker != tracker]
            self._back = [r for r in self._back if r.tracker != tracker]
        if new:
            self._escalate(tracker, new)
        if back:
            self._notify(*answers_again(tracker, back), kind="recovered", key=_key("back", back))

    def _escalate(self, tracker: str, new: list[Refusal]) -> None:
        title, body = refused_message(tracker, new)
        self._notify(title, body, kind="escalation", key=_key("refused", new))
        if self.store is None:
            return
        for refusal in new:
            once = f"tracker-refused:{tracker}:{refusal.repo}:{refusal.since}"
            try:
                self.store.add_escalation(refusal.repo, "tracker_refused", body, once=once)
            except Exception as exc:  # the database is away: the notification is what matters
                log.error("escalation for %s not recorded: %s", refusal.repo, exc)

    def _notify(self, title: str, body: str, *, kind: NotifyKind, key: str) -> None:
        if self.notifier is not None:
            self.notifier.notify(title, body, kind=kind, events=_no_events, key=key)


def refused_message(tracker: str, refusals: list[Refusal]) -> tuple[str, str]:
    """Title and body of the escalation: which tracker, which repos, which status, what next."""
    statuses = sorted({r.status for r in refusals})
    slugs = ", ".join(r.slug for r in refusals)
    lines = [f"Tracker {tracker} refuses the ready list of these repos ({'/'.join(statuses)}):"]
    lines += [""] + [
        f"  - {r.slug} (repo {r.repo}): {r.status}, {MEANING[r.status]}, since {r.since}: {r.error}"
        for r in refusals
    ]
    lines += ["", *_what_to_fix(tracker, statuses)]
    lines.append(
        "Ready issues of these repos are not picked up until then. Polling backs off "
        "meanwhile and resumes by itself when the forge answers again."
    )
    title = f"[afk-pipeline] tracker {tracker}: {'/'.join(statuses)} for {slugs}"
    if len(statuses) == 1:  # the subject line alone says what is wrong
        title += f": {MEANING[statuses[0]]}"
    return title, "\n".join(lines)


def _what_to_fix(tracker: str, statuses: list[str]) -> list[str]:
    fixes = []
    if {"401", "403"} & set(statuses):
        fixes.append(
            f"Fix the token or its permissions (trackers.{tracker}.token_env or token_file)."
        )
    if "404" in statuses:
        fixes.append(
            "Check the repo's slug in the config (repos.<name>.slug: renamed, moved or "
            "deleted on the forge?) and that the token can see the repo (a token without "
            "access to a private repo gets 404)."
        )
    return fixes


def answers_again(tracker: str, refusals: list[Refusal]) -> tuple[str, str]:
    slugs = ", ".join(r.slug for r in refusals)
    body = (
        f"Tracker {tracker} answers the ready list of {slugs} again; polling is back "
        "to its interval and ready issues are picked up."
    )
    return f"[afk-pipeline] tracker {tracker}: answers again for {slugs}", body


def _key(what: str, refusals: list[Refusal]) -> str:
    """The notification's once-key: these refusals' episodes, digested to a bounded length."""
    episodes = ",".join(f"{r.tracker}/{r.repo}@{r.since}" for r in refusals)
    digest = hashlib.sha256(episodes.encode()).hexdigest()[:24]
    return f"notify:tracker-{what}:{refusals[0].tracker[:100]}:{digest}"


def _no_events(*_args: object, **_kwargs: object) -> None:
    return None
