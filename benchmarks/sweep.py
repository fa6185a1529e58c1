"""What the sweep for special files costs after a command, against the daemon's own git, paired.

``python -m benchmarks sweep --json [--rounds 20] [--files 50000]`` builds, in a
temporary directory, a worktree (as a run's slot is) of the shape a JavaScript
project has after an install: a few hundred tracked source files, and a
``node_modules`` of ``--files`` entries in nested packages (``lib/``, ``dist/``,
packages nested in a package's own ``node_modules``, scoped ``@scope/`` packages,
``.bin`` symlinks), which ``.gitignore`` excludes as a real project's does; and a
few new files the agent made. Every round runs, in turn (A B C D, the next round
in another order):

* ``sweep``: ``drop_special_files`` over the whole tree, as ``Jail.run`` runs it
  after every sandboxed command: every directory, ``node_modules`` included.
  Nothing is there to delete (the common case; the warm-up checks that a FIFO
  planted deep in ``node_modules`` is found);
* ``git_untracked``: ``git ls-files -z --others --exclude-standard`` through the
  daemon's git (``Git.untracked``), the listing of new files it runs after every
  agent run to stage them: git walks the tree too, but not into a directory
  ``.gitignore`` excludes;
* ``git_ignored``: ``git ls-files -z --others --ignored --exclude-standard
  --directory`` (``Git.ignored``), which it runs after every agent run as well;
* ``git_full_walk``: ``git ls-files -z --others --ignored --exclude-standard``,
  which lists every ignored file: git walking all of ``node_modules``, as the
  sweep does (no daemon command does this; it shows what a walk in C costs).

``ratio_sweep_vs_git`` is the median of the per-round ratios sweep /
git_untracked; ``ratio_sweep_vs_git_full_walk`` likewise against
git_full_walk. The tree is in the page cache (it was just written), as a tree
is right after the command that wrote it. The last line printed is one JSON
object.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._paired import machine, show_round, sized_parser, spread
from pipeline.core.files import drop_special_files
from pipeline.git.commits import Git
from pipeline.git.repo import GitRepo
from pipeline.testing.gitrepos import git

TARGET_SWEEP_S = 0.5
SOURCE_FILES = 300
NEW_FILES = 5
# One package: (directory inside the package, files in it). 32 files in 4 directories.
PACKAGE = (("", 6), ("lib", 14), ("lib/internal", 6), ("dist", 6))
ENTRY_NAMES = ("package.json", "README.md", "LICENSE", "index.js", "index.d.ts", "CHANGELOG.md")


def package_dir(index: int) -> str:
    """Where package ``index`` lives under ``node_modules``: one in ten scoped, and of
    every five, two nested in their neighbour's own ``node_modules`` (depth 2 and 3)."""
    name = f"@scope{index // 10:03d}/pkg{index:05d}" if index % 10 == 9 else f"pkg{index:05d}"
    if index % 5 in (3, 4):
        return f"{package_dir(index - 1)}/node_modules/{name}"
    return f"node_modules/{name}"


def package_files(index: int) -> list[str]:
    """The files of package ``index`` (paths from the project's root)."""
    base = package_dir(index)
    paths = []
    for sub, count in PACKAGE:
        where = f"{base}/{sub}" if sub else base
        names = ENTRY_NAMES if not sub else [f"m{n:02d}.js" for n in range(count)]
        paths += [f"{where}/{name}" for name in names]
    return paths


def node_modules(entries: int) -> tuple[list[str], dict[str, str]]:
    """Exactly ``entries`` paths under ``node_modules``: files, and ``.bin`` symlinks
    (path -> target) to the ``index.js`` of one package in ten."""
    files: list[str] = []
    links: dict[str, str] = {}
    index = 0
    while len(files) + len(links) < entries:
        package = package_files(index)
        if index % 10 == 0:
            links[f"node_modules/.bin/cli{index:05d}"] = f"../{package[3][len('node_modules/') :]}"
        files += package[: entries - len(files) - len(links)]
        index += 1
    return files, links


def sources() -> dict[str, str]:
    """The tracked part: ``.gitignore``, a manifest and the project's own sources."""
    files = {
        ".gitignore": "node_modules/\ndist/\ncoverage/\n",
        "package.json": '{"name": "bench", "version": "1.0.0"}\n',
        "README.md": "benchmark project\n",
    }
    for n in range(SOURCE_FILES - len(files)):
        files[f"src/part{n // 30:02d}/module{n:04d}.ts"] = f"export const value{n} = {n};\n"
    return files


