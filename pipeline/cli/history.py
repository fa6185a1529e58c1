"""CLI commands that review history: ``runs list``/``show`` and ``repos list``/``freeze``.

Filters are checked before any query: an unknown state, kind or repo, a bad
``--since``, ``--until``, ``--text`` or ``--limit`` exits 2 naming the valid values, never an empty
list that looks like an answer. ``runs show --follow`` streams the timeline
until the run ends (exit 0 when it succeeded, 1 otherwise).
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from pipeline.cli import render
from pipeline.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    MAX_ID,
    CliError,
    Subparsers,
    add_command,
    checked_note,
    command_group,
    known_repo,
    load,
    open_store,
    record_id,
    who,
)
from pipeline.core.states import REPO_STATES, RUN_KINDS
from pipeline.core.when import BadTime, parse_when
from pipeline.store.models import ALL_STATES
from pipeline.store.records import RunFilter

if TYPE_CHECKING:
    from pipeline.store import Store

FOLLOW_POLL_S = 0.5


def since(value: str | None, flag: str = "--since") -> datetime | None:
    """``flag``'s value: an ISO time, an age like ``30m`` or ``7d``, or ``today``."""
    if not value:
        return None
    try:
        return parse_when(value)
    except BadTime as exc:
        raise CliError(f"{flag}: {exc}") from None


def run_filter(args: argparse.Namespace) -> RunFilter:
    """The filters of ``runs list``, checked before any query."""
    start, end = since(args.since), since(args.until, "--until")
    if start is not None and end is not None and end <= start:
        raise CliError(f"--until {args.until}: must be later than --since {args.since}")
    text = args.text.strip() if args.text else None
    if text is not None and any(ord(c) < 32 for c in text):
        raise CliError("--text: must not contain control characters")
    return RunFilter(
        repo=args.repo,
        state=args.state,
        kind=args.kind,
        since=start,
        until=end,
        text=text or None,
        repo_state=args.repo_state,
        limit=args.limit,
    )


def positive(value: str, most: int = MAX_ID) -> int:
    """An argparse type: a whole number from 1 to ``most`` (a larger one must not reach SQL,
    where PostgreSQL refuses it as out of range)."""
    if not value.isdigit() or not 1 <= int(value) <= most:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {most}, got {value!r}")
    return int(value)


def cmd_runs_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    flt = run_filter(args)
    store = open_store(args)
    try:
        known_repo(args, store, args.repo)
        runs = store.list_runs(flt)
        # Issues held back by their dependencies have no run yet: shown after the runs.
        unfiltered = flt == RunFilter(repo=flt.repo, limit=flt.limit)
        waiting = store.waiting_issues(args.repo) if unfiltered and not args.json else []
    finally:
        store.close()
    if args.json:
        out.write(render.to_json(runs) + "\n")
    else:
        render.runs_table(runs, out)
        if waiting:
            out.write("\nwaiting (not queued until their dependencies are closed):\n")
            render.waiting_table(waiting, out)
    return EXIT_OK


def cmd_runs_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = open_store(args)
    try:
        run = store.get_run(args.id)
        if run is None:
            raise CliError(f"run {args.id}: no such run")
        if args.follow:
            return follow(store, args.id, out, as_json=args.json)
        events = store.run_events(args.id)
    finally:
        store.close()
    if args.json:
        out.write(render.to_json({"run": run, "events": events}) + "\n")
    else:
        render.run_detail(run, events, out)
    return EXIT_OK


def follow(store: Store, run_id: int, out: TextIO, *, as_json: bool = False) -> int:
    """Print the run's events as they are written until it ends; its outcome is the exit code.

    With ``as_json`` each event is one JSON line, then one line with the run.
    """
    seen = 0
    while True:
        run = store.get_run(run_id)
        assert run is not None
        for event in store.run_events(run_id, after_id=seen):
            seen = event.id
            out.write((_json_line(event) if as_json else render.event_line(event)) + "\n")
        out.flush()
        if run.terminal:
            break
        time.sleep(FOLLOW_POLL_S)
    out.write(_json_line(run) + "\n" if as_json else f"run {run.id} ended {run.state}\n")
    return EXIT_OK if run.state == "succeeded" else EXIT_FAIL


