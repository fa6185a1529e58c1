"""What the sandbox adds to starting a command: the same agent start, with and without it.

``python -m benchmarks sandbox --json`` starts the same short command (a
Python interpreter that imports nothing and exits: the cheapest "agent") in a
prepared worktree through ``Jail.run``: unconfined (the alternative: what the
daemon did before the sandbox), in a bubblewrap sandbox with the host's
network (``open``), and in one with the network allowlist (``allowlist``: the
in-sandbox relay and the daemon's proxy socket as well). The variants are
interleaved (A B C A B C ...) so a noisy machine hits them alike; the figures
are min/median/max seconds per start, and ``added_s`` is each sandboxed
median minus the unconfined median. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pipeline.config.settings import RepoSettings, Settings, WorkspaceSettings
from pipeline.sandbox import BwrapSandbox, NetworkPolicy, build_sandbox
from pipeline.sandbox.jail import Jail, Jailer
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import Workspaces

TARGET_ADDED_S = 0.2
AGENT = [sys.executable, "-I", "-S", "-c", "pass"]


def prepared_jail(root: Path) -> tuple[Jail, BwrapSandbox]:
    """A real worktree on a real volume, its jail built the way the daemon builds it."""
    volume = root / "volume"
    volume.mkdir()
    settings = Settings(database_url=f"sqlite:///{root / 'history.db'}", volume=volume)
    sandbox = build_sandbox(settings)
    assert isinstance(sandbox, BwrapSandbox)
    jailer = Jailer(sandbox, host_env=dict(os.environ), homes_root=volume / "homes")
    spaces = Workspaces(volume, WorkspaceSettings(), jailer=jailer)
    repo = RepoSettings(
        name="bench",
        tracker="local",
        slug="bench/app",
        remote_url=make_remote(root, {"README.md": "bench\n"}, name="app"),
    )
    ws = spaces.prepare(
        repo, run_id=1, issue_ref="#1", base_env=dict(os.environ), events=RecordingSink()
    )
    assert ws.jail is not None
    return ws.jail, sandbox


def start_once(jail: Jail, network: NetworkPolicy) -> float:
    """Seconds for one start of the command, to its exit."""
    started = time.perf_counter()
    result = jail.run(
        AGENT, cwd=jail.layout.workdir, env=jail.environment(), network=network, timeout_s=60
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"the command failed: {result.output_tail}")
    return elapsed


def measure(rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="afk-bench-sandbox-") as tmp:
        jail, sandbox = prepared_jail(Path(tmp))
        plain = Jail.unconfined(jail.layout.workdir, os.environ, jail.home)
        variants = {
            "unconfined": (plain, NetworkPolicy("open")),
            "bwrap_open": (jail, NetworkPolicy("open")),
            "bwrap_allowlist": (jail, NetworkPolicy("allowlist", ("pypi.org",))),
        }
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for which, policy in variants.values():  # warm-up, not counted
            start_once(which, policy)
        for _ in range(rounds):
            for name, (which, policy) in variants.items():
                samples[name].append(start_once(which, policy))
    return summarise(samples, sandbox.description)


def summarise(samples: dict[str, list[float]], description: str) -> dict[str, object]:
    figures = {
        name: {
            "min_s": round(min(v), 4),
            "median_s": round(statistics.median(v), 4),
            "max_s": round(max(v), 4),
        }
        for name, v in samples.items()
    }
    base = statistics.median(samples["unconfined"])
    added = {
        name: round(statistics.median(v) - base, 4)
        for name, v in samples.items()
        if name != "unconfined"
    }
    return {
        "benchmark": "sandbox",
        "sandbox": description,
        "rounds": len(samples["unconfined"]),
        "starts": figures,
        "added_s": added,
        "added_s_worst": max(added.values()),
        "target_added_s": TARGET_ADDED_S,
        "meets_target": max(added.values()) < TARGET_ADDED_S,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks sandbox")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    result = measure(args.rounds)
    if not args.json:
        for name, figure in result["starts"].items():  # type: ignore[attr-defined]
            print(
                f"{name:16} median {figure['median_s'] * 1000:7.1f} ms "
                f"(min {figure['min_s'] * 1000:.1f}, max {figure['max_s'] * 1000:.1f})"
            )
    print(json.dumps(result))
    return 0
