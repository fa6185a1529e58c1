"""Broken agent output under ``pipeline run``: what a run makes of it, read from outside.

The agents here are scripts in the agent's place: a ``claude`` preset whose command
prints a stream-json of its own making, or a ``command`` agent. Outcomes are read
from the history (``pipeline runs show``), the local tracker's issue and the remote.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipeline.agents.streams import MAX_STREAM_EVENTS
from pipeline.testing.configs import write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung
ENDED = {"succeeded", "failed", "escalated", "cancelled"}

# JavaScript strings may hold half a surrogate pair (a tool output cut mid-emoji), and
# JSON.stringify writes it as an escape: valid JSON whose decoded text is not UTF-8.
LONE_SURROGATES = r"""
import sys
sys.stdin.read()
print('{"type":"system","subtype":"init","session_id":"sess-lone"}')
print('{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash",'
      '"input":{"command":"echo \\ud83d cut"}}]}}')
print('{"type":"result","subtype":"success","is_error":false,"num_turns":1,'
      '"result":"BLOCKED: which port \\udc00 should the service use?",'
      '"total_cost_usd":0.01,"usage":{"input_tokens":10,"output_tokens":5}}')
"""


@contextmanager
def _daemon_world(
    tmp_path: Path,
    cli_env: dict[str, str],
    script: str,
    kind: str,
    database_url: str | None = None,
) -> Iterator[tuple[Cli, Path, Any]]:
    """One local repo ``calc``, its agent ``script`` as a ``kind`` preset, one ready issue,
    the history in SQLite or at ``database_url``; yields the CLI, the remote and the
    running daemon (stopped afterwards)."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(script)
    argv = [sys.executable, str(agent)]
    if kind == "command":
        argv += ["{prompt_file}", "{workdir}"]
    config = local_config(tmp_path, remote, argv)
    document = tomllib.loads(config.read_text())
    document["agents"]["scripted"]["kind"] = kind
    document["scheduler"].update({"max_attempts": 2, "backoff_base_s": 0.2, "backoff_max_s": 0.5})
    if database_url is not None:
        document["database_url"] = database_url
    write_config(config, document)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        yield cli, Path(remote), daemon
    finally:
        stop_daemon(daemon)


def _ended(cli: Cli, daemon: Any, log: Path) -> dict[str, Any]:
    runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] in ENDED, HANG_GUARD_S, daemon, log)
    return dict(runs[0])


def test_half_a_surrogate_pair_in_the_stream_is_a_readable_question(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A stream-json whose strings hold half a surrogate pair (valid JSON, not UTF-8): the
    run escalates with the agent's question, on its first attempt. The history refused
    such text, so the run died with an internal error, and its retry failed for good."""
    with _daemon_world(tmp_path, cli_env, LONE_SURROGATES, "claude") as (cli, _, daemon):
        run = _ended(cli, daemon, tmp_path / "daemon.log")
        shown = cli.json("runs", "show", str(run["id"]))
    assert (run["state"], run["error_class"], run["attempt"]) == ("escalated", "blocked", 1), run
    assert "which port \ufffd should the service use?" in run["error"]
    messages = [event["message"] for event in shown["events"]]
    assert "Bash echo \ufffd cut" in messages, messages
    assert not any("internal error" in message for message in messages), messages
    issue = cli.json("issue", "list", "--all")[0]
    assert "agent-working" not in issue["labels"], issue


# Half a gigabyte on one line (no newline), then a real change and a line of its own.
FLOOD = r"""
import pathlib, sys
wd = pathlib.Path(sys.argv[2])
block = b"x" * (1 << 20)
for _ in range(512):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.write(b"\n")
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\n\ndef mul(a, b):\n    return a * b\n")
print("wrote the change after the flood", flush=True)
"""
FLOOD_MIB = 512


def _peak_rss_mib(pid: int) -> int:
    """The process's peak resident memory so far (Linux ``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def test_an_agent_printing_half_a_gigabyte_on_one_line_leaves_the_daemon_small(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """An agent printing 512 MiB without a newline, then making its change: the run ships
    it, and the daemon never held that line (its peak memory stays far below it). The
    daemon read each line whole before cutting it, so such output went into its memory,
    and a longer one would have had the daemon killed for lack of memory."""
    with _daemon_world(tmp_path, cli_env, FLOOD, "command") as (cli, remote, daemon):
        run = _ended(cli, daemon, tmp_path / "daemon.log")
        peak = _peak_rss_mib(daemon.pid)
        shown = cli.json("runs", "show", str(run["id"]))
    assert run["state"] == "succeeded", run
    assert "def mul" in git(remote, "show", "main:app/calc.py")
    assert peak < FLOOD_MIB // 2, f"the daemon peaked at {peak} MiB"
    messages = [event["message"] for event in shown["events"]]
    assert "wrote the change after the flood" in messages, messages


# Three times the timeline's share of one invocation, then the change and the result.
TOOL_FLOOD = r"""
import json, os, pathlib, sys
sys.stdin.read()
print('{"type":"system","subtype":"init","session_id":"sess-flood"}')
call = {"type": "tool_use", "name": "Bash", "input": {"command": "echo again"}}
line = json.dumps({"type": "assistant", "message": {"content": [call]}})
sys.stdout.write((line + "\n") * 3 * MAX_STREAM_EVENTS)
with open(pathlib.Path(os.getcwd()) / "app" / "calc.py", "a") as f:
    f.write("\n\ndef mul(a, b):\n    return a * b\n")
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                  "result": "done", "total_cost_usd": 0.01,
                  "usage": {"input_tokens": 10, "output_tokens": 5}}))
