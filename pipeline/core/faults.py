"""Fault-injection checkpoints for the reliability tests: crash the daemon at a phase boundary.

``PIPELINE_FAULTS`` holds comma-separated checkpoint names; reaching a named
checkpoint kills this process with SIGKILL, exactly as an OOM kill or a power
cut would, so tests can prove recovery at every boundary. Unset (always, in
production) it does nothing. Each name fires once per process, and only for
runs whose id is in ``PIPELINE_FAULTS_RUNS`` when that is set.

Checkpoints: ``preparing``, ``implementing``, ``testing``, ``publishing``,
``after_push`` (pushed, not yet recorded), ``watching`` (``CHECKPOINTS``, every one on
the way of a run that ships); ``kept`` (an escalating run's tree kept as evidence,
its ending not yet recorded), on the way of a run that escalates only;
``fix_forward_queued`` (a broken deploy's fix-forward queued, the broken run's ending
not yet recorded), on the way of a run whose deploy broke only; and once the
run has ended: ``ended`` (recorded, not yet told), ``comment_reserved`` (its ending
comment reserved, not yet posted), ``ending_notify`` (commented, its notification
not yet queued).

Sabotage names switch a safety mechanism off instead, so a test can prove that
its scenario notices the mechanism missing: ``remove_fence`` makes the worker's
writes (heartbeats included) match the run by id alone, ignoring the lease.
"""

from __future__ import annotations

import os
import signal

CHECKPOINTS = ("preparing", "implementing", "testing", "publishing", "after_push", "watching")
# After the run's ending is recorded: where telling the humans may be cut short.
ENDING_CHECKPOINTS = ("ended", "comment_reserved", "ending_notify")
SABOTAGE = ("remove_fence",)


def sabotaged(name: str) -> bool:
    """True only when ``PIPELINE_FAULTS`` names the sabotage ``name`` (a test asked for it)."""
    if name not in SABOTAGE:
        raise ValueError(f"unknown sabotage {name!r}; known: {SABOTAGE}")
    return name in os.environ.get("PIPELINE_FAULTS", "").split(",")


def checkpoint(name: str, run_id: int) -> None:
    faults = os.environ.get("PIPELINE_FAULTS", "")
    if not faults or name not in faults.split(","):
        return
    runs = os.environ.get("PIPELINE_FAULTS_RUNS", "")
    if runs and str(run_id) not in runs.split(","):
        return
    os.kill(os.getpid(), signal.SIGKILL)
