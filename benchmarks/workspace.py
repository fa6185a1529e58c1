"""Time to a ready workspace for run N+1: warm slot against a throwaway clone + full setup.

``python -m benchmarks workspace --json`` builds, in a temporary directory:

* a wheelhouse of real packages (``pip download`` once; nothing is fetched
  during setup: installs use ``--no-index --find-links``),
* a bare remote holding a Python project of about 5,000 files whose setup
  command creates ``.venv`` and installs the locked requirements unless the
  venv already matches the lock file (what ``uv sync`` does, in shell).

*cold* is the original design's per-job path: ``git clone`` of the remote
plus the full setup. *warm* is ``Workspaces.prepare`` for the next run after
a previous run edited, committed and left junk in the slot; it includes a
real ``git fetch`` (debounce 0) and the setup command's up-to-date check.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.proc import run_command, shell_argv
from pipeline.testing.gitrepos import git, make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import Workspaces

PACKAGES = ("requests", "click", "attrs", "packaging", "jinja2", "pyyaml", "rich")
MODULES_PER_DIR = 100


def setup_command(python: str) -> str:
    """Create/refresh .venv only when requirements.lock changed (idempotent, like uv sync)."""
    return (
        "h=$(sha256sum requirements.lock | cut -c1-64); "
        '[ "$(cat .venv/.lock-hash 2>/dev/null)" = "$h" ] || { '
        f"{shlex.quote(python)} -m venv .venv && "
        ".venv/bin/pip install -q --disable-pip-version-check --no-index "
        '--find-links "$WHEELHOUSE" -r requirements.lock && echo "$h" > .venv/.lock-hash; }'
    )


def build_wheelhouse(target: Path) -> list[str]:
    """Download real wheels once; returns ``name==version`` pins for the lock file."""
    target.mkdir(parents=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "-d",
            str(target),
            *PACKAGES,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"pip download failed (needs the package index once):\n{proc.stderr}")
    pins = []
    for wheel in sorted(target.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        pins.append(f"{name.replace('_', '-')}=={version}")
    return pins


def project_files(count: int, pins: list[str]) -> dict[str, str]:
    """A Python project of ``count`` files with a lock file."""
    files = {
        "pyproject.toml": '[project]\nname = "benchproj"\nversion = "0.1.0"\n',
        "requirements.lock": "\n".join(pins) + "\n",
        ".gitignore": ".venv/\nbuild/\n__pycache__/\n",
        "README.md": "benchmark project\n",
    }
    index = 0
    while len(files) < count:
        package = f"src/benchproj/pkg{index // MODULES_PER_DIR:03d}"
        body = f"VALUE_{index} = {index}\n\n\ndef f():\n    return {index}\n"
        files[f"{package}/mod{index:05d}.py"] = body
        index += 1
    return files


def dirty(tree: Path, run_id: int) -> None:
    """What an agent leaves behind: edits, a commit, untracked files, build output."""
    for n in range(20):
        (tree / f"src/benchproj/pkg000/mod{n:05d}.py").write_text(f"EDITED = {run_id}\n")
    git(tree, "commit", "-qam", f"run {run_id}")
    for n in range(20):
        (tree / f"scratch_{n}.py").write_text("x = 1\n")
    (tree / "build").mkdir(exist_ok=True)
    (tree / "build" / "artifact.bin").write_bytes(os.urandom(1 << 16))
    (tree / "README.md").write_text("uncommitted edit\n")


def time_cold(url: str, root: Path, setup: str, env: dict[str, str], rounds: int) -> list[float]:
    """Throwaway clone + full setup, ``rounds`` times."""
    results = []
    for n in range(rounds):
        target = root / f"cold-{n}"
        started = time.monotonic()
        subprocess.run(["git", "clone", "-q", url, str(target)], check=True)
        result = run_command(shell_argv(setup), cwd=target, env=env)
        elapsed = time.monotonic() - started
        if not result.ok:
            raise SystemExit(f"cold setup failed:\n{result.output_tail}")
        results.append(elapsed)
        print(f"cold round {n + 1}: {elapsed:.2f}s (setup {result.duration_s:.2f}s)", flush=True)
        shutil.rmtree(target)
    return results


def time_warm(
    url: str, volume: Path, setup: str, env: dict[str, str], rounds: int
) -> tuple[list[float], list[float], float]:
    """Prepare run 1 (first ever), then time runs 2.. after each previous run's mess."""
    ws = Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0))
    repo = RepoSettings(
        name="bench", tracker="local", slug="bench/project", remote_url=url, setup_commands=(setup,)
    )
    first = ws.prepare(repo, run_id=1, issue_ref="1", base_env=env, events=RecordingSink())
    print(f"warm slot primed (first run ever): {first.prepare_s:.2f}s", flush=True)
    totals, setups = [], []
    previous = first
    for run_id in range(2, rounds + 2):
        dirty(previous.path, run_id - 1)
        ws.release(previous, succeeded=True)
        started = time.monotonic()
        previous = ws.prepare(
            repo, run_id=run_id, issue_ref=str(run_id), base_env=env, events=RecordingSink()
        )
        elapsed = time.monotonic() - started
        assert git(previous.path, "status", "--porcelain") == ""
        assert not (previous.path / "build").exists()
        assert (previous.path / ".venv" / ".lock-hash").is_file()
        totals.append(elapsed)
        setups.append(previous.setup_s)
        print(
            f"warm run {run_id}: {elapsed:.3f}s (setup check {previous.setup_s:.3f}s)", flush=True
        )
    return totals, setups, first.prepare_s