def build_tree(root: Path, entries: int) -> tuple[Path, GitRepo]:
    """The project, committed, checked out as a worktree (as a run's slot is) with its
    ``node_modules`` and the agent's new files; the tree and its repository."""
    checkout, tree = root / "checkout", root / "project"
    for name, text in sources().items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(text)
    git(checkout, "init", "-q", "--initial-branch=main")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "the project")
    git(checkout, "worktree", "add", "-q", "-b", "afk/1", str(tree))
    files, links = node_modules(entries)
    made: set[Path] = set()
    for name in files:
        path = tree / name
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_text("module.exports = {};\n")
    (tree / "node_modules" / ".bin").mkdir(parents=True, exist_ok=True)
    for name, target in links.items():
        (tree / name).symlink_to(target)
    for n in range(NEW_FILES):
        (tree / f"src/part00/new{n}.ts").write_text("export const made = 1;\n")
    return tree, GitRepo.worktree(checkout, tree)


def check(tree: Path, repo: Git, entries: int) -> None:
    """Warm-up, not counted: each side sees what it should, and the sweep finds a FIFO."""
    deepest = max(node_modules(entries)[0], key=lambda path: path.count("/"))
    planted = str(Path(deepest).parent / ".gitignore")
    os.mkfifo(tree / planted)
    if drop_special_files(tree) != [planted]:
        raise SystemExit(f"the sweep did not find the FIFO {planted}")
    if len(repo.untracked()) != NEW_FILES:
        raise SystemExit(f"git lists {sorted(repo.untracked())}, not the {NEW_FILES} new files")
    if repo.ignored() != {"node_modules/"}:
        raise SystemExit(f"git ignores {sorted(repo.ignored())[:5]}, not node_modules/")


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def measure(tree: Path, repo: Git, rounds: int) -> dict[str, list[float]]:

    def sweep() -> None:
        if dropped := drop_special_files(tree):
            raise SystemExit(f"the sweep dropped {dropped[:5]} from a tree with none")

    steps: dict[str, Callable[[], object]] = {
        "sweep": sweep,
        "git_untracked": repo.untracked,
        "git_ignored": repo.ignored,
        "git_full_walk": lambda: repo.run(
            "ls-files", "-z", "--others", "--ignored", "--exclude-standard"
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for n in range(rounds):
        for name in names[n % 4 :] + names[: n % 4]:
            samples[name].append(timed(steps[name]))
        show_round(n, samples, 4)
    return samples


def ratio(samples: dict[str, list[float]], over: str) -> list[float]:
    """Per-round ratios sweep / ``over``."""
    return [a / b for a, b in zip(samples["sweep"], samples[over], strict=True)]


def summarise(samples: dict[str, list[float]], entries: int, directories: int) -> dict[str, object]:
    sweep_median = round(statistics.median(samples["sweep"]), 4)
    return {
        "benchmark": "sweep",
        "entries": entries,
        "directories": directories,
        "tracked_files": SOURCE_FILES,
        "rounds": len(samples["sweep"]),
        **{f"{name}_s": spread(values, 4) for name, values in samples.items()},
        "sweep_median_s": sweep_median,
        "ratio_sweep_vs_git": round(statistics.median(ratio(samples, "git_untracked")), 2),
        "ratio_sweep_vs_git_spread": spread(ratio(samples, "git_untracked"), 2),
        "ratio_sweep_vs_git_full_walk": round(
            statistics.median(ratio(samples, "git_full_walk")), 2
        ),
        "sweep_us_per_entry": round(sweep_median / entries * 1e6, 2),
        "target_sweep_s": TARGET_SWEEP_S,
        "meets_target": sweep_median <= TARGET_SWEEP_S,
    }


def main(argv: list[str]) -> int:
    args = sized_parser("sweep", 50000, 20).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="afk-bench-sweep-") as tmp:
        tree, where = build_tree(Path(tmp), args.files)
        directories = 1 + sum(len(subdirs) for _dir, subdirs, _files in os.walk(tree))
        print(f"tree: {args.files} entries in node_modules, {directories} directories", flush=True)
        repo = Git(where)
        check(tree, repo, args.files)
        samples = measure(tree, repo, args.rounds)
    summary = {**summarise(samples, args.files, directories), "machine": machine()}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
