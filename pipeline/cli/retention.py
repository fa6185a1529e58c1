"""CLI commands that keep history bounded and hand it to auditors: ``db prune``, ``runs export``.

``db prune`` applies the ``[history]`` retention policy now, in batches, printing
its progress on long work and a summary; exit 0 when it finished (whether or not
anything was old enough), 1 when the database failed, 2 for bad options, a bad
config or a schema that is not current. ``runs export`` streams runs created in a
window as JSON lines (each run with its events) or CSV (one row per run), a page
at a time, with every registered secret masked.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from pipeline.cli.common import EXIT_OK, CliError, Subparsers, add_command, load, open_store
from pipeline.cli.history import json_flag, positive, since
from pipeline.config.settings import MAX_KEEP_DAYS
from pipeline.store.records import Run

if TYPE_CHECKING:
    from pipeline.store import PruneReport, RetentionPolicy
    from pipeline.store.roles import HistoryKeeperStore

PROGRESS_EVERY_S = 1.0
EVENTS_PAGE = 1000
FORMATS = ("jsonl", "csv")
RUN_COLUMNS = tuple(f.name for f in dataclasses.fields(Run))


def cmd_db_prune(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    policy = _policy(args)
    store = open_store(args)
    try:
        report = store.prune_history(policy, dry_run=args.dry_run, progress=_progress(err))
    finally:
        store.close()
    if args.json:
        fields = dataclasses.asdict(report) | dataclasses.asdict(policy)
        out.write(json.dumps(fields, sort_keys=True) + "\n")
    else:
        out.write(describe(report, policy) + "\n")
    return EXIT_OK


def _policy(args: argparse.Namespace) -> RetentionPolicy:
    from pipeline.store import RetentionPolicy

    history = load(args).history
    events = args.keep_events_days or history.keep_events_days
    runs = args.keep_runs_days or history.keep_runs_days
    try:
        return RetentionPolicy(keep_events_days=events, keep_runs_days=runs)
    except ValueError as exc:
        raise CliError(f"--keep-events-days/--keep-runs-days: {exc}") from None


def _progress(err: TextIO) -> Any:
    """A progress callback that writes the running totals at most once a second."""
    last = [time.monotonic()]

    def tell(report: PruneReport) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            err.write(f"pruning: {report.runs} runs, {report.events} events removed so far\n")
            err.flush()

    return tell


def describe(report: PruneReport, policy: RetentionPolicy) -> str:
    """The summary line: what went (or would go) and what the policy is."""
    verb = "would remove" if report.dry_run else "removed"
    return (
        f"{verb} {report.runs} runs, {report.events} events, "
        f"{report.notifications} notifications (timelines kept {policy.keep_events_days} days "
        f"after a run ended, runs {policy.keep_runs_days} days; never pruned: unfinished runs, "
        "escalations, frozen evidence)"
    )


def cmd_runs_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    start = since(args.since)
    end = since(args.until, "--until")
    assert start is not None  # --since is required
    if end is not None and end <= start:
        raise CliError(f"--until {args.until}: must be later than --since {args.since}")
    store = open_store(args)
    try:
        if args.format == "csv":
            _write_csv(store.export_runs(start, end), out)
        else:
            for run in store.export_runs(start, end):
                _write_jsonl(store, run, out)
    finally:
        store.close()
    return EXIT_OK


def _write_csv(runs: Iterator[Run], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RUN_COLUMNS)
    for run in runs:
        writer.writerow([_cell(getattr(run, name)) for name in RUN_COLUMNS])


def _write_jsonl(store: HistoryKeeperStore, run: Run, out: TextIO) -> None:
    """One line ``{"run": …, "events": […]}``, the events written a page at a time."""
    out.write('{"run": ' + _json(dataclasses.asdict(run)) + ', "events": [')
    after, first = 0, True
    while True:
        page = store.run_events(run.id, after_id=after, limit=EVENTS_PAGE)
        for event in page:
            out.write(("" if first else ", ") + _json(dataclasses.asdict(event)))
            first = False
        if len(page) < EVENTS_PAGE:
            break
        after = page[-1].id
    out.write("]}\n")


def _json(value: object) -> str:
    return json.dumps(value, default=_cell, sort_keys=True)


def _cell(value: object) -> object:
    """Times in ISO 8601 with their zone (the database keeps UTC); the rest as it is."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC).isoformat()
    return "" if value is None else value


def _days(value: str) -> int:
    """A retention override: as many days as ``[history]`` accepts."""
    return positive(value, MAX_KEEP_DAYS)


def register(db: Subparsers, runs: Subparsers) -> None:
    prune = add_command(
        db, "prune", cmd_db_prune, "apply the [history] retention policy now (batched)"
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would go, remove none")
    prune.add_argument("--keep-events-days", type=_days, help="override [history] keep_events_days")
    prune.add_argument("--keep-runs-days", type=_days, help="override [history] keep_runs_days")
    prune.epilog = (
        "exit status: 0 done (also when nothing was old enough), 1 the database failed, "
        "2 bad options, a bad config or a schema that is not current"
    )
    json_flag(prune)
    export = add_command(
        runs, "export", cmd_runs_export, "stream runs created in a window, for audits"
    )
    export.add_argument(
        "--since",
        required=True,
        help="created at or after: an ISO time, an age (30m, 2h, 7d), today",
    )
    export.add_argument(
        "--until", help="created before: an ISO time, an age (30m, 2h, 7d), today (default: now)"
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="jsonl: a run with its events per line; csv: one row per run (default jsonl)",
    )