def time_fresh_worktree(volume: Path, rounds: int) -> list[float]:
    """The rejected alternative: a new ``git worktree add`` per run (before any setup)."""
    checkout = next(volume.glob("repos/*/*/*/checkout"))
    results = []
    for n in range(rounds):
        target = volume / f"fresh-{n}"
        started = time.monotonic()
        git(checkout, "worktree", "add", "-q", "--detach", str(target), "origin/main")
        results.append(time.monotonic() - started)
        git(checkout, "worktree", "remove", "--force", str(target))
    print(f"fresh worktree add (no setup): {statistics.median(results):.2f}s", flush=True)
    return results


def time_naive_reinstall(volume: Path, env: dict[str, str]) -> float:
    """An unguarded ``pip install -r`` in the warm slot: what a non-idempotent setup costs."""
    slot = next(volume.glob("repos/*/*/*/worktrees/slot-0"))
    command = (
        ".venv/bin/pip install -q --disable-pip-version-check --no-index "
        '--find-links "$WHEELHOUSE" -r requirements.lock'
    )
    result = run_command(shell_argv(command), cwd=slot, env=env)
    print(f"unguarded pip install on a warm .venv: {result.duration_s:.2f}s", flush=True)
    return result.duration_s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks workspace")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--cold-rounds", type=int, default=3)
    parser.add_argument("--warm-rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="afk-bench-ws-") as tmp:
        root = Path(tmp)
        print("building wheelhouse (pip download, once)...", flush=True)
        pins = build_wheelhouse(root / "wheelhouse")
        print(f"wheelhouse: {len(pins)} wheels: {', '.join(pins)}", flush=True)
        files = project_files(args.files, pins)
        url = make_remote(root, files, name="project")
        print(f"remote: {len(files)} files", flush=True)
        volume = root / "volume"
        volume.mkdir()
        env = {
            **os.environ,
            "WHEELHOUSE": str(root / "wheelhouse"),
            "PIP_CACHE_DIR": str(volume / "cache" / "pip"),
        }
        setup = setup_command(sys.executable)
        cold = time_cold(url, root, setup, env, args.cold_rounds)
        warm, setups, first_s = time_warm(url, volume, setup, env, args.warm_rounds)
        fresh = time_fresh_worktree(volume, args.cold_rounds)
        naive = time_naive_reinstall(volume, env)
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    summary = {
        "benchmark": "workspace",
        "files": len(files),
        "packages": len(pins),
        "cold_s": round(cold_s, 3),
        "warm_s": round(warm_s, 3),
        "ratio": round(warm_s / cold_s, 4),
        "target_ratio": 0.05,
        "warm_setup_check_s": round(statistics.median(setups), 3),
        "first_run_s": round(first_s, 3),
        "fresh_worktree_add_s": round(statistics.median(fresh), 3),
        "unguarded_pip_install_warm_s": round(naive, 3),
        "cold_rounds": [round(x, 3) for x in cold],
        "warm_rounds": [round(x, 3) for x in warm],
    }
    if not args.json:
        print(f"cold {cold_s:.2f}s, warm {warm_s:.3f}s, ratio {summary['ratio']}")
    print(json.dumps(summary))
    return 0
