"""`pipeline runs retry` of a run its agent stopped BLOCKED: the retry answers the question."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.testing.gitrepos import make_remote

from .conftest import Cli, local_config, stop_daemon
from .test_local_loop import HANG_GUARD_S, PROJECT

# Blocked unless its prompt carries the earlier question (a retry that answers it).
AGENT = """
import pathlib, sys
prompt = pathlib.Path(sys.argv[1]).read_text()
wd = pathlib.Path(sys.argv[2])
if "Your earlier question" not in prompt:
    print("BLOCKED: should mul accept floats?")
    sys.exit(0)
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
print("added mul")
"""


def test_a_retried_blocked_run_carries_the_question_to_the_agent(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The operator retries a blocked run as its ending says: the agent gets its question
    back (a fresh session: a command agent keeps none) and finishes the work."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    cli = Cli(local_config(tmp_path, make_remote(tmp_path, PROJECT), argv), cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "escalated", HANG_GUARD_S)
        assert runs[0]["error_class"] == "blocked", runs
        assert "run 1 queued as run 2" in cli("runs", "retry", "1").stdout
        runs = cli.wait_for(
            lambda rs: len(rs) == 2 and rs[0]["state"] in ("succeeded", "escalated", "failed"),
            HANG_GUARD_S,
            daemon,
            log,
        )
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    retried = runs[0]
    assert (retried["id"], retried["parent_id"], retried["state"]) == (2, 1, "succeeded"), runs
    shown = cli("runs", "show", "2").stdout
    assert "answers run 1" in shown
