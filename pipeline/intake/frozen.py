"""Issues whose run waits in a frozen repo: told once, with why and what unfreezes it.

A frozen repo's queue waits (ADR 8): a run queued there before the freeze, or
queued for an issue labelled ready while the repo is frozen, is kept and starts
after ``pipeline repos unfreeze``. Until then the human who labelled the issue
saw nothing happen. A periodic pass reads those runs from the store (one read
when nothing is frozen or everyone was told) and posts one comment on each
issue: its run waits, since which run (or when, by whom) the repo is frozen and
why, and the exact command that unfreezes it.

The comment is keyed by the run and the freeze (``run=14:frozen-wait:<when>``)
and contended (``Lifecycle.reserved_comment``): passes, restarts and replicas
post it once; a run that still waits when the repo is frozen again is told
again. What the freeze quotes (its reason, who froze it) is someone else's
words: quoted inert (ADR 35).
"""

from __future__ import annotations

import logging

from pipeline.config.settings import RepoSettings, Settings
from pipeline.core.errors import FatalError, RetryableError
from pipeline.intake.lifecycle import Lifecycle, comment_effect
from pipeline.intake.sanitize import inert_quote, one_line
from pipeline.notify.escalation import unfreeze_command
from pipeline.store import FrozenWait, Store

log = logging.getLogger(__name__)


def wait_key(wait: FrozenWait) -> str:
    """The comment's key: one per run and freeze."""
    return f"run={wait.run_id}:frozen-wait:{wait.frozen_at:%Y%m%dT%H%M%S%f}"


def frozen_wait_text(wait: FrozenWait, link: str) -> str:
    """What the issue is told: its run waits for an unfreeze, why, and the command.

    ``link`` is where the run that froze the repo is read (unused for a person's freeze).
    """
    when = f"{wait.frozen_at:%Y-%m-%d %H:%M} UTC"
    reason = inert_quote(one_line(wait.reason))
    if wait.frozen_run_id is None:
        since = f"{when}, by {inert_quote(wait.frozen_by)}: {reason}"
    else:
        since = f"run {wait.frozen_run_id}, {when}: {reason} (see {link})"
    return (
        f"This issue's run {wait.run_id} is queued and waits: repo `{wait.repo}` is frozen "
        f"since {since}\n\n"
        "Nothing runs in this repo until a maintainer has fixed the cause and unfrozen it:\n\n"
        f"`{unfreeze_command(wait.repo)}`\n\n"
        f"Then run {wait.run_id} starts in its turn by itself; this issue needs nothing else."
    )


class FrozenWaits:
    """The periodic pass that tells each issue waiting in a frozen repo, once."""

    def __init__(self, store: Store, settings: Settings, lifecycle: Lifecycle) -> None:
        self.store = store
        self.settings = settings
        self.lifecycle = lifecycle

    def sweep(self) -> int:
        """Tell every waiting issue not told yet; how many comments were posted."""
        waits = [
            (w, repo) for w in self.store.frozen_waits() if (repo := self.settings.repo(w.repo))
        ]
        told = self.store.settled_effects({_key(w, repo) for w, repo in waits})
        return sum(self._tell(w, repo) for w, repo in waits if _key(w, repo) not in told)

    def _tell(self, wait: FrozenWait, repo: RepoSettings) -> bool:
        """Post the comment; a forge that refuses it just now is asked again next pass."""
        froze = wait.frozen_run_id
        link = self.lifecycle.run_link(froze) if froze is not None else ""
        try:
            posted = self.lifecycle.comment_once(
                repo,
                wait.number,
                wait_key(wait),
                frozen_wait_text(wait, link),
                wait.run_id,
                contended=True,
            )
        except (RetryableError, FatalError) as exc:
            log.warning("%s#%s: not told it waits for an unfreeze: %s", repo.name, wait.number, exc)
            return False
        if posted:
            log.info(
                "%s#%s: told run %s waits for an unfreeze", repo.name, wait.number, wait.run_id
            )
        return posted


def _key(wait: FrozenWait, repo: RepoSettings) -> str:
    return comment_effect(repo, wait.number, wait_key(wait))
