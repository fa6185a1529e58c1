"""The real Codex CLI, run by ``pipeline run`` against the loopback scripted Responses API.

Install the CLI with ``scripts/install-codex-cli.sh`` (or point
``PIPELINE_TEST_CODEX_BIN`` at one). Without it these tests skip, unless
``PIPELINE_TEST_REQUIRE_TOOLS=1`` (as in CI), which makes its absence a failure.
Outcomes are read from outside: the bare remote's log, ``pipeline runs list
--json`` and ``runs show --json``, and what reached the model server.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.gitrepos import git, make_remote
from tests.fakes.project_repo import BUGGY, FAILING_TEST, FIXED
from tests.fakes.responses_api import (
    ResponsesApiServer,
    Turn,
    add_file,
    apply_patch,
    input_text,
    shell,
    tool_outputs,
    update_file,
)

from .conftest import Cli, free_port, stop_daemon

pytestmark = [pytest.mark.codex_cli, pytest.mark.timeout(300)]

# Read at import: the autouse fixture clears PIPELINE_* before each test runs.
_BIN_ENV = os.environ.get("PIPELINE_TEST_CODEX_BIN")
_REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
_LOCAL_BIN = Path(__file__).resolve().parents[2] / ".tools/codex/node_modules/.bin/codex"
KEY_VAR = "AFK_TEST_OPENAI_API_KEY"
KEY = "sk-afk-test-codex-key-0123456789"
PRICES = {"input": 1.25, "cached_input": 0.125, "output": 10.0}  # USD per million tokens
RED_TESTS = "python3 -m unittest -q"
TERMINAL = ("succeeded", "failed", "escalated", "cancelled")


# One repo ``calc`` on the local tracker, run by the real Codex CLI. No bytecode is
# written: an edit of the same size within the second of an earlier test run would
# otherwise be hidden by a stale ``.pyc``.
CONFIG = """
database_url = "sqlite:///{tmp_path}/history.db"
volume = "{tmp_path}/volume"
poll_interval_s = 0.5
[scheduler]
lease_s = 10
heartbeat_s = 1
sweep_interval_s = 0.5
claim_interval_s = 0.2
[http]
listen = "127.0.0.1:{port}"
[trackers.local]
kind = "local"
[agents.codex]
kind = "codex"
command = ["{codex_bin}"]
api_key_env = "{key_var}"
idle_timeout_s = 90
exit_grace_s = 5
allow_hosts = ["{api_host}"]
{prices}[agents.codex.env]
PYTHONDONTWRITEBYTECODE = "1"
[repos.calc]
tracker = "local"
slug = "demo/calc"
remote_url = "{remote}"
test_command = "{python} -B -m unittest -q"
agent = "codex"
max_fix_iterations = 2
max_budget_usd = {budget}
"""


@pytest.fixture
def codex_bin() -> str:
    """The Codex CLI to run; skip (or fail when tools are required) without one."""
    candidate = Path(_BIN_ENV) if _BIN_ENV else _LOCAL_BIN
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    message = (
        f"Codex CLI not found at {candidate}; run scripts/install-codex-cli.sh "
        "or set PIPELINE_TEST_CODEX_BIN"
    )
    if _REQUIRE_TOOLS:
        pytest.fail(message + " (PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure)")
    pytest.skip(message)


@pytest.fixture
def api() -> Iterator[ResponsesApiServer]:
    server = ResponsesApiServer([])
    with server:
        yield server


def _config(tmp_path: Path, codex_bin: str, api: ResponsesApiServer, budget: float) -> Path:
    """The config file of ``CONFIG`` for this test's remote, CLI, model server and budget."""
    remote = make_remote(tmp_path, {"calc.py": BUGGY, ".gitignore": "__pycache__/\n"})
    # Codex reads $HOME/.codex: the repo's private HOME in the sandbox, kept between runs.
    api.write_codex_home(tmp_path / "volume" / "homes" / "calc" / ".codex", "CODEX_API_KEY")
    prices = "".join(f"price_{name}_usd_per_mtok = {value}\n" for name, value in PRICES.items())
    config = tmp_path / "pipeline.toml"
    config.write_text(
        CONFIG.format(
            tmp_path=tmp_path,
            port=free_port(),
            codex_bin=codex_bin,
            key_var=KEY_VAR,
            prices=prices,
            api_host=api.base_url.split("//")[1].split("/")[0],
            remote=remote,
            python=sys.executable,
            budget=budget,
        )
    )
    return config


def _run_issue(tmp_path: Path, cli_env: dict[str, str], config: Path, final: str) -> dict[str, Any]:
    """Add one ready issue, run the daemon until its run is ``final``, return that run."""
    cli_env[KEY_VAR] = KEY
    cli_env["GITHUB_TOKEN"] = "sentinel-forge-token"
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    body = tmp_path / "issue.md"
    body.write_text("`add(2, 3)` returns -1 instead of 5.\n")
    cli(
        "issue",
        "add",
        "--repo",
        "calc",
        "--title",
        "add() subtracts",
        "--body-file",
        str(body),
        "--label",
        "ready-for-agent",
    )
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] in TERMINAL, 240, daemon, log)
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    run_id = str(runs[0]["id"])
    assert runs[0]["state"] == final, cli("runs", "show", run_id).stdout
    return {**runs[0], "events": cli.json("runs", "show", run_id)["events"]}


