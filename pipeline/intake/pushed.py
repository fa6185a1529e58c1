"""Labelling ready again an issue whose last run pushed: watch that commit, implement nothing.

A run that pushed and then did not succeed (its watch found no verdict, CI or the
deploy broke and the fix-forwards did not heal it, the repo froze, a person
cancelled it while it watched) leaves its change on the default branch. A new
run that handed the issue to the agent again would implement it a second time on
top of itself, and push it twice when the agent changed anything. So the run the
label queues carries the pushed commit and only watches it again, as
``pipeline runs retry`` of that run does (``pipeline.store.pushed`` finds it), and
the issue is told so. A run that succeeded, or whose fix-forward healed the deploy, closed
its issue: labelling it again after reopening asks for new work, and gets it.
"""

from __future__ import annotations

import logging

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError, RetryableError
from pipeline.intake.lifecycle import Lifecycle
from pipeline.store import Run

log = logging.getLogger(__name__)


def watch_again_text(old: Run, new: Run, ready_label: str, branch: str) -> str:
    """What the issue is told when the label queued a run that only watches."""
    sha = (old.pushed_sha or "")[:12]
    return (
        f"Labelled `{ready_label}` again: run {old.id} had already pushed `{sha}` to "
        f"`{branch}` before it ended {old.state} ({old.error_class or 'no cause'}). "
        f"Run {new.id} watches {sha} again (CI, then the deploy) and implements nothing: "
        "doing the issue again would put the change on the branch a second time. "
        "To have it done anew, revert the commit and open a new issue."
    )


def tell_watch_again(
    lifecycle: Lifecycle, where: tuple[RepoSettings, int], old: Run, new: Run
) -> None:
    """Say on the issue that the label's run watches the pushed commit again. The run is
    queued either way: a forge that refuses the comment just now costs only the comment."""
    repo, number = where
    ready = lifecycle.tracker_settings[repo.tracker].ready_label
    body = watch_again_text(old, new, ready, repo.default_branch)
    try:
        lifecycle.comment_once(
            repo, number, f"run={new.id}:watch-again", body, new.id, contended=True
        )
    except (RetryableError, FatalError) as exc:
        log.warning("%s#%s: run %s not told on the issue: %s", repo.name, number, new.id, exc)
