"""A tiny daemon for crash, fencing and multi-process tests of the scheduler.

``python -m pipeline.testing.dummy_daemon --database-url URL --owner NAME --lease-s S``
runs the real ``Scheduler`` with a dummy run pipeline: it moves the run to
``implementing``, starts a child "agent" (``sleep``) in its own process group,
records the agent's pid in the run's timeline (event kind ``agent``) and
succeeds when the agent exits. SIGTERM stops it the way the real daemon stops.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from pipeline.config.settings import SchedulerSettings
from pipeline.core.errors import LeaseLost, RetryableError
from pipeline.core.proc import run_command
from pipeline.queue.scheduler import RunContext, RunPipeline, Scheduler
from pipeline.store import Store

# The shell's pid is the agent's process group; it prints a tick every quarter second.
AGENT_SCRIPT = (
    'echo "agent-pid $$"; n=0; '
    'while [ "$n" -lt "$1" ]; do sleep 0.25; n=$((n+1)); echo "tick $n"; done'
)
TICK_S = 0.25
log = logging.getLogger(__name__)


def dummy_pipeline(agent_s: float, tick_events: bool = False) -> RunPipeline:
    """A run pipeline whose agent works ``agent_s`` (none when 0).

    With ``tick_events`` every tick of the agent is a fenced timeline write, so a
    worker that lost its lease finds out from its own next write.
    """
    ticks = max(1, round(agent_s / TICK_S))

    def run(ctx: RunContext) -> str | None:
        ctx.set_state("implementing", "dummy agent starting")
        if agent_s <= 0:
            ctx.check()
            return None

        def on_line(line: str) -> None:
            try:
                if line.startswith("agent-pid "):
                    ctx.events("agent", "agent started", {"pid": int(line.split()[1])})
                elif tick_events:
                    ctx.events("tick", line)
            except LeaseLost:
                log.warning("run %s: write rejected, lease lost; stopping the agent", ctx.run.id)

        result = run_command(
            ["/bin/sh", "-c", AGENT_SCRIPT, "agent", str(ticks)],
            cwd=Path.cwd(),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stop=ctx.stop,
            on_line=on_line,
            kill_grace_s=ctx.kill_grace_s,
        )
        ctx.check()
        if result.returncode != 0:
            raise RetryableError("agent", f"dummy agent exited with {result.returncode}")
        return None

    return run


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.testing.dummy_daemon")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--lease-s", type=float, required=True)
    parser.add_argument("--heartbeat-s", type=float, default=None)
    parser.add_argument("--sweep-interval-s", type=float, default=0.2)
    parser.add_argument("--claim-interval-s", type=float, default=0.1)
    parser.add_argument("--agent-s", type=float, default=0.0)
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--kill-grace-s", type=float, default=1.0)
    parser.add_argument("--max-recoveries", type=int, default=3)
    parser.add_argument("--stop-grace-s", type=float, default=0.0)
    parser.add_argument("--tick-events", action="store_true")
    return parser.parse_args(list(argv))


def settings_from(args: argparse.Namespace) -> SchedulerSettings:
    heartbeat_s = args.heartbeat_s if args.heartbeat_s is not None else args.lease_s / 4
    return SchedulerSettings(
        lease_s=args.lease_s,
        heartbeat_s=heartbeat_s,
        sweep_interval_s=args.sweep_interval_s,
        claim_interval_s=args.claim_interval_s,
        kill_grace_s=args.kill_grace_s,
        cancel_check_s=min(heartbeat_s, 1.0),
        max_recoveries=args.max_recoveries,
        backoff_base_s=0.1,
        backoff_max_s=0.5,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {args.owner} %(levelname)s %(message)s",
    )
    store = Store(args.database_url)
    store.upgrade()
    stopping = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler = Scheduler(
        store,
        dummy_pipeline(args.agent_s, args.tick_events),
        settings=settings_from(args),
        max_concurrency=args.max_concurrency,
        owner=args.owner,
    )
    scheduler.start()
    print(f"ready {args.owner} pid {os.getpid()}", flush=True)
    while not stopping.wait(0.2):
        pass
    scheduler.stop(args.stop_grace_s)
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
