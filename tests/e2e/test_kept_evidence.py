"""A run killed after its tree was kept as evidence, before its ending was recorded.

An escalating run moves its worktree to ``<volume>/frozen/<run-id>`` and only then
records the escalation. A daemon killed in between (``PIPELINE_FAULTS=kept``) leaves
the run to lease recovery, which retries it: the retry must get a tree of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import make_remote

from .conftest import Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

BLOCKED_AGENT = """
import os, pathlib, sys
with open(os.environ["AGENT_CALLS"], "a") as calls:
    calls.write("called\\n")
print("BLOCKED: which port should the service use?")
"""


def test_a_run_killed_after_keeping_its_tree_is_retried_and_escalates(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The daemon dies right after keeping a blocked run's tree; the next daemon retries
    the run, which asks its question again and escalates, both trees kept. The kept tree
    held the run's branch, so the retry failed for good on ``git worktree add``."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(BLOCKED_AGENT)
    calls = tmp_path / "agent-area" / "calls"
    calls.parent.mkdir()
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    config = local_config(tmp_path, remote, argv, {"AGENT_CALLS": str(calls)})
    text = config.read_text() + f'\n[sandbox]\nwritable_paths = ["{calls.parent}"]\n'
    config.write_text(text)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Serve it", "--label", "ready-for-agent")

    first_log = tmp_path / "daemon-0.log"
    first = Cli(config, {**cli_env, "PIPELINE_FAULTS": "kept"}).daemon(first_log)
    try:
        assert first.wait(timeout=HANG_GUARD_S) == -9, first_log.read_text()[-3000:]
    finally:
        stop_daemon(first)
    log = tmp_path / "daemon-1.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(
            lambda rs: bool(rs) and rs[0]["state"] in ("escalated", "failed"),
            HANG_GUARD_S,
            daemon,
            log,
        )
    finally:
        stop_daemon(daemon)
    run = runs[0]
    assert (run["state"], run["error_class"], run["attempt"]) == ("escalated", "blocked", 2), run
    assert "which port should the service use?" in run["error"]
    assert calls.read_text().splitlines() == ["called", "called"]
    frozen = tmp_path / "volume" / "frozen"
    manifests = sorted(frozen.glob("*/manifest.json"))
    assert [m.parent.name for m in manifests] == [str(run["id"]), f"{run['id']}-2"], manifests
    for manifest in manifests:
        assert json.loads(manifest.read_text())["branch"] == run["branch"]
        assert (manifest.parent / "worktree" / "app" / "calc.py").is_file()
