"""The ``pipeline`` command: run the daemon, review history, operate repos.

Every command that touches history accepts ``--database-url`` (or
``PIPELINE_DATABASE_URL``); without either it uses the config file's
database, else the embedded SQLite file under the data directory.
Human output is aligned tables; ``--json`` prints machine-readable JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TextIO

from pipeline import __version__
from pipeline.cli import config as cli_config
from pipeline.cli import ops as cli_ops
from pipeline.cli import render
from pipeline.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Handler,
    add_command,
    load,
    open_store,
    who,
)
from pipeline.core.errors import ConfigError


def cmd_db_upgrade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.core.masking import redact_url
    from pipeline.store import Store

    settings = load(args)
    store = Store(settings.database_url)
    try:
        store.upgrade()
    finally:
        store.close()
    out.write(f"database {redact_url(settings.database_url)} is at the latest schema\n")
    return EXIT_OK


def _since(value: str | None) -> datetime | None:
    """``--since`` as an ISO time or a relative age like ``30m``, ``2h``, ``7d``."""
    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1] in units and value[:-1].isdigit():
        delta = timedelta(seconds=int(value[:-1]) * units[value[-1]])
        return datetime.now(UTC).replace(tzinfo=None) - delta
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(
            f"--since: expected an ISO time or an age like 2h or 7d, got {value!r}"
        ) from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def cmd_runs_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.store import RunFilter

    store = open_store(args)
    try:
        flt = RunFilter(
            repo=args.repo,
            state=args.state,
            kind=args.kind,
            since=_since(args.since),
            limit=args.limit,
        )
        runs = store.list_runs(flt)
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(runs) + "\n")
    else:
        render.runs_table(runs, out)
    return EXIT_OK


def cmd_runs_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    store = open_store(args)
    try:
        run = store.get_run(args.id)
        if run is None:
            raise CliError(f"run {args.id}: no such run")
        events = store.run_events(args.id)
    finally:
        store.close()
    if args.json:
        out.write(render.to_json({"run": run, "events": events}) + "\n")
    else:
        render.run_detail(run, events, out)
    return EXIT_OK


def cmd_repos_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    settings = load(args)
    store = open_store(args)
    try:
        store.sync_repos(settings.repos)
        repos = store.list_repos()
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(repos) + "\n")
    else:
        render.repos_table(repos, out)
    return EXIT_OK


def cmd_repos_freeze(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    settings = load(args)
    store = open_store(args)
    try:
        store.sync_repos(settings.repos)
        by = who()
        escalation = f"frozen by {by}: {args.note}"
        changed = store.freeze_repo(args.repo, args.note, by=by, escalation=escalation)
    finally:
        store.close()
    out.write(f"repo {args.repo} {'frozen' if changed else 'was already frozen'}\n")
    return EXIT_OK


def cmd_repos_unfreeze(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    settings = load(args)
    store = open_store(args)
    try:
        store.sync_repos(settings.repos)
        changed = store.unfreeze_repo(args.repo, args.note, by=who())
    finally:
        store.close()
    out.write(
        f"repo {args.repo} {'unfrozen: its queue resumes' if changed else 'was not frozen'}\n"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipeline",
        description="afk-pipeline: hand issues labelled ready-for-agent to coding agents.",
        epilog="Run `pipeline COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"afk-pipeline {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")

    db = top.add_parser("db", help="database schema").add_subparsers(dest="sub", metavar="SUB")
    add_command(
        db, "upgrade", cmd_db_upgrade, "apply migrations up to the latest schema (idempotent)"
    )

    cli_config.register(top)

    runs = top.add_parser("runs", help="review and steer runs").add_subparsers(
        dest="sub", metavar="SUB"
    )
    lst = add_command(runs, "list", cmd_runs_list, "list runs, newest first")
    lst.add_argument("--repo", help="only this repo")
    lst.add_argument("--state", help="only runs in this state")
    lst.add_argument("--kind", choices=("issue", "fix_forward", "manual"), help="only this kind")
    lst.add_argument("--since", help="created since an ISO time or an age (30m, 2h, 7d)")
    lst.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    lst.add_argument("--json", action="store_true", help="print JSON")
    one = add_command(runs, "show", cmd_runs_show, "one run with its timeline")
    one.add_argument("id", type=int)
    one.add_argument("--json", action="store_true", help="print JSON")

    repos = top.add_parser("repos", help="enrolled repos; freeze and unfreeze").add_subparsers(
        dest="sub", metavar="SUB"
    )
    rl = add_command(repos, "list", cmd_repos_list, "list enrolled repos and their state")
    rl.add_argument("--json", action="store_true", help="print JSON")
    fr = add_command(repos, "freeze", cmd_repos_freeze, "stop a repo's queue (the manual brake)")
    fr.add_argument("repo")
    fr.add_argument("--note", required=True, help="why; recorded with who did it")
    uf = add_command(repos, "unfreeze", cmd_repos_unfreeze, "resume a frozen repo's queue")
    uf.add_argument("repo")
    uf.add_argument("--note", required=True, help="what was done; recorded with who did it")

    cli_ops.register(top, runs)
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(out)
        return EXIT_OK if args.command is None else EXIT_USAGE
    try:
        return handler(args, out, err)
    except ConfigError as exc:
        for problem in exc.problems:
            err.write(f"{problem}\n")
        return EXIT_USAGE
    except CliError as exc:
        err.write(f"pipeline: {exc}\n")
        return EXIT_USAGE
    except LookupError as exc:
        err.write(f"pipeline: {exc.args[0] if exc.args else exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from pipeline.store import describe_db_error

        db_problem = describe_db_error(exc)
        if db_problem is None:
            raise
        url = getattr(args, "database_url", None) or os.environ.get("PIPELINE_DATABASE_URL", "")
        err.write(f"pipeline: database {_redacted(url)} unavailable: {db_problem}\n")
        return EXIT_FAIL


def _redacted(url: str) -> str:
    from pipeline.core.masking import redact_url

    return redact_url(url) if url else "(configured)"
