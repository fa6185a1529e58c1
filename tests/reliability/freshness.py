"""Is ``docs/reliability.md`` recent enough to describe the code? ``scripts/test`` asks.

    python -m tests.reliability.freshness [--root DIR] [--max-lag N]

The page says at which commit it was generated. It is stale when the last
commit that changed ``pipeline/`` is more than ``MAX_LAG`` commits after that
one: then exit 1, naming both commits and the command that regenerates it.
Outside a git checkout (a source archive) there is no history to compare:
say so and exit 0. When the stamped commit is not in this history (a rebase
rewrote it, or a shallow clone lacks it), the commit that last changed the
page stands in for it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_LAG = 30
PAGE = Path("docs/reliability.md")
STAMP = re.compile(r"at commit `([0-9a-f]{7,40})`")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def _known(root: Path, sha: str) -> bool:
    return _git(root, "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def _last_change(root: Path, path: str) -> str:
    return _git(root, "log", "-1", "--format=%H", "--", path).stdout.strip()


def check(root: Path, max_lag: int = MAX_LAG) -> Verdict:
    """The page's verdict: fresh, stale (with the numbers), or skipped (no git history)."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return Verdict(True, f"skipped: {root} is not a git checkout, so {PAGE} cannot be dated")
    page = root / PAGE
    if not page.exists():
        return Verdict(False, f"{PAGE} is missing: run scripts/reliability")
    match = STAMP.search(page.read_text(encoding="utf-8"))
    if match is None:
        return Verdict(False, f"{PAGE} has no 'at commit `<sha>`' stamp: run scripts/reliability")
    stamp, note = match.group(1), ""
    if not _known(root, stamp):
        stamp, note = _last_change(root, str(PAGE)), f" (stamp {match.group(1)} not in history)"
        if not stamp:
            return Verdict(False, f"{PAGE} was never committed: commit it after regenerating")
    code = _last_change(root, "pipeline")
    if not code:
        return Verdict(True, "skipped: no commit changes pipeline/ in this history")
    lag = int(_git(root, "rev-list", "--count", f"{stamp}..{code}").stdout.strip() or 0)
    where = f"{PAGE} generated at {stamp[:12]}{note}; pipeline/ last changed at {code[:12]}"
    if lag > max_lag:
        return Verdict(
            False,
            f"{where}, {lag} commits later (more than {max_lag}): the figures describe old "
            "code; run scripts/reliability and commit the page",
        )
    return Verdict(True, f"{where}, {lag} commits later (at most {max_lag})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.freshness")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--max-lag", type=int, default=MAX_LAG)
    args = parser.parse_args(argv)
    verdict = check(args.root, args.max_lag)
    print(f"reliability page: {verdict.message}", file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
