"""Time to a ready workspace for the next run: warm slot vs the real alternative, paired.

``python -m benchmarks workspace --json [--rounds 5] [--files 5000]`` builds, in a
temporary directory, a wheelhouse of real packages (``pip download`` once;
nothing is fetched afterwards: uv resolves from it, ``no-index``) and a bare
remote holding a Python project of about 5,000 files with a ``uv.lock``. Every
round, a new commit lands upstream first; then, in turn (A B C D, next round
in another order):

* ``warm``: ``Workspaces.prepare`` for the next run, and nothing else. Before
  the clock starts, untimed, the previous run edits, commits and leaves junk in
  its slot (the agent's work, ``dirty``) and the slot is released. The sample
  is the real fetch into the mirror (it brings the new commit), the checkout
  fed from the mirror, the slot's clean and reset to the new commit, and the
  setup command ``uv sync --frozen`` on the warm ``.venv``;
* ``release``: ``Workspaces.release`` of that previous run's slot (detach it,
  delete its branch), timed on its own just before ``warm``'s clock starts and
  reported as ``release_s``, so that no part of the slot's turnaround is hidden;
* ``clone_local``: the usual alternative: ``git clone --local`` of a warm
  base checkout, fetch the new commit, check it out, and ``uv sync --frozen``
  with a warm uv cache;
* ``cold``: ``git clone`` of the remote and ``uv sync --frozen`` with an
  empty uv cache.

* ``floor``: what any warm approach pays at least, in a tree of its own that
  is already synced: ``git fetch`` of the new commit, its checkout (one file
  changed) and ``uv sync --frozen`` with nothing to do.
  ``floor_ratio_vs_clone_local`` is the ratio warm would have if preparing a
  slot cost nothing else.

The trees ``clone_local`` and ``cold`` made are deleted after each round,
untimed, as ``dirty`` and ``release`` are for ``warm``.
``ratio_vs_clone_local`` is the median of the per-round ratios warm /
clone_local. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._paired import machine, show_round, sized_parser, spread
from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.proc import run_command, shell_argv
from pipeline.testing.gitrepos import git, make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import Workspaces

PACKAGES = ("requests", "click", "attrs", "packaging", "jinja2", "pyyaml", "rich")
MODULES_PER_DIR = 100
UV = str(Path(sys.executable).parent / "uv")
SYNC = f"{UV} sync --frozen --quiet"


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


def project_files(count: int, pins: list[str], wheelhouse: Path, tmp: Path) -> dict[str, str]:
    """A Python project of ``count`` files, locked by uv against ``wheelhouse``."""
    deps = ", ".join(f'"{pin}"' for pin in pins)
    pyproject = (
        '[project]\nname = "benchproj"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{deps}]\n[tool.uv]\nno-index = true\n"
        f'find-links = ["{wheelhouse}"]\npackage = false\n'
    )
    locking = tmp / "locking"
    locking.mkdir()
    (locking / "pyproject.toml").write_text(pyproject)
    subprocess.run([UV, "lock", "--quiet"], cwd=locking, env=uv_env(tmp / "lock-cache"), check=True)
    files = {
        "pyproject.toml": pyproject,
        "uv.lock": (locking / "uv.lock").read_text(),
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


def uv_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(UV_CACHE_DIR=str(cache), UV_PYTHON=sys.executable, UV_NO_PROGRESS="1")
    return env


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


def sync(tree: Path, env: dict[str, str]) -> None:
    result = run_command(shell_argv(SYNC), cwd=tree, env=env)
    if not result.ok:
        raise SystemExit(f"uv sync failed in {tree.name}:\n{result.output_tail}")


class Bench:
    """The three ways to a ready tree, over one remote and one volume."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        (root / "volume").mkdir(exist_ok=True)
        self.ws = Workspaces(root / "volume", WorkspaceSettings(fetch_debounce_s=0.0))
        self.repo = RepoSettings(
            name="bench",
            tracker="local",
            slug="bench/project",
            remote_url=url,
            setup_commands=(SYNC,),
        )
        # The repo's own uv cache, the one its runs' setup uses: every path starts as warm.
        self.warm_cache = Path(self.ws.cache_env(self.repo)["UV_CACHE_DIR"])
        self.env = uv_env(self.warm_cache)
        self.pusher = root / "pusher"
        git(root, "clone", "-q", url, str(self.pusher))
        self.base = root / "base"  # the warm base the clone_local path copies
        git(root, "clone", "-q", url, str(self.base))
        sync(self.base, self.env)
        self.floor_tree = root / "floor"
        git(root, "clone", "-q", url, str(self.floor_tree))
        sync(self.floor_tree, self.env)
        self.slot = self.ws.prepare(
            self.repo, run_id=1, issue_ref="1", base_env=self.env, events=RecordingSink()
        )
        self.run_id = 1

    def new_upstream_commit(self, n: int) -> str:
        (self.pusher / "src/benchproj/pkg001/mod00100.py").write_text(f"ROUND = {n}\n")
        git(self.pusher, "commit", "-qam", f"upstream {n}")
        git(self.pusher, "push", "-q", "origin", "HEAD:main")
        return git(self.pusher, "rev-parse", "HEAD").strip()

    def end_run(self) -> float:
        """The previous run's edits (untimed), then its release; returns release's seconds."""
        dirty(self.slot.path, self.run_id)
        started = time.perf_counter()
        self.ws.release(self.slot, succeeded=True)
        return time.perf_counter() - started

    def warm(self, n: int) -> Path:
        self.run_id += 1
        self.slot = self.ws.prepare(
            self.repo,
            run_id=self.run_id,
            issue_ref=str(self.run_id),
            base_env=self.env,
            events=RecordingSink(),
        )
        return self.slot.path

    def clone_local(self, n: int) -> Path:
        target = self.root / f"local-{n}"
        git(self.root, "clone", "-q", "--local", str(self.base), str(target))
        git(target, "fetch", "-q", self.url, "main")
        git(target, "checkout", "-q", "--detach", "FETCH_HEAD")
        sync(target, self.env)
        return target

    def floor(self, n: int) -> Path:
        git(self.floor_tree, "fetch", "-q", self.url, "main")
        git(self.floor_tree, "checkout", "-q", "--detach", "FETCH_HEAD")
        sync(self.floor_tree, self.env)
        return self.floor_tree

    def cold(self, n: int) -> Path:
        target = self.root / f"cold-{n}"
        git(self.root, "clone", "-q", self.url, str(target))
        sync(target, uv_env(self.root / f"cold-cache-{n}"))
        return target