def _remote(config: Path, *args: str) -> str:
    remote = next(line for line in config.read_text().splitlines() if "remote_url" in line)
    return git(Path(remote.split('"')[1]), *args)


def _messages(run: dict[str, Any], kind: str) -> list[str]:
    return [event["message"] for event in run["events"] if event["kind"] == kind]


def _cost(input_tokens: int, cached: int, output_tokens: int) -> float:
    return (
        (input_tokens - cached) * PRICES["input"]
        + cached * PRICES["cached_input"]
        + output_tokens * PRICES["output"]
    ) / 1_000_000


def test_test_first_run_edits_runs_the_tests_and_pushes(
    codex_bin: str, api: ResponsesApiServer, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Codex writes a failing test, runs it, fixes the code, runs it green; the daemon pushes."""
    env_dump = tmp_path / "volume" / "homes" / "calc" / "agent-env.txt"  # in the agent's HOME
    api.state.script[:] = [
        Turn(
            text="First a failing test.",
            tools=(apply_patch(add_file("test_calc.py", FAILING_TEST)),),
        ),
        Turn(tools=(shell(RED_TESTS),)),
        Turn(tools=(apply_patch(update_file("calc.py", "    return a - b", "    return a + b")),)),
        Turn(tools=(shell(f"{RED_TESTS} && env > {env_dump}"),), cached_input_tokens=100),
        Turn(text="Done: add() adds."),
    ]
    config = _config(tmp_path, codex_bin, api, budget=5.0)
    run = _run_issue(tmp_path, cli_env, config, "succeeded")
    head = _remote(config, "log", "-1", "--format=%H%n%B", "main")
    assert head.startswith(run["pushed_sha"]) and f"Afk-Run: {run['id']}" in head
    assert _remote(config, "show", "main:calc.py") == FIXED
    assert _remote(config, "show", "main:test_calc.py") == FAILING_TEST
    outputs = [out for body in api.main_requests for out in tool_outputs(body)]
    assert any("FAILED (failures=1)" in out for out in outputs)  # red first
    assert any("Ran 1 test" in out and "OK" in out for out in outputs[2:])  # then green
    tools = _messages(run, "tool")
    assert tools[:4] == [
        "Patch add test_calc.py",
        f"Shell {RED_TESTS}",
        "Patch update calc.py",
        f"Shell {RED_TESTS} && env > {env_dump}",
    ]
    assert run["tokens_in"] == 5 * 120 and run["tokens_out"] == 5 * 40
    assert run["cost_usd"] == pytest.approx(_cost(600, 100, 200))
    assert "add() subtracts" in input_text(api.main_requests[0])
    seen = env_dump.read_text()
    assert KEY not in seen and "sentinel-forge-token" not in seen
    headers = api.state.headers[0]
    assert headers["authorization"] == f"Bearer {KEY}"


def test_red_gate_resumes_the_codex_session_with_its_history(
    codex_bin: str, api: ResponsesApiServer, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A red gate resumes the same session (``exec resume``); the model sees the first turn."""
    env_dump = tmp_path / "volume" / "homes" / "calc" / "agent-env.txt"  # in the agent's HOME
    api.state.script[:] = [
        Turn(tools=(apply_patch(add_file("test_calc.py", FAILING_TEST)),)),
        Turn(tools=(apply_patch(update_file("calc.py", "    return a - b", "    return a * b")),)),
        Turn(text="Fixed, I think."),
        Turn(
            tools=(
                apply_patch(update_file("calc.py", "    return a * b", "    return a + b")),
                shell(f"env > {env_dump}"),
            )
        ),
        Turn(text="Now it adds."),
    ]
    config = _config(tmp_path, codex_bin, api, budget=5.0)
    run = _run_issue(tmp_path, cli_env, config, "succeeded")
    assert _remote(config, "show", "main:calc.py") == FIXED
    bodies = api.main_requests
    assert len(bodies) == 5
    resumed = input_text(bodies[3])
    assert "The test suite is red" in resumed and "AssertionError: 6 != 5" in resumed
    assert "add() subtracts" in resumed and "Fixed, I think." in resumed  # the first conversation
    sessions = {headers["session-id"] for headers in api.state.headers}
    assert sessions == {run["agent_session"]}  # one session, resumed
    turn = json.loads(api.state.headers[3]["x-codex-turn-metadata"])
    assert turn["history_initialization"] == "cold_resume"
    # Codex reports the session's running total; the run counts each request once.
    assert run["tokens_in"] == 5 * 120 and run["tokens_out"] == 5 * 40
    assert KEY not in env_dump.read_text()  # the resumed session hides the key as well


def test_tokens_over_the_run_budget_escalate(
    codex_bin: str, api: ResponsesApiServer, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Tokens times prices over ``max_budget_usd`` escalate ``budget``; nothing is pushed."""
    api.state.script[:] = [
        Turn(
            tools=(apply_patch(add_file("test_calc.py", FAILING_TEST)),),
            input_tokens=4_000,
            output_tokens=200,
        ),
        Turn(text="Wrote a test.", input_tokens=4_000, output_tokens=200),
    ]
    config = _config(tmp_path, codex_bin, api, budget=0.01)
    before = _remote(config, "rev-parse", "main")
    run = _run_issue(tmp_path, cli_env, config, "escalated")
    assert run["error_class"] == "budget" and "budget" in run["error"]
    assert run["cost_usd"] == pytest.approx(_cost(8_000, 0, 400))  # $0.014
    assert _remote(config, "rev-parse", "main") == before