def _json_line(value: object) -> str:
    import json

    return json.dumps(json.loads(render.to_json(value)), sort_keys=True)


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
    return _set_frozen(args, out, frozen=True)


def cmd_repos_unfreeze(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _set_frozen(args, out, frozen=False)


def _set_frozen(args: argparse.Namespace, out: TextIO, *, frozen: bool) -> int:
    if not args.note.strip():  # as `escalations ack`: the record says who did it and why
        raise CliError(
            f"--note: say {'why' if frozen else 'what was done'} (it is recorded with who did it)"
        )
    settings = load(args)
    store = open_store(args)
    try:
        store.sync_repos(settings.repos)
        by = who()
        if frozen:
            escalation = f"frozen by {by}: {args.note}"
            changed = store.freeze_repo(args.repo, args.note, by=by, escalation=escalation)
        else:
            changed = store.unfreeze_repo(args.repo, checked_note(args.note, by), by=by)
        repo = store.get_repo(args.repo)
    finally:
        store.close()
    if args.json:
        out.write(render.to_json({"repo": repo, "changed": changed}) + "\n")
    elif frozen:
        out.write(f"repo {args.repo} {'frozen' if changed else 'was already frozen'}\n")
    else:
        done = "unfrozen: its queue resumes" if changed else "was not frozen"
        out.write(f"repo {args.repo} {done}\n")
    return EXIT_OK


def json_flag(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--json``; ``inherited`` as in ``common_options``."""
    default = argparse.SUPPRESS if inherited else False
    parser.add_argument("--json", action="store_true", default=default, help="print JSON")


def register_runs(runs: Subparsers) -> None:
    lst = add_command(runs, "list", cmd_runs_list, "list runs, newest first")
    lst.add_argument("--repo", help="only this repo")
    # Plain strings: argparse shows a refused value's choices by their repr.
    lst.add_argument(
        "--state", choices=[str(s) for s in ALL_STATES], help="only runs in this state"
    )
    lst.add_argument("--kind", choices=RUN_KINDS, help="only this kind")
    lst.add_argument(
        "--since", help="created at or after: an ISO time, an age (30m, 2h, 7d), today"
    )
    lst.add_argument("--until", help="created before: an ISO time, an age (30m, 2h, 7d), today")
    lst.add_argument("--text", help="issue title, repo or error contains this (any case)")
    lst.add_argument("--repo-state", choices=REPO_STATES, help="only repos now in this state")
    lst.add_argument("--limit", type=positive, default=50, help="at most this many (default 50)")
    json_flag(lst)
    one = add_command(runs, "show", cmd_runs_show, "one run with its timeline")
    one.add_argument("id", type=record_id)
    one.add_argument(
        "--follow", "-f", action="store_true", help="stream the timeline until the run ends"
    )
    json_flag(one)


def register_repos(top: Subparsers) -> None:
    repos = command_group(top, "repos", "enrolled repos; freeze and unfreeze")
    json_flag(add_command(repos, "list", cmd_repos_list, "list enrolled repos and their state"))
    fr = add_command(repos, "freeze", cmd_repos_freeze, "stop a repo's queue (the manual brake)")
    fr.add_argument("repo")
    fr.add_argument("--note", required=True, help="why; recorded with who did it")
    json_flag(fr)
    uf = add_command(repos, "unfreeze", cmd_repos_unfreeze, "resume a frozen repo's queue")
    uf.add_argument("repo")
    uf.add_argument("--note", required=True, help="what was done; recorded with who did it")
    json_flag(uf)
