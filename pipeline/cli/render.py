"""Human output for the CLI: tables, timelines, durations and times with their zone.

On a terminal tables are drawn by ``rich`` (colour, widths that fit the
window); piped, or with ``NO_COLOR`` or ``TERM=dumb``, they are plain aligned
text that scripts can cut. Times are shown in the local zone, zone named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from pipeline.core.printable import indented, shown, shown_line
from pipeline.store.records import Repo, Run, RunEvent
from pipeline.store.waiting import WaitingIssue

STATE_STYLES = {
    "succeeded": "green",
    "failed": "red",
    "escalated": "yellow",
    "cancelled": "dim",
    "frozen": "yellow",
}


def is_terminal(out: TextIO) -> bool:
    """Colour and rich tables only for a terminal that wants them."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def stamp(value: datetime, fmt: str = "%Y-%m-%d %H:%M:%S %Z") -> str:
    """A naive-UTC database time in the local zone, with the zone's name."""
    return value.replace(tzinfo=UTC).astimezone().strftime(fmt)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    """Print a table; an empty one still prints its header."""
    if is_terminal(out):
        _rich_table(headers, rows, out)
        return
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    out.write("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not rows:
        out.write("(none)\n")


def _rich_table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    shown = Table(*headers, header_style="bold", box=None, pad_edge=False)
    for row in rows:
        # Text, never markup: an issue title like "[red]x" is shown as written.
        cells = [Text(c, style=STATE_STYLES.get(c, "")) for c in map(_cell, row)]
        shown.add_row(*cells)
    Console(file=out, highlight=False).print(shown)
    if not rows:
        out.write("(none)\n")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    text = shown(str(value).replace("\n", " ").replace("\t", " "))
    return text if len(text) <= 60 else text[:57] + "..."


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def issue_label(run: Run) -> str:
    if run.issue_number is not None:
        return f"#{run.issue_number}"
    if run.parent_id is not None:
        return f"fix of {run.parent_id}"
    return "-"


RUN_HEADERS = ("ID", "REPO", "ISSUE", "KIND", "STATE", "TRY", "CREATED", "TOOK", "COST", "RESULT")


def run_row(run: Run) -> list[object]:
    result = run.pushed_sha[:10] if run.pushed_sha else (run.error or run.error_class or "")
    return [
        run.id,
        run.repo_name,
        issue_label(run),
        run.kind,
        run.state,
        run.attempt,
        run.created_at,
        duration(run.duration_s),
        f"${run.cost_usd:.2f}",
        result,
    ]


def runs_table(runs: Sequence[Run], out: TextIO) -> None:
    table(RUN_HEADERS, [run_row(r) for r in runs], out)


def waiting_table(waiting: Sequence[WaitingIssue], out: TextIO) -> None:
    rows = [[w.repo, f"#{w.number}", w.title, "waiting", w.reason] for w in waiting]
    table(("REPO", "ISSUE", "TITLE", "STATE", "WHY"), rows, out)


def repos_table(repos: Sequence[Repo], out: TextIO) -> None:
    rows = [
        [r.name, r.tracker, r.slug, r.default_branch, r.state, r.frozen_reason or ""] for r in repos
    ]
    table(("NAME", "TRACKER", "SLUG", "BRANCH", "STATE", "FROZEN BECAUSE"), rows, out)


def run_detail(run: Run, events: Sequence[RunEvent], out: TextIO) -> None:
    """A run's header and timeline, oldest event first."""
    title = f" {shown_line(run.issue_title)}" if run.issue_title else ""
    out.write(f"run {run.id}  {run.repo_name} {issue_label(run)}{title}\n")
    fields = [
        ("kind", run.kind),
        ("state", run.state),
        ("attempt", run.attempt),
        ("created", _cell(run.created_at)),
        ("started", _cell(run.started_at)),
        ("finished", _cell(run.finished_at)),
        ("took", duration(run.duration_s)),
        ("base", run.base_sha),
        ("pushed", run.pushed_sha),
        ("branch", run.branch),
        ("session", run.agent_session),
        (
            "agent",
            f"{run.num_turns} turns, {run.tokens_in} in / {run.tokens_out} out tokens, "
            f"${run.cost_usd:.4f}",
        ),
        ("error", f"[{run.error_class or 'error'}] {run.error}" if run.error else None),
        ("issue", run.issue_url or None),
        ("resumes" if run.kind == "issue" else "parent", run.parent_id),
    ]
    for name, value in fields:
        if value not in (None, ""):
            out.write(f"  {name:<9}{indented(str(value), 11)}\n")
    out.write("timeline:\n")
    for event in events:
        out.write(event_line(event) + "\n")
    if not events:
        out.write("  (no events)\n")


def event_line(event: RunEvent) -> str:
    """One timeline line: local time with its zone, attempt, kind, message."""
    head = f"  {stamp(event.ts, '%H:%M:%S %Z')}  #{event.attempt} {event.kind:<9} "
    return head + indented(event.message, len(head))


def to_json(value: Any) -> str:
    return json.dumps(_plain(value), default=str, indent=2, sort_keys=True)


def plain(value: Any) -> Any:
    """``value`` as JSON would show it: dataclasses as dicts, times as ISO text in UTC."""
    return _plain(value)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat() + "Z"
    return value
