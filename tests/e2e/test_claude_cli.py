"""The real Claude Code CLI against the loopback scripted Messages API.

Install the CLI with ``scripts/install-claude-cli.sh`` (or point
``PIPELINE_TEST_CLAUDE_BIN`` at one). Without it these tests skip, unless
``PIPELINE_TEST_REQUIRE_TOOLS=1`` (as in CI), which makes its absence a failure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.agents import Agent, AgentRequest, AgentResult, build_agent
from pipeline.config.settings import AgentPreset, RepoSettings, SecretRef
from pipeline.core.errors import EscalationError, RetryableError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.run.implement import ImplementOutcome, implement
from pipeline.testing.scopes import TreeSpec, scope_for
from pipeline.testing.sinks import RecordingSink
from tests.fakes.messages_api import MessagesApiServer, Turn, bash, overloaded, write
from tests.fakes.messages_api import ToolUse as Tool
from tests.fakes.project_repo import (
    FAILING_TEST,
    ISSUE,
    SENTINELS,
    Project,
    base_env,
    make_project,
)

pytestmark = pytest.mark.claude_cli

# Read at import: the autouse fixture clears PIPELINE_* before each test runs.
_BIN_ENV = os.environ.get("PIPELINE_TEST_CLAUDE_BIN")
_REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
_LOCAL_BIN = Path(__file__).resolve().parents[2] / ".tools/claude/node_modules/.bin/claude"
KEY_VAR = "AFK_TEST_ANTHROPIC_API_KEY"


@pytest.fixture
def claude_bin() -> str:
    """The Claude Code CLI to run; skip (or fail when tools are required) without one."""
    candidate = Path(_BIN_ENV) if _BIN_ENV else _LOCAL_BIN
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    message = (
        f"Claude Code CLI not found at {candidate}; run scripts/install-claude-cli.sh "
        "or set PIPELINE_TEST_CLAUDE_BIN"
    )
    if _REQUIRE_TOOLS:
        pytest.fail(message + " (PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure)")
    pytest.skip(message)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.setenv(KEY_VAR, "sk-ant-test-key")
    return make_project(tmp_path)


@pytest.fixture
def api() -> Iterator[MessagesApiServer]:
    server = MessagesApiServer([])
    with server:
        yield server


def _preset(claude_bin: str, api: MessagesApiServer, **changes: object) -> AgentPreset:
    settings: dict[str, object] = {
        "name": "claude",
        "kind": "claude",
        "command": (claude_bin,),
        "env": (
            ("ANTHROPIC_BASE_URL", api.url),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "0"),
            ("DISABLE_AUTOUPDATER", "1"),
        ),
        "api_key": SecretRef(env=KEY_VAR),
        "idle_timeout_s": 60.0,
        "exit_grace_s": 5.0,
    }
    settings.update(changes)
    return AgentPreset(**settings)  # type: ignore[arg-type]


def _run(
    project: Project,
    preset: AgentPreset,
    sink: RecordingSink,
    repo: RepoSettings | None = None,
    recorded: list[AgentResult] | None = None,
) -> ImplementOutcome:
    repo = repo or project.repo()
    spec = TreeSpec(project.root, project.tree, base_env(), project.home)
    agent = build_agent(preset)
    if recorded is not None:
        agent = _Recording(agent, recorded)
    return implement(scope_for(42, repo, spec.workspace(repo), sink, agent, ISSUE))


class _Recording:
    """An agent that keeps every result its inner agent returns."""

    def __init__(self, inner: Agent, results: list[AgentResult]) -> None:
        self.inner, self.results, self.name = inner, results, inner.name

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        result = self.inner.run(request, events=events, stop=stop)
        self.results.append(result)
        return result


def _read(project: Project, name: str) -> Tool:
    return Tool("Read", {"file_path": str(project.root / name)})


def _edit(project: Project, old: str, new: str) -> Tool:
    return Tool(
        "Edit", {"file_path": str(project.root / "calc.py"), "old_string": old, "new_string": new}
    )


def _write_test(project: Project) -> Tool:
    return write(str(project.root / "test_calc.py"), FAILING_TEST)


COMMIT = (
    "git add -A && git commit -q -F - <<'EOF'\nFix add() (#1)\n\n"
    f"Afk-Run: 42\nRefs: {ISSUE.url}\nEOF"
)


def test_failing_test_then_fix_gives_one_trailered_commit(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """Test first, then the fix; the gate passes; one commit; figures and tools recorded."""
    env_dump = project.outside / "agent-env.txt"
    api.state.script[:] = [
        Turn(text="First a failing test.", tools=(_write_test(project),)),
        Turn(tools=(bash("python3 -m unittest discover -q; true"),)),
        Turn(tools=(_read(project, "calc.py"),)),
        Turn(tools=(_edit(project, "a - b", "a + b"),)),
        Turn(tools=(bash(f"env > {env_dump} && {COMMIT}"),)),
        Turn(text="Done: add() adds."),
    ]
    sink = RecordingSink()
    outcome = _run(project, _preset(claude_bin, api), sink)
    assert project.commits() == [outcome.head_sha] and outcome.fix_iterations == 0
    message = project.message(outcome.head_sha)
    assert message.startswith("Fix add() (#1)")
    assert "Afk-Run: 42" in message and f"Refs: {ISSUE.url}" in message
    result = outcome.agent
    assert result.session_id and result.subtype == "success" and result.num_turns >= 5
    assert result.tokens_in > 0 and result.tokens_out > 0 and result.cost_usd > 0
    assert result.tool_calls == 5
    tools = [message for _, message, _ in sink.of_kind("tool")]
    assert tools[:4] == [
        "Write test_calc.py",
        "Bash python3 -m unittest discover -q; true",
        "Read calc.py",
        "Edit calc.py",
    ]
    assert ISSUE.title in json.dumps(api.main_requests[0]["messages"])
    seen_env = env_dump.read_text()
    assert not any(value in seen_env for value in SENTINELS.values())
    assert f"HOME={project.home}\n" in seen_env and "PIPELINE_" not in seen_env


def test_red_gate_resumes_the_session_with_the_failure(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """The first fix leaves tests red; the failure reaches the resumed session; then green."""
    api.state.script[:] = [
        Turn(tools=(_write_test(project),)),
        Turn(tools=(_read(project, "calc.py"),)),
        Turn(tools=(_edit(project, "a - b", "a * b"),)),
        Turn(text="Fixed, I think."),
        Turn(tools=(_read(project, "calc.py"),)),
        Turn(tools=(_edit(project, "a * b", "a + b"),)),
        Turn(text="Now it adds."),
    ]
    outcome = _run(project, _preset(claude_bin, api), RecordingSink())
    assert outcome.fix_iterations == 1 and len(project.commits()) == 1
    resumed = [
        json.dumps(body["messages"])
        for body in api.main_requests
        if "The test suite is red" in json.dumps(body["messages"])
    ]
    assert resumed, "the fix request never reached the model"
    assert "AssertionError: 6 != 5" in resumed[0]
    assert ISSUE.title in resumed[0]  # the same session: the first prompt is in its history


def test_blocked_escalates(claude_bin: str, api: MessagesApiServer, project: Project) -> None:
    """``BLOCKED: <reason>`` from the model escalates with the reason."""
    api.state.script[:] = [Turn(text="BLOCKED: the issue does not say which rounding applies")]
    with pytest.raises(EscalationError) as caught:
        _run(project, _preset(claude_bin, api), RecordingSink())
    assert caught.value.reason == "blocked" and "rounding" in str(caught.value)


def test_no_change_escalates(claude_bin: str, api: MessagesApiServer, project: Project) -> None:
    """A model that changes nothing escalates ``no_change``."""
    api.state.script[:] = [Turn(text="Everything looks correct already.")]
    with pytest.raises(EscalationError) as caught:
        _run(project, _preset(claude_bin, api), RecordingSink())
    assert caught.value.reason == "no_change" and "looks correct" in str(caught.value)


def test_max_turns_escalates(claude_bin: str, api: MessagesApiServer, project: Project) -> None:
    """The CLI's ``error_max_turns`` escalates ``max_turns``."""
    api.state.script[:] = [Turn(tools=(bash("echo again"),), sticky=True)]
    with pytest.raises(EscalationError) as caught:
        _run(project, _preset(claude_bin, api, max_turns=2), RecordingSink())
    assert caught.value.reason == "max_turns"


