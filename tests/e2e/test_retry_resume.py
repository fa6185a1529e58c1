"""`pipeline runs retry` of a run its agent stopped BLOCKED: the retry answers the question."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from pipeline.store import Store
from pipeline.testing.configs import write_config
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
    runs = _blocked_then_retried(cli, tmp_path)
    retried = runs[0]
    assert (retried["id"], retried["parent_id"], retried["state"]) == (2, 1, "succeeded"), runs
    shown = cli("runs", "show", "2").stdout
    assert "answers run 1" in shown


# A ``claude`` in the agent's place: it logs its argv in its HOME, asks its question
# once, and adds mul when a prompt brings the question back.
ASKING_CLAUDE = r"""
import json, os, pathlib, sys
prompt = sys.stdin.read()
with open(pathlib.Path(os.environ["HOME"]) / "argv.log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
print(json.dumps({"type": "system", "subtype": "init", "session_id": "sess-1"}))
answer = "BLOCKED: should mul accept floats?"
if "should mul accept floats?" in prompt:
    with open(pathlib.Path(os.getcwd()) / "app" / "calc.py", "a") as f:
        f.write("\n\ndef mul(a, b):\n    return a * b\n")
    answer = "added mul"
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                  "session_id": "sess-1", "result": answer, "total_cost_usd": 0.01,
                  "usage": {"input_tokens": 10, "output_tokens": 5}}))
"""


def _keep_session(database_url: str, run_id: int, session: str) -> None:
    """What an older version kept as a run's session: whatever id its agent reported."""
    store = Store(database_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(
                text("UPDATE runs SET agent_session = :session WHERE id = :id"),
                {"session": session, "id": run_id},
            )
    finally:
        store.close()


def test_a_kept_session_id_that_is_an_option_is_never_resumed(
    tmp_path: Path, cli_env: dict[str, str], history_url: str | None
) -> None:
    """The retry of a blocked run whose kept session id reads as an option (an older
    version kept any): the agent's argv holds no ``--resume``, the timeline says why, and a
    fresh session gets the question and finishes."""
    _kept_session_not_resumed(tmp_path, cli_env, history_url, "--output=/tmp/x")


def test_a_kept_session_id_of_500_characters_is_never_resumed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The same for an id of 500 characters, on SQLite: PostgreSQL's column holds 200, so a
    longer id was never kept there. The timeline shows the id cut."""
    _kept_session_not_resumed(tmp_path, cli_env, None, "s" * 500)


def _kept_session_not_resumed(
    tmp_path: Path, cli_env: dict[str, str], history_url: str | None, kept: str
) -> None:
    agent = tmp_path / "claude.py"
    agent.write_text(ASKING_CLAUDE)
    argv = [sys.executable, str(agent)]
    config = local_config(tmp_path, make_remote(tmp_path, PROJECT), argv, database_url=history_url)
    document = tomllib.loads(config.read_text())
    document["agents"]["scripted"]["kind"] = "claude"
    write_config(config, document)
    cli = Cli(config, cli_env)
    url = history_url or f"sqlite:///{tmp_path / 'history.db'}"
    runs = _blocked_then_retried(cli, tmp_path, lambda: _keep_session(url, 1, kept))
    calls = [
        json.loads(line)
        for argv_log in (tmp_path / "volume").rglob("argv.log")
        for line in argv_log.read_text().splitlines()
    ]
    assert len(calls) == 2, calls
    assert "--resume" not in calls[1] and kept not in calls[1], calls[1]
    assert runs[0]["state"] == "succeeded", runs
    messages = [event["message"] for event in cli.json("runs", "show", "2")["events"]]
    shown = repr(kept[:40]) + ("…" if len(kept) > 40 else "")
    assert (
        f"the session run 1 kept: {shown} ({len(kept)} characters) is not a session id; "
        "not resumed: a fresh session is started"
    ) in messages, messages
    assert any("go to a fresh session" in message for message in messages), messages


def _blocked_then_retried(
    cli: Cli, tmp_path: Path, before_retry: Callable[[], None] = lambda: None
) -> list[dict[str, Any]]:
    """One issue through ``pipeline run``: its run escalates blocked, ``before_retry`` runs,
    ``runs retry 1`` queues run 2, which ends; the runs as ``runs list`` shows them."""
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "escalated", HANG_GUARD_S)
        assert runs[0]["error_class"] == "blocked", runs
        before_retry()
        assert "run 1 queued as run 2" in cli("runs", "retry", "1").stdout
        runs = cli.wait_for(
            lambda rs: len(rs) == 2 and rs[0]["state"] in ("succeeded", "escalated", "failed"),
            HANG_GUARD_S,
            daemon,
            log,
        )
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    return runs
