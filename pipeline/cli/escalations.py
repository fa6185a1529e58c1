"""``pipeline escalations``: what waits for a human, and acknowledging it.

The list is the one place that says "these N things need you" when a
notification was missed: each open escalation with its repo, run, reason, age
and the exact next step (``pipeline.notify.escalation.escalation_next_step``).
``ack`` acknowledges all the ids given or none; a freeze's escalation is
acknowledged by the repo's unfreeze, never on its own. A later success of the
same issue settles the escalations of its earlier runs
(``pipeline.store.escalations.settle_issue``): they leave the list, and
``--all`` shows which run settled them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TextIO

from pipeline.cli import render
from pipeline.cli.common import (
    EXIT_OK,
    CliError,
    Subparsers,
    add_command,
    checked_note,
    common_options,
    open_store,
    record_id,
    who,
)
from pipeline.cli.history import json_flag
from pipeline.core.printable import indented
from pipeline.notify.escalation import ack_command, ack_refusals, escalation_next_step
from pipeline.store.records import Escalation

HEADERS = ("ID", "REPO", "RUN", "REASON", "AGE", "WHAT")


def cmd_escalations(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    store = open_store(args)
    try:
        escalations = store.open_escalations(include_acknowledged=args.all)
        now = store.now()
    finally:
        store.close()
    if args.json:
        shown = [{**_json(e), "next_step": _next(e)} for e in escalations]
        out.write(render.to_json(shown) + "\n")
        return EXIT_OK
    if not escalations:
        out.write("no escalations recorded\n" if args.all else "no escalation waits for a human\n")
        return EXIT_OK
    _listing(escalations, now, out, every=args.all)
    return EXIT_OK


def _json(escalation: Escalation) -> dict[str, object]:
    data: dict[str, object] = render.plain(escalation)
    data["repo"] = data.pop("repo_name")
    return data


def _next(escalation: Escalation) -> str | None:
    return None if escalation.acknowledged else escalation_next_step(escalation)


def _listing(escalations: Sequence[Escalation], now: datetime, out: TextIO, every: bool) -> None:
    waiting = [e for e in escalations if not e.acknowledged]
    headers = HEADERS + (("ACKNOWLEDGED",) if every else ())
    render.table(headers, [_row(e, now, every) for e in escalations], out)
    if not waiting:
        out.write("\nnone waits for a human\n")
        return
    out.write(f"\n{len(waiting)} waiting for a human; next steps:\n")
    for escalation in waiting:
        out.write(f"  {escalation.id}: {escalation_next_step(escalation)}\n")
        if escalation.run_id is None:  # no run to show: the detail is where the cause is
            out.write(f"     {indented(escalation.detail.strip(), 5)}\n")
    out.write(
        f"once handled, acknowledge them: {ack_command('ID...')}\n"
        "(a frozen repo's are acknowledged by its unfreeze)\n"
    )


def _row(escalation: Escalation, now: datetime, every: bool) -> list[object]:
    lines = escalation.detail.strip().splitlines()
    row: list[object] = [
        escalation.id,
        escalation.repo_name,
        escalation.run_id,
        escalation.reason,
        render.duration(max(0.0, (now - escalation.created_at).total_seconds())) + " ago",
        lines[0] if lines else "",
    ]
    if every:
        when = escalation.acknowledged_at
        row.append(f"{escalation.acknowledged_by} at {render.stamp(when)}" if when else "open")
    return row


def cmd_escalations_ack(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.store import AckRefused

    if args.all:
        raise CliError("--all lists acknowledged escalations too; it means nothing to `ack`")
    by = who()
    note = checked_note(args.note, by)
    if not note:
        raise CliError("--note: say what you did (it is recorded with who did it)")
    store = open_store(args)
    try:
        done = store.acknowledge_escalations(args.ids, by=f"{by}: {note}")
    except AckRefused as exc:
        lines = ack_refusals(exc)
        raise CliError("\n".join([*lines, "nothing was acknowledged"])) from None
    finally:
        store.close()
    if args.json:
        out.write(render.to_json([_json(e) for e in done]) + "\n")
        return EXIT_OK
    for escalation in done:
        out.write(f"escalation {escalation.id} ({escalation.repo_name}, {escalation.reason}) ")
        out.write("acknowledged\n")
    return EXIT_OK


def register(top: Subparsers) -> None:
    what = "escalations waiting for a human, with the next step; `ack` acknowledges"
    # Listing is the command itself and `ack` is optional: argparse's usage would show the
    # subcommand as required.
    usage = (
        "%(prog)s [-h] [--config CONFIG] [--database-url DATABASE_URL] [--all] [--json]\n"
        "       %(prog)s ack ID [ID ...] --note NOTE"
    )
    parser = top.add_parser("escalations", help=what, description=what, usage=usage)
    common_options(parser)
    parser.add_argument("--all", action="store_true", help="acknowledged ones too, who and when")
    json_flag(parser)
    parser.set_defaults(handler=cmd_escalations, parser=parser)
    sub = parser.add_subparsers(dest="sub", metavar="SUB", prog=parser.prog)
    ack = add_command(
        sub,
        "ack",
        cmd_escalations_ack,
        "acknowledge escalations (all the ids given, or none)",
        common=False,
    )
    ack.add_argument("ids", nargs="+", type=record_id, metavar="ID")
    ack.add_argument("--note", required=True, help="what you did; recorded with who did it")
    common_options(ack, inherited=True)  # before `ack` or after it, alike
    json_flag(ack, inherited=True)