def test_budget_exceeded_escalates(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """A turn that costs more than the run budget escalates ``budget``."""
    api.state.script[:] = [
        Turn(tools=(bash("echo 1"),), input_tokens=2_000_000, output_tokens=50_000, sticky=True)
    ]
    recorded: list[AgentResult] = []
    with pytest.raises(EscalationError) as caught:
        repo = project.repo(max_budget_usd=0.5)
        _run(project, _preset(claude_bin, api), RecordingSink(), repo, recorded)
    assert caught.value.reason == "budget"
    assert [result.subtype for result in recorded] == ["error_max_budget_usd"]
    assert recorded[0].cost_usd > 0.5  # the spend is reported before the escalation


def test_tests_never_green_escalate(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """Still red after ``max_fix_iterations`` resumed attempts escalates ``tests_red``."""
    api.state.script[:] = [
        Turn(tools=(_write_test(project),)),
        Turn(text="Wrote the test."),
        Turn(text="I could not find the cause."),
    ]
    with pytest.raises(EscalationError) as caught:
        _run(project, _preset(claude_bin, api), RecordingSink(), project.repo(max_fix_iterations=1))
    assert caught.value.reason == "tests_red"
    assert sum("The test suite is red" in json.dumps(b["messages"]) for b in api.main_requests)


def test_overloaded_model_is_retryable(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """A 529 from the model server classifies the run as retryable."""
    api.state.script[:] = [overloaded()]
    with pytest.raises(RetryableError) as caught:
        _run(project, _preset(claude_bin, api), RecordingSink())
    assert caught.value.kind == "agent_overloaded" and api.main_requests


def test_stalled_stream_is_killed_as_idle(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """A stream that stops mid-message kills the CLI after the idle timeout."""
    api.state.script[:] = [Turn(stall=True, sticky=True)]
    with pytest.raises(RetryableError) as caught:
        _run(project, _preset(claude_bin, api, idle_timeout_s=4.0), RecordingSink())
    assert caught.value.kind == "idle_timeout"


def test_cli_lingering_after_its_result_is_killed_and_the_run_succeeds(
    claude_bin: str, api: MessagesApiServer, project: Project
) -> None:
    """A wrapper that outlives the CLI's result is killed after the grace; the run succeeds."""
    wrapper = project.outside / "claude-then-linger"
    pid_file, outlived = project.outside / "wrapper.pid", project.outside / "outlived"
    wrapper.write_text(
        f'#!/bin/sh\necho $$ > "{pid_file}"\n"{claude_bin}" "$@"\nsleep 60\ntouch "{outlived}"\n'
    )
    wrapper.chmod(0o755)
    api.state.script[:] = [
        Turn(tools=(_write_test(project),)),
        Turn(tools=(_read(project, "calc.py"),)),
        Turn(tools=(_edit(project, "a - b", "a + b"),)),
        Turn(text="Done."),
    ]
    outcome = _run(
        project,
        _preset(claude_bin, api, command=(str(wrapper),), exit_grace_s=1.0),
        RecordingSink(),
    )
    assert outcome.agent.lingered and len(project.commits()) == 1
    pid = int(pid_file.read_text())  # the wrapper was killed, not waited out
    assert not Path(f"/proc/{pid}").exists() and not outlived.exists()
