"""Whether a fix-forward still has a broken deploy to heal when it starts.

A fix-forward is queued by its parent's "broken" verdict, before the parent's
ending is written. A daemon killed in between puts the parent back in the queue,
and the claim makes the fix-forward wait until the parent has watched its commit
again and ended (ADR 8, ADR 19). Only a parent that ended broken again (``failed``,
``deploy_broken``) asked for a fix-forward; any other ending decides it here, before
an agent is called or anything is pushed:

- ``succeeded``: the deploy was healthy after all (someone fixed it meanwhile). The
  fix-forward ends ``succeeded``: nothing to heal.
- anything else (escalated because the second watch was inconclusive, cancelled by a
  person, failed by the sweeper): the verdict that queued the fix-forward no longer
  stands, and the parent's own ending has told the human what to look at. The
  fix-forward ends ``cancelled`` with the error class ``superseded``; it freezes
  nothing and is not offered for a retry.
"""

from __future__ import annotations

from pipeline.core.states import DEPLOY_BROKEN_CLASS, SUPERSEDED_CLASS, Outcome, RunState
from pipeline.store import Run


def not_needed(parent: Run | None) -> Outcome | None:
    """The ending of a fix-forward whose ``parent`` ended without asking for it, else None
    (the fix-forward heals: its parent ended broken, or is unknown)."""
    if parent is None or not parent.terminal:
        return None  # the claim waits for the parent's ending; a parent gone says nothing
    if parent.state == RunState.FAILED and parent.error_class == DEPLOY_BROKEN_CLASS:
        return None
    if parent.state == RunState.SUCCEEDED:
        said = f"nothing to heal: run {parent.id} was judged healthy when watched again"
        return Outcome(RunState.SUCCEEDED, summary=said)
    why = f"{parent.state} ({parent.error_class})" if parent.error_class else parent.state
    said = (
        f"superseded: run {parent.id}, whose broken deploy this fix-forward was queued to "
        f"heal, ended {why} instead of broken; nothing was pushed, and run {parent.id}'s "
        "ending says what to check"
    )
    return Outcome(RunState.CANCELLED, SUPERSEDED_CLASS, said)