"""


def test_a_flood_of_tool_calls_reaches_the_timeline_bounded(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A stream of three thousand tool calls: the run ships its change, the timeline holds
    the first thousand and one line counting the rest, the figures count them all. Each
    call was a row of its own: a looping agent's million calls a million writes, with the
    agent stalled behind them."""
    script = f"MAX_STREAM_EVENTS = {MAX_STREAM_EVENTS}\n" + TOOL_FLOOD
    with _daemon_world(tmp_path, cli_env, script, "claude") as (cli, remote, daemon):
        run = _ended(cli, daemon, tmp_path / "daemon.log")
        shown = cli.json("runs", "show", str(run["id"]))
    assert run["state"] == "succeeded", run
    assert "def mul" in git(remote, "show", "main:app/calc.py")
    events = shown["events"]
    tools = [event for event in events if event["kind"] == "tool"]
    assert len(tools) == MAX_STREAM_EVENTS - 1  # the session's start is one of the thousand
    more = f"... {2 * MAX_STREAM_EVENTS + 1} more event(s) of this invocation not shown"
    assert more in [event["message"] for event in events]
    finished = [event for event in events if event["message"].startswith("claude finished")]
    assert finished[0]["data"]["tool_calls"] == 3 * MAX_STREAM_EVENTS


# A stream-json whose session id is not one: ten thousand characters, or control
# characters and a leading dash; then the change and a successful result.
ODD_SESSION = r"""
import json, os, pathlib, sys
sys.stdin.read()
print(json.dumps({"type": "system", "subtype": "init", "session_id": SESSION}))
with open(pathlib.Path(os.getcwd()) / "app" / "calc.py", "a") as f:
    f.write("\n\ndef mul(a, b):\n    return a * b\n")
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                  "session_id": SESSION, "result": "done", "total_cost_usd": 0.01,
                  "usage": {"input_tokens": 10, "output_tokens": 5}}))
"""


@pytest.mark.parametrize(
    "session", ["s" * 10_000, "--resume\x00\x1b[31m\nid"], ids=["long", "control"]
)
def test_a_session_id_that_is_not_one_is_not_kept(
    tmp_path: Path, cli_env: dict[str, str], history_url: str | None, session: str
) -> None:
    """An agent reporting a session id of ten thousand characters, or one of control
    characters read as an option: the run ships its change and its figures are kept,
    on either database; the id is not kept (nothing to resume it with) and the timeline
    says so. PostgreSQL refused the long id (a column of 200), so the run failed after
    the agent's work; SQLite kept either id whole, to be passed to the agent on a resume."""
    script = f"SESSION = {session!r}\n" + ODD_SESSION
    with _daemon_world(tmp_path, cli_env, script, "claude", history_url) as (cli, remote, daemon):
        run = _ended(cli, daemon, tmp_path / "daemon.log")
        shown = cli.json("runs", "show", str(run["id"]))
    assert (run["state"], run["attempt"]) == ("succeeded", 1), run
    assert "def mul" in git(remote, "show", "main:app/calc.py")
    assert shown["run"]["agent_session"] is None, shown["run"]
    assert shown["run"]["cost_usd"] == pytest.approx(0.01), shown["run"]
    messages = [event["message"] for event in shown["events"]]
    assert any("not a session id" in message for message in messages), messages
