"""CLI commands that act: the daemon, the demo, local issues, cancel and retry."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TextIO

from pipeline.cli import render
from pipeline.cli.common import (
    EXIT_OK,
    CliError,
    Subparsers,
    add_command,
    command_group,
    known_repo,
    load,
    open_store,
    record_id,
    who,
)
from pipeline.cli.history import json_flag
from pipeline.core.states import TERMINAL_STATES, WAITING_STATES


def cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from dataclasses import replace

    from pipeline.config.door import door_problems
    from pipeline.core import logs
    from pipeline.core.errors import ConfigError
    from pipeline.daemon import Daemon

    settings = load(args)
    problems = door_problems(settings, create=True)  # before the database is touched
    if problems:
        raise ConfigError(problems)
    if args.no_migrate:
        settings = replace(settings, run_migrations=False)
    logs.configure(settings.log_level, "json" if args.json_logs else settings.log_format)
    daemon = Daemon(settings, http=not args.no_http)
    import logging

    for line in daemon.summary().splitlines():
        logging.getLogger("pipeline").info(line)
    daemon.run_forever()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.config.load import database_url

    try:
        from pipeline.demo.main import DemoOptions, run_demo
    except ModuleNotFoundError as exc:
        if exc.name not in ("pipeline.demo", "pipeline.testing"):
            raise
        raise CliError(
            "demo: not in this installation (the container image leaves out the demo "
            "and its fake forges); run it from `pip install afk-pipeline`"
        ) from None

    url = database_url(args.database_url, "--database-url") if args.database_url else None
    options = DemoOptions(
        keep=args.keep,
        as_json=args.json,
        workdir=args.dir,
        database_url=url,
        serve=args.serve,
    )
    return run_demo(options, out, err)


def text_arg(value: str) -> str:
    """An argparse type for a title or a label: not empty, no surrounding spaces (a label
    ``" ready-for-agent"`` would never match the tracker's ``ready-for-agent``)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if value != value.strip():
        raise argparse.ArgumentTypeError(f"must not start or end with spaces, got {value!r}")
    return value


def _local_repo(args: argparse.Namespace, repo: str) -> None:
    settings = load(args)
    configured = settings.repo(repo)
    if configured is None:
        known = ", ".join(r.name for r in settings.repos) or "none"
        hint = ""
        if args.config is None and not os.environ.get("PIPELINE_CONFIG"):
            hint = "; no config file was read: pass --config FILE or set PIPELINE_CONFIG"
        raise CliError(f"--repo {repo}: not an enrolled repo (enrolled: {known}){hint}")
    tracker = settings.tracker(configured.tracker)
    if tracker is None or tracker.kind != "local":
        raise CliError(
            f"--repo {repo}: its tracker {configured.tracker!r} is not the local tracker; "
            "add issues on that tracker instead"
        )


def cmd_issue_add(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    _local_repo(args, args.repo)
    body = ""
    if args.body_file:
        try:
            body = Path(args.body_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--body-file {args.body_file}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise CliError(
                f"--body-file {args.body_file}: not UTF-8 text (byte {exc.start}); "
                "save the file as UTF-8"
            ) from None
    store = open_store(args)
    try:
        issue = store.add_local_issue(
            args.repo, args.title, body, author=who(), labels=tuple(args.label or ())
        )
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(issue) + "\n")
        return EXIT_OK
    labels = f" [{', '.join(issue.labels)}]" if issue.labels else ""
    out.write(f"issue {issue.id} added to {issue.repo}{labels}\n")
    return EXIT_OK


def cmd_issue_label(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _relabel(args, out, add=True)


def cmd_issue_unlabel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Take a label off: ``ready-for-agent`` off a queued issue withdraws it from the agent."""
    return _relabel(args, out, add=False)


def _relabel(args: argparse.Namespace, out: TextIO, *, add: bool) -> int:
    store = open_store(args)
    try:
        before = store.get_local_issue(args.id)
        if add:
            issue = store.change_local_labels(args.id, add=(args.label,), by=who())
        else:
            issue = store.change_local_labels(args.id, remove=(args.label,))
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(issue) + "\n")
        return EXIT_OK
    had = before is not None and args.label in before.labels
    if add:
        done = "already labelled" if had else "labelled"
    else:
        done = "unlabelled" if had else "already has no label"
    out.write(f"issue {issue.id} {done} {args.label}: [{', '.join(issue.labels)}]\n")
    return EXIT_OK


def cmd_issue_close(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Close a local issue; a run of it not yet pushed ends cancelled."""
    store = open_store(args)
    try:
        closed = store.close_local_issue(args.id)
        issue = store.get_local_issue(args.id)
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(issue) + "\n")
        return EXIT_OK
    out.write(f"issue {args.id} {'closed' if closed else 'already closed'}\n")
    return EXIT_OK


def cmd_issue_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = open_store(args)
    try:
        known_repo(args, store, args.repo)
        issues = store.list_local_issues(repo=args.repo, state=None if args.all else "open")
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(issues) + "\n")
        return EXIT_OK
    rows = [[i.id, i.repo, i.state, ", ".join(i.labels), i.author, i.title] for i in issues]
    render.table(("ID", "REPO", "STATE", "LABELS", "AUTHOR", "TITLE"), rows, out)
    return EXIT_OK


def cmd_runs_cancel(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = open_store(args)
    try:
        run = store.cancel_run(args.id, by=who())
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(run) + "\n")
    elif run.state == "cancelled":
        out.write(f"run {run.id} cancelled\n")
    elif run.state in TERMINAL_STATES:
        # A run that ended after an earlier cancel still carries cancel_requested.
        out.write(f"run {run.id} already ended {run.state}; nothing to cancel\n")
    else:
        out.write(f"run {run.id} is {run.state}: its worker stops it within seconds\n")
    return EXIT_OK


def cmd_runs_retry(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.notify.escalation import frozen_wait
    from pipeline.store.runs import RunNotRetryable

    store = open_store(args)
    try:
        result = store.retry_run(args.id, by=who())
        repo = store.get_repo(result.run.repo_name)
    except RunNotRetryable as exc:  # queued, running or succeeded: nothing to retry
        raise CliError(str(exc)) from None
    finally:
        store.close()
    waiting = result.run.state in WAITING_STATES and repo is not None and repo.frozen
    note = frozen_wait(result.run.repo_name) if waiting else None
    if args.json:
        answer = {"run": result.run, "created": result.created, "note": note}
        out.write(render.to_json(answer) + "\n")
        return EXIT_OK
    verb = "queued as" if result.created else "already active as"
    out.write(f"run {args.id} {verb} run {result.run.id}\n")
    if note is not None:  # nothing starts in a frozen repo: say so, or the retry looks lost
        out.write(f"{note}\n")
    return EXIT_OK


def register(top: Subparsers, runs: Subparsers) -> None:
    run = add_command(top, "run", cmd_run, "run the daemon: intake, scheduler, workers, HTTP")
    run.add_argument("--json-logs", action="store_true", help="log JSON lines")
    run.add_argument("--no-http", action="store_true", help="serve no HTTP API or dashboard")
    run.add_argument("--no-migrate", action="store_true", help="do not migrate on start")
    _register_demo(top)
    _register_issue(top)
    cancel = add_command(
        runs,
        "cancel",
        cmd_runs_cancel,
        "cancel a run: at once when queued, within seconds when running",
    )
    cancel.add_argument("id", type=record_id)
    json_flag(cancel)
    retry = add_command(
        runs, "retry", cmd_runs_retry, "queue a new run for a failed, escalated or cancelled one"
    )
    retry.add_argument("id", type=record_id)
    json_flag(retry)


def _register_demo(top: Subparsers) -> None:
    demo = add_command(
        top,
        "demo",
        cmd_demo,
        "a self-contained demo of the whole loop on embedded defaults",
        common=False,
    )
    demo.add_argument(
        "--json", action="store_true", help="print the summary as one JSON object on the last line"
    )
    demo.add_argument("--keep", action="store_true", help="keep the demo's directory")
    demo.add_argument("--dir", type=Path, default=None, help="work in this directory")
    demo.add_argument(
        "--serve", action="store_true", help="keep the dashboard up after the summary until Ctrl-C"
    )
    demo.add_argument(
        "--database-url",
        default=None,
        help="history database (default: a new one of this demo's own under the data directory)",
    )


def _register_issue(top: Subparsers) -> None:
    sub = command_group(top, "issue", "issues of the embedded local tracker")
    add = add_command(sub, "add", cmd_issue_add, "add a local issue")
    add.add_argument("--repo", required=True, help="an enrolled repo on the local tracker")
    add.add_argument("--title", required=True, type=text_arg)
    add.add_argument("--body-file", help="a file holding the issue's body")
    add.add_argument("--label", action="append", type=text_arg, help="a label (repeatable)")
    json_flag(add)
    label = add_command(sub, "label", cmd_issue_label, "add a label to a local issue")
    label.add_argument("id", type=record_id)
    label.add_argument("label", type=text_arg)
    json_flag(label)
    unlabel = add_command(sub, "unlabel", cmd_issue_unlabel, "take a label off a local issue")
    unlabel.add_argument("id", type=record_id)
    unlabel.add_argument("label")
    json_flag(unlabel)
    close = add_command(sub, "close", cmd_issue_close, "close a local issue")
    close.add_argument("id", type=record_id)
    json_flag(close)
    lst = add_command(sub, "list", cmd_issue_list, "list local issues")
    lst.add_argument("--repo")
    lst.add_argument("--all", action="store_true", help="closed ones too")
    json_flag(lst)
