"""The real Claude Code CLI under ``pipeline run``, in its sandbox, working test-first with Bash.

The daemon runs the CLI (installed by ``scripts/install-claude-cli.sh``) in
bubblewrap with the network allowlist, against the loopback scripted Messages
API. The script writes a failing test, runs ``python3 -m pytest -q`` (red),
fixes the code, runs it again (green) and ``git log -1``. What the model API
received back as tool results shows whether the agent's shell worked; the
remote shows what was pushed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.store import RunFilter, Store
from tests.fakes.messages_api import MessagesApiServer, Turn, bash, edit, write
from tests.fakes.messages_api import ToolUse as Tool
from tests.fakes.project_repo import BUGGY, FAILING_TEST, FIXED, git, make_project

from .conftest import Cli, free_port, stop_daemon
from .test_claude_cli import claude_bin  # noqa: F401  (the fixture: skip or fail without a CLI)

pytestmark = pytest.mark.claude_cli

KEY = "sk-ant-sandboxed-test-key"


@pytest.fixture
def api() -> Iterator[MessagesApiServer]:
    with MessagesApiServer([]) as server:
        yield server


def _config(tmp_path: Path, remote: Path, claude: str, api: MessagesApiServer) -> Path:
    config = tmp_path / "pipeline.toml"
    config.write_text(f"""
database_url = "sqlite:///{tmp_path / "history.db"}"
volume = "{tmp_path / "volume"}"
poll_interval_s = 0.5
[scheduler]
claim_interval_s = 0.2
[http]
listen = "127.0.0.1:{free_port()}"
[trackers.local]
kind = "local"
[agents.claude]
kind = "claude"
command = [{json.dumps(claude)}]
api_key_env = "AFK_E2E_ANTHROPIC_KEY"
idle_timeout_s = 120
exit_grace_s = 5
[agents.claude.env]
ANTHROPIC_BASE_URL = "{api.url}"
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1"
CLAUDE_CODE_MAX_RETRIES = "0"
DISABLE_AUTOUPDATER = "1"
[repos.calc]
tracker = "local"
slug = "demo/calc"
remote_url = "{remote}"
test_command = "python3 -m pytest -q"
agent = "claude"
""")
    (tmp_path / "volume").mkdir()
    return config


def _script(tree: Path) -> list[Turn]:
    """Test first: a red run of the suite, the fix, a green run, a look at the history."""
    return [
        Turn(
            text="A failing test first.", tools=(write(str(tree / "test_calc.py"), FAILING_TEST),)
        ),
        Turn(tools=(bash("python3 -m pytest -q; echo pytest-exit=$?"),)),
        Turn(tools=(Tool("Read", {"file_path": str(tree / "calc.py")}),)),
        Turn(tools=(edit(str(tree / "calc.py"), BUGGY.split("\n")[1], FIXED.split("\n")[1]),)),
        Turn(tools=(bash("python3 -m pytest -q; echo pytest-exit=$?"),)),
        Turn(tools=(bash("git log -1 --format='last commit: %s'"),)),
        Turn(text="Fixed add() test-first."),
    ]


def _tool_results(api: MessagesApiServer) -> list[str]:
    """Each tool result the CLI sent back to the model, in order (as text)."""
    results: list[str] = []
    seen: set[str] = set()
    for body in api.main_requests:
        for message in body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result" and block["tool_use_id"] not in seen:
                    seen.add(block["tool_use_id"])
                    results.append(json.dumps(block))
    return results


def test_claude_runs_bash_test_first_inside_the_sandbox(
    tmp_path: Path,
    cli_env: dict[str, str],
    api: MessagesApiServer,
    claude_bin: str,  # noqa: F811
) -> None:
    """pytest (red, then green) and git log succeed in the agent's shell; the fix is pushed."""
    project = make_project(tmp_path)
    tree = tmp_path / "volume" / "repos" / "local" / "demo" / "calc" / "worktrees" / "slot-0"
    api.state.script[:] = _script(tree)
    env = {
        **cli_env,
        "AFK_E2E_ANTHROPIC_KEY": KEY,
        # The toolchain the repo needs: a Python with pytest first on PATH.
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    cli = Cli(_config(tmp_path, project.remote, claude_bin, api), env)
    cli("db", "upgrade")
    cli(
        "issue", "add", "--repo", "calc", "--title", "add() subtracts", "--label", "ready-for-agent"
    )
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(
            lambda rs: (
                bool(rs) and rs[0]["state"] in ("succeeded", "failed", "escalated", "cancelled")
            ),
            240,
            daemon,
            log,
        )
    finally:
        stop_daemon(daemon)
    results = _tool_results(api)
    assert runs[0]["state"] == "succeeded", (results, log.read_text()[-3000:])
    bash_results = [r for r in results if "pytest-exit" in r or "last commit" in r]
    assert len(bash_results) == 3, results
    red, green, history = bash_results
    assert "pytest-exit=1" in red and "failed" in red
    assert "pytest-exit=0" in green and "passed" in green
    assert "last commit: Initial" in history
    assert all('"is_error": false' in r for r in bash_results)
    assert "No such file or directory" not in "".join(bash_results)
    pushed = git(project.remote, "show", "main:calc.py")
    assert pushed == FIXED.strip()
    assert "sandbox: bwrap" in log.read_text()
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        events = store.run_events(store.list_runs(RunFilter(limit=1))[0].id)
    finally:
        store.close()
    assert any(e.kind == "tool" and "pytest" in e.message for e in events)
