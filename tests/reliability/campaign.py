"""Run the whole reliability and security campaign and write ``docs/reliability.md``.

    scripts/reliability            # bounded form (what CI runs), a few minutes
    scripts/reliability --long     # long form: the full soak (also PIPELINE_RELIABILITY_LONG=1)

Every figure in the page comes from this run's measurements; the exit code is
1 when any scenario found a violation, a lost issue, a double push, a
duplicate comment, a misclassified fault or a leaked secret. Pushes and
comments are judged per issue by ``oracle.py``, from the bare remotes and the
tracker.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from .faultmatrix import fault_matrix
from .figures import Figures
from .forgefaults import FORGE_FAULTS, forge_fault
from .killmatrix import kill_matrix
from .pause import PAUSE_STATES, pause_trial
from .security import secret_scan
from .soak import BOUNDED, FULL, SQLITE_BOUNDED, SQLITE_FULL, soak
from .world import postgres_available

ROOT = Path(__file__).resolve().parents[2]
FUZZ_TESTS = (
    "tests/fuzz/test_fuzz_webhooks.py",
    "tests/fuzz/test_fuzz_config.py",
    "tests/fuzz/test_fuzz_streams.py",
)
COLUMNS = (
    "Scenario",
    "Engine",
    "Trials",
    "Faults injected",
    "Invariant violations",
    "Lost issues",
    "Double pushes",
    "Duplicate comments",
    "Misclassified",
    "Leaked secrets",
    "Recovery p50 / max (s)",
    "Throughput (runs/min)",
    "Duration (s)",
)


SCENARIOS = (
    "- **kill -9 at a checkpoint** (`killmatrix.py`): `PIPELINE_FAULTS=<checkpoint>` makes the "
    "daemon SIGKILL itself at that phase boundary; a clean daemon is started; the run must "
    "end succeeded, its issue closed, with exactly one commit carrying its `Afk-Run` trailer.",
    "- **kill -9 mid-agent**: the daemon is killed while its agent works; the orphaned agent "
    "finishes alone; the run is redone and pushed once.",
    "- **soak** (`soak.py`): replica daemons on one database, issues spread over repos, an "
    "agent with random durations, replicas killed at random and restarted. A checker reads "
    "every run every 50 ms and records any instant with two busy runs in a repo, more busy "
    "runs than `max_concurrency`, or two active runs for one issue.",
    "- **SIGSTOP past the lease** (`pause.py`): a daemon is frozen mid-run, another one "
    "recovers and finishes the run, then the frozen one is thawed. Positive evidence of the "
    "fence is required: the thawed daemon's log shows its write rejected (lease lost), and "
    "the run's timeline holds no event of the stale attempt after the run was claimed "
    "again; it must not push again nor die. With the fence sabotaged "
    "(`PIPELINE_FAULTS=remove_fence`, a test only) the scenario fails on both engines.",
    "- **agent and git faults** (`faultmatrix.py`): each fault in its own world; the run must "
    "end in the expected state with the expected `error_class`, the daemon must stay up and "
    "stop cleanly, and nothing may be pushed twice.",
    "- **forge faults** (`forgefaults.py`): the loopback GitHub, Gitea and GitLab fakes answer "
    "the ready-issue listing with the fault once; intake must report it, back off at least as "
    "long as the forge asked, then enqueue the issue exactly once. A comment POST that times "
    "out after the forge stored it must not be posted again.",
    "- **security** (`security.py`): every kind of secret configured with sentinel values "
    "(some under innocent variable names), the issues on the loopback fake GitHub, which "
    "answers only requests carrying the sentinel forge token; an issue whose title and body "
    "try shell, path and "
    "ref injection; an untrusted labeller; a deploy probe that prints its environment; an "
    "agent that echoes its key. Then the daemon log, every row of every table, each run's "
    "events and `runs show`, `config show`, the forge's comments, every file of the volume "
    "(frozen evidence included) and the agent's environment are scanned for the sentinels.",
    "- **fuzzing** (`tests/fuzz/`, hypothesis): webhook deliveries through "
    "`Intake.handle_webhook` and `POST /webhooks/<tracker>`, config files through "
    "`load_settings`, stream lines through the Claude and Codex parsers. Each generated "
    "input is one trial (unit: inputs).",
    "- **the oracle** (`oracle.py`), for every scenario that runs daemons: each labelled "
    "issue must have exactly one commit on the remote carrying the `Afk-Run` trailer of one "
    "of its runs (a second run of the issue that pushes again is a double push), be closed "
    "with exactly one closing comment, and carry no pipeline comment twice.",
)
FIXES = (
    "- `flow.py`: the `after_push` checkpoint was never reached (the push was recorded "
    "directly), so the most dangerous crash point was untested; it now sits between the "
    "push and its record.",
    "- `watch/deploy.py`: a command deploy probe inherited the daemon's whole environment "
    "and its output became run evidence: the webhook secret ended up in the events, the "
    "database and the frozen manifest. Probes now get no variable holding a daemon secret, "
    "and their output is masked.",
    "- `intake.py`: the start-up poll and the first periodic poll ran at once and raced on "
    "the half-processed list (KeyError), which killed the daemon at start; polls are now "
    "serialised.",
    "- `agents/command.py`: a command agent killed by a signal (segfault, OOM killer) was "
    "reported as an ordinary error (`agent_error`); it is now `agent_crash`.",
    "- `proc.py`: cleaning up stragglers in a reused worktree killed the whole process group "
    "of any process found there; a frozen replica's git child thus took its entire daemon "
    "down. Only a straggler that leads its group (an agent) is killed with its group.",
    "- `store/issues.py`, `store/repos.py`: PostgreSQL replicas starting together both "
    "INSERTed the same new issue (or repo); the loser's unique violation killed it at start. "
    "The loser now updates.",
)


def fuzz_figures(*, long: bool) -> Figures:
    """Run the hypothesis suites; count the examples they generated and the failures."""
    figures = Figures(
        scenario="fuzzing: webhooks (intake + HTTP), config files, agent streams", unit="inputs"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-show-statistics",
            *FUZZ_TESTS,
        ],
        cwd=ROOT,
        env={**os.environ, "PIPELINE_RELIABILITY_LONG": "1" if long else "0"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    examples = sum(int(n) for n in re.findall(r"(\d+) passing,", proc.stdout))
    properties = len(re.findall(r"^\S+::test_\w+:$", proc.stdout, re.MULTILINE))
    figures.trials = figures.faults_injected = examples  # each generated input is one trial
    if proc.returncode != 0:
        tail = proc.stdout.strip().splitlines()[-5:]
        figures.misclassified.append("fuzz tests failed: " + " | ".join(tail))
    figures.notes.append(f"{examples} generated inputs over {properties} properties")
    figures.duration_s = time.monotonic() - started
    return figures


def run_campaign(
    root: Path, *, long: bool, engines: tuple[str, ...], progress: Callable[[Figures], None]
) -> list[Figures]:
    results: list[Figures] = []

    def keep(figures: Figures) -> None:
        results.append(figures)
        progress(figures)

    for figures in kill_matrix(root / "kill", engines, repeat=3 if long else 1):
        keep(figures)
    if "postgresql" in engines:
        keep(soak(root / "soak", FULL if long else BOUNDED))
    keep(soak(root / "soak-sqlite", SQLITE_FULL if long else SQLITE_BOUNDED))
    for engine in engines:
        for state in PAUSE_STATES if long else ("publishing",):
            keep(pause_trial(root / f"pause-{engine}-{state}", engine, state))
    for figures in fault_matrix(root / "faults"):
        keep(figures)
    forge = Figures(
        scenario="forge faults: 5xx, timeouts, 403/429 + headers, bad JSON, "
        "comment timeout (GitHub, Gitea, GitLab fakes)"
    )
    for index, fault in enumerate(FORGE_FAULTS):
        forge.merge(forge_fault(root / f"forge{index}", fault))
    keep(forge)
    for engine in engines:
        keep(secret_scan(root / f"security-{engine}", engine))
    keep(fuzz_figures(long=long))
    return results


def _cell(values: list[str]) -> str:
    return str(len(values))


def _recovery(figures: Figures) -> str:
    p50, most = figures.recovery_p50(), figures.recovery_max()
    return "-" if p50 is None or most is None else f"{p50:.2f} / {most:.2f}"


def row(figures: Figures) -> str:
    cells = [
        figures.scenario,
        figures.engine,
        f"{figures.trials} {figures.unit}",
        str(figures.faults_injected),
        _cell(figures.invariant_violations),
        _cell(figures.lost_issues),
        _cell(figures.double_pushes),
        _cell(figures.duplicate_comments),
        _cell(figures.misclassified),
        _cell(figures.leaked_secrets),
        _recovery(figures),
        "-" if figures.throughput_per_min is None else f"{figures.throughput_per_min:.1f}",
        f"{figures.duration_s:.1f}",
    ]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


UNITS = {
    "trials": "crash, fault, pause and security trials",
    "issues": "soak issues",
    "inputs": "fuzz inputs",
}


def totals_by_unit(results: list[Figures]) -> list[Figures]:
    """One total row per unit of trial, in the order of ``UNITS``."""
    totals: list[Figures] = []
    for unit, what in UNITS.items():
        total = Figures(scenario=f"**total: {what}**", unit=unit)
        for figures in results:
            if figures.unit == unit:
                total.merge(figures)
        totals.append(total)
    return totals


def render(
    results: list[Figures],
    *,
    long: bool,
    engines: tuple[str, ...],
    skipped: list[str],
    elapsed_s: float,
) -> str:
    totals = totals_by_unit(results)
    problems = [f"- {f.scenario} ({f.engine}): {p}" for f in results for p in f.problems]
    notes = [
        f"- {f.scenario} ({f.engine}): {n}"
        for f in results
        for n in f.notes
        if f.scenario.startswith(("soak", "fuzz", "fault"))
    ]
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    lines = [
        "# Reliability and security figures",
        "",
        "Generated by `scripts/reliability" + (" --long" if long else "") + "` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit `{commit}` "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}, engines: "
        f"{', '.join(engines)}). Do not edit by hand: run the command again.",
        "",
        "What each scenario does is described in `tests/reliability/` (one module per "
        "scenario). Recovery time is measured from the restart of a killed daemon (or, in "
        "the soak, from the kill of a replica) to the moment its run is claimed again or "
        "ended; it is bounded by the lease (3 s here) plus one sweep.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *[row(f) for f in results],
        *[row(t) for t in totals],
        "",
        f"The whole campaign took {elapsed_s:.0f} s. Totals add only trials of one kind: "
        "crash, fault, pause and security trials (one world each), soak issues, and fuzz "
        "inputs are not comparable units. A double push is an issue with more than one "
        "commit on the remote (whichever runs pushed them); duplicate comments are closing "
        "comments beyond the first, or any pipeline comment posted twice, on one issue.",
        "",
        "## Scenarios",
        "",
        *SCENARIOS,
        "",
        "## Problems found in this run",
        "",
        *(
            problems
            or [
                "None: zero violations, lost issues, double pushes, duplicate comments, "
                "misclassified faults and leaked secrets."
            ]
        ),
        "",
        "## Notes",
        "",
        *(notes or ["-"]),
        *(["", "## Not run", "", *[f"- {s}" for s in skipped]] if skipped else []),
        "",
        "## Fixed because of this campaign",
        "",
        "Each fix has a regression test in `tests/reliability/test_regressions.py` (or, for "
        "the first, the kill matrix itself).",
        "",
        *FIXES,
        "",
        "## Regenerate",
        "",
        "```",
        "scripts/reliability          # bounded form, as in CI (pytest -m reliability)",
        "scripts/reliability --long   # the full soak: 3 replicas, 200 issues over 20 repos",
        "```",
        "",
        "PostgreSQL scenarios need a server at `$PIPELINE_TEST_POSTGRES_URL` (default "
        "`postgresql://postgres@127.0.0.1:5432/test`); each trial creates and drops its own "
        "database.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/reliability",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--long",
        action="store_true",
        default=os.environ.get("PIPELINE_RELIABILITY_LONG") == "1",
        help="the long form (full soak); also PIPELINE_RELIABILITY_LONG=1",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the in-process scenarios' expected warnings
    problem = postgres_available()
    engines = ("sqlite",) if problem else ("sqlite", "postgresql")
    skipped = [f"PostgreSQL scenarios (kill matrix, soak, security): {problem}"] if problem else []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="afk-reliability-") as tmp:
        results = run_campaign(
            Path(tmp), long=args.long, engines=engines, progress=lambda f: print(row(f), flush=True)
        )
    elapsed = time.monotonic() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        render(results, long=args.long, engines=engines, skipped=skipped, elapsed_s=elapsed),
        encoding="utf-8",
    )
    if args.json:
        args.json.write_text(json.dumps([f.as_json() for f in results], indent=2))
    failed = [f for f in results if f.problems]
    print(
        f"wrote {args.out}: {len(results)} scenarios, {len(failed)} with problems, {elapsed:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