def timed(step: Callable[[int], Path], n: int, expected: str) -> float:
    started = time.perf_counter()
    tree = step(n)
    elapsed = time.perf_counter() - started
    head = git(tree, "rev-parse", "HEAD").strip()
    if head != expected or not (tree / ".venv").is_dir():
        raise SystemExit(f"{step.__name__}: not at the new upstream commit, or no .venv")
    return elapsed


def measure(bench: Bench, rounds: int) -> dict[str, list[float]]:
    steps = {
        "warm": bench.warm,
        "clone_local": bench.clone_local,
        "cold": bench.cold,
        "floor": bench.floor,
    }
    samples: dict[str, list[float]] = {name: [] for name in [*steps, "release"]}
    names = list(steps)
    for n in range(rounds):
        expected = bench.new_upstream_commit(n)
        for name in names[n % 4 :] + names[: n % 4]:
            if name == "warm":
                samples["release"].append(bench.end_run())
            samples[name].append(timed(steps[name], n, expected))
        show_round(n, samples, 3)
        for leftover in bench.root.glob(f"*-{n}"):
            shutil.rmtree(leftover, ignore_errors=True)
    return samples


def main(argv: list[str]) -> int:
    args = sized_parser("workspace", 5000, 5).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="afk-bench-ws-") as tmp:
        root = Path(tmp)
        pins = build_wheelhouse(root / "wheelhouse")
        files = project_files(args.files, pins, root / "wheelhouse", root)
        url = make_remote(root, files, name="project")
        print(f"remote: {len(files)} files, {len(pins)} locked packages", flush=True)
        samples = measure(Bench(root, url), args.rounds)

    def ratios(name: str) -> list[float]:
        pairs = zip(samples[name], samples["clone_local"], strict=True)
        return [a / b for a, b in pairs]

    summary = {
        "benchmark": "workspace",
        "files": len(files),
        "packages": len(pins),
        "rounds": args.rounds,
        **{f"{name}_s": spread(values, 3) for name, values in samples.items()},
        "ratio_vs_clone_local": round(statistics.median(ratios("warm")), 4),
        "ratio_vs_clone_local_spread": spread(ratios("warm"), 4),
        "floor_ratio_vs_clone_local": round(statistics.median(ratios("floor")), 4),
        "ratio_vs_cold": round(
            statistics.median(w / c for w, c in zip(samples["warm"], samples["cold"], strict=True)),
            4,
        ),
        "machine": machine(),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
