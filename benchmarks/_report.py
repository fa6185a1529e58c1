"""Run every benchmark and regenerate docs/benchmarks.md from their JSON lines.

``python -m benchmarks._report [--quick] [--only NAME,...]`` (``scripts/benchmarks``).
The page is generated: commit, machine, every figure, each acceptance target
with its verdict. ``--quick`` uses fewer repetitions and samples, and the page
says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._paired import machine

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"

FULL: dict[str, list[str]] = {
    "claim": ["--repetitions", "3"],
    "pickup": ["--samples", "50"],
    "poll": ["--sizes", "10,100,1000"],
    "idle": ["--duration-s", "60"],
    "scheduler": [],
    "sandbox": ["--rounds", "30"],
    "workspace": ["--rounds", "5"],
    "scrub": ["--rounds", "20"],
    "sweep": ["--rounds", "20"],
}
QUICK: dict[str, list[str]] = {
    "claim": ["--repetitions", "1", "--jobs", "300", "--repos", "60"],
    "pickup": ["--samples", "10"],
    "poll": ["--sizes", "10,100"],
    "idle": ["--duration-s", "20"],
    "scheduler": [],
    "sandbox": ["--rounds", "10"],
    "workspace": ["--rounds", "3", "--files", "2000"],
    "scrub": ["--rounds", "5"],
    "sweep": ["--rounds", "5"],
}

# (benchmark, field, comparison, target, what the acceptance says)
TARGETS: list[tuple[str, str, str, float, str]] = [
    ("claim", "ratio_vs_procrastinate", ">=", 1.0, "throughput / procrastinate (median)"),
    ("claim", "double_claims", "==", 0, "double claims"),
    ("claim", "scale_3_vs_1", ">=", 2.0, "3 replicas / 1 replica"),
    ("pickup", "p50_ms", "<=", 100, "pickup p50 (worst engine), ms"),
    ("pickup", "p95_ms", "<=", 300, "pickup p95 (worst engine), ms"),
    ("poll", "unchanged_cycle_s_1000", "<=", 1.0, "unchanged cycle at 1,000 repos, s"),
    ("poll", "enrol_s_1000", "<=", 2.0, "start-up enrolment of 1,000 repos, s"),
    ("idle", "writes_per_min", "==", 0, "SQLite writes per minute, idle"),
    ("idle", "rss_mb", "<=", 100, "idle RSS, MB"),
    ("idle", "cpu_pct", "<=", 1.0, "idle CPU, %"),
    ("workspace", "ratio_vs_clone_local", "<=", 0.10, "warm / (clone --local + uv sync)"),
    ("scheduler", "efficiency_min", ">=", 0.90, "scheduler efficiency (worst engine)"),
    ("scheduler", "violations_total", "==", 0, "scheduler violations"),
    ("sandbox", "added_s_worst", "<", 0.2, "sandbox added to an agent start, s"),
    ("sweep", "sweep_median_s", "<=", 0.5, "special-file sweep per command, 50,000 files, s"),
]

# (benchmark, field, what it tells about a target above): measured, never a target.
CONTEXT: list[tuple[str, str, str]] = [
    ("claim", "peer_scale_3_vs_1", "procrastinate's own 3 workers / 1 worker, same machine"),
    ("claim", "cpu_busy_pct_1_replica", "machine CPU busy while 1 replica claims, %"),
    ("workspace", "floor_ratio_vs_clone_local", "fetch + checkout + no-op uv sync / clone_local"),
    ("sweep", "ratio_sweep_vs_git", "sweep / the daemon's git listing of new files (median)"),
    ("sweep", "ratio_sweep_vs_git_full_walk", "sweep / git listing every ignored file (median)"),
]


def run(name: str, extra: list[str]) -> dict[str, Any] | None:
    command = [sys.executable, "-m", "benchmarks", name, "--json", *extra]
    print(f"== {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n", flush=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return None
    result: dict[str, Any] = json.loads(lines[-1])
    result["_exit"] = proc.returncode
    result["_wall_s"] = round(time.monotonic() - started, 1)
    return result


def verdict(value: Any, op: str, target: float) -> str:
    if value is None:
        return "not measured"
    ok = {">=": value >= target, "<=": value <= target, "==": value == target, "<": value < target}
    return "met" if ok[op] else "NOT met"


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "pipeline", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head.stdout.decode().strip() + (" (with uncommitted changes)" if dirty else "")


def _mode(quick: bool) -> str:
    if quick:
        return f"quick, fewer repetitions and samples than the acceptance asks: `{QUICK}`"
    return f"full: `{FULL}`"


def render(
    results: dict[str, dict[str, Any] | None], quick: bool, start: tuple[str, object]
) -> str:
    """The page; ``start`` is (commit, load average) when the run began."""
    box = machine()
    lines = [
        "# Benchmarks",
        "",
        "Generated by `scripts/benchmarks` (`python -m benchmarks._report`); do not edit by hand.",
        "",
        f"- commit: `{start[0]}` at the start; written {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        f"- machine: {box['cpus']} CPUs, {box['platform']}, Python {box['python']}, "
        f"load average at the start {start[1]}, at the end {box['load_average']}",
        f"- mode: {_mode(quick)}",
        "",
        "## Acceptance",
        "",
        "| benchmark | figure | value | target | verdict |",
        "|---|---|---|---|---|",
    ]
    for name, field, op, target, what in TARGETS:
        result = results.get(name)
        value = result.get(field) if result else None
        shown = "—" if value is None else value
        lines.append(
            f"| {name} | {what} (`{field}`) | {shown} | {op} {target} | "
            f"{verdict(value, op, target)} |"
        )
    lines += ["", "## Context for the targets", ""]
    lines += ["| benchmark | figure | value |", "|---|---|---|"]
    for name, field, what in CONTEXT:
        result = results.get(name)
        value = result.get(field) if result else None
        lines.append(f"| {name} | {what} (`{field}`) | {'—' if value is None else value} |")
    lines += ["", "## Every figure", ""]
    for name, result in results.items():
        lines += [f"### {name}", ""]
        if result is None:
            lines += ["Not measured: no JSON line (see the run's output).", ""]
            continue
        shown = json.dumps(result, indent=1, sort_keys=True).replace(str(ROOT), ".")
        lines += ["```json", shown, "```", ""]
    lines += [
        "## Not measured",
        "",
        "- Benchmarks left out of this run (`--only`) show as not measured above.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and samples")
    parser.add_argument("--only", help="comma-separated benchmark names (the page lists all)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    names = args.only.split(",") if args.only else list(plan)
    start = (commit(), machine()["load_average"])
    results = {name: run(name, plan[name]) for name in names}
    PAGE.write_text(render(results, args.quick, start))
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
