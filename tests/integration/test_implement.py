"""The implement loop on real git repos with scripted command agents."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pipeline.agents import AgentRequest, AgentResult, build_agent
from pipeline.config.settings import RepoSettings, SecretRef
from pipeline.core.errors import EscalationError
from pipeline.core.events import EventSink
from pipeline.core.proc import StopToken
from pipeline.run.implement import ImplementOutcome, implement, run_test_gate
from pipeline.sandbox import Jail
from pipeline.testing.scopes import TreeSpec, scope_for
from pipeline.testing.sinks import RecordingSink
from tests.fakes.project_repo import (
    FAILING_TEST,
    FIXED,
    ISSUE,
    SENTINELS,
    STILL_WRONG,
    Project,
    base_env,
    command_agent,
    git,
    make_project,
    prompts,
)

GOOD = {"files": {"test_calc.py": FAILING_TEST, "calc.py": FIXED}}
RED = {"files": {"test_calc.py": FAILING_TEST, "calc.py": STILL_WRONG}}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def _implement(
    project: Project,
    agent: object,
    repo: RepoSettings | None = None,
    sink: EventSink | None = None,
    extra_prompt: str | None = None,
    record: Callable[[Mapping[str, object]], None] | None = None,
) -> ImplementOutcome:
    repo = repo or project.repo()
    spec = TreeSpec(project.root, project.tree, base_env(), project.home)
    agent_any: Any = agent
    scope = scope_for(42, repo, spec.workspace(repo), sink or RecordingSink(), agent_any, ISSUE)
    scope.ledger.record = record
    return implement(scope, extra_prompt)


def _scripted(project: Project, steps: list[Mapping[str, object]], **preset: object) -> object:
    return build_agent(command_agent(project.outside / "agent", steps, **preset))


def _trailers_ok(message: str) -> bool:
    return "Afk-Run: 42" in message.splitlines() and f"Refs: {ISSUE.url}" in message.splitlines()


def test_uncommitted_fix_is_committed_with_trailers(project: Project) -> None:
    """Changes left uncommitted become one commit with both trailers; the gate passes."""
    sink = RecordingSink()
    outcome = _implement(project, _scripted(project, [GOOD]), sink=sink)
    assert project.commits() == [outcome.head_sha] and outcome.commits == (outcome.head_sha,)
    message = project.message(outcome.head_sha)
    assert message.startswith("add() subtracts (#1)") and _trailers_ok(message)
    assert outcome.fix_iterations == 0 and git(project.root, "status", "--porcelain") == ""
    assert [data["ok"] for _, _, data in sink.of_kind("test")] == [True]


def test_first_prompt_holds_issue_instructions_test_first_and_contract(project: Project) -> None:
    """The prompt has the issue, its comments, AGENTS.md, the test-first rule and the contract."""
    (project.root / "AGENTS.md").write_text("Always run the linter.\n")
    git(project.root, "add", "AGENTS.md")
    git(project.root, "commit", "-q", "-m", "Agent notes")
    _implement(project, _scripted(project, [GOOD]), extra_prompt="CI job 7 failed: boom")
    prompt = prompts(project.outside / "agent")[0]
    for expected in (
        ISSUE.title,
        ISSUE.body,
        ISSUE.comments[0],
        "Always run the linter.",
        "failing test",
        "python3 -m unittest discover -q",
        "Afk-Run: 42",
        f"Refs: {ISSUE.url}",
        "BLOCKED: <reason>",
        "CI job 7 failed: boom",
    ):
        assert expected in prompt, expected


def test_prompt_template_from_the_repo(project: Project) -> None:
    """A repo's template file (relative to the repo root) replaces the default prompt."""
    (project.root / "tmpl.txt").write_text("Fix $ref: $title for run $run_id. Cost: $$5\n")
    repo = project.repo(prompt_template=Path("tmpl.txt"))
    _implement(project, _scripted(project, [GOOD]), repo=repo)
    assert prompts(project.outside / "agent")[0] == "Fix #1: add() subtracts for run 42. Cost: $5\n"


def test_agent_commits_without_trailers_are_squashed_with_them(project: Project) -> None:
    """Several agent commits without trailers become one commit that has them."""
    steps: list[Mapping[str, object]] = [
        {"files": {"test_calc.py": FAILING_TEST}, "commit": "Add a failing test for add"},
        # The second commit comes from the fix attempt after the red gate.
        {"files": {"calc.py": FIXED}, "commit": "Make add add"},
    ]
    outcome = _implement(project, _scripted(project, steps))
    assert project.commits() == [outcome.head_sha] and outcome.fix_iterations == 1
    message = project.message(outcome.head_sha)
    assert _trailers_ok(message)
    assert "- Add a failing test for add" in message and "- Make add add" in message
    assert git(project.root, "show", "HEAD:calc.py") == FIXED.strip()


def test_single_trailered_agent_commit_is_kept(project: Project) -> None:
    """An agent commit that already carries both trailers is not rewritten."""
    message = f"Fix add\n\nAfk-Run: 42\nRefs: {ISSUE.url}"
    outcome = _implement(project, _scripted(project, [{**GOOD, "commit": message}]))
    assert project.message(outcome.head_sha).strip() == message
    assert len(project.commits()) == 1


def test_red_gate_feeds_the_failure_back_and_goes_green(project: Project) -> None:
    """The first attempt leaves tests red; the failing output reaches the next prompt."""
    outcome = _implement(project, _scripted(project, [RED, GOOD]))
    assert outcome.fix_iterations == 1
    second = prompts(project.outside / "agent")[1]
    assert "The test suite is red" in second and "AssertionError: 6 != 5" in second
    assert ISSUE.title in second  # a session-less agent gets the context again


def test_tests_never_green_escalate_after_the_bound(project: Project) -> None:
    """Still red after max_fix_iterations escalates ``tests_red``; nothing reaches the remote."""
    with pytest.raises(EscalationError) as caught:
        _implement(project, _scripted(project, [RED]), repo=project.repo(max_fix_iterations=2))
    assert caught.value.reason == "tests_red" and "AssertionError" in str(caught.value)
    assert len(prompts(project.outside / "agent")) == 3
    assert git(project.remote, "rev-parse", "main") == project.base


def test_no_change_escalates(project: Project) -> None:
    """An agent that changes nothing escalates ``no_change`` with its words."""
    with pytest.raises(EscalationError) as caught:
        _implement(project, _scripted(project, [{"print": "Looks fine to me"}]))
    assert caught.value.reason == "no_change" and "Looks fine to me" in str(caught.value)


def test_blocked_escalates_with_the_reason_and_commits_nothing(project: Project) -> None:
    """``BLOCKED: <reason>`` escalates ``blocked``; half-done edits are not committed."""
    step = {**RED, "print": "BLOCKED: the issue does not say which rounding to use"}
    with pytest.raises(EscalationError) as caught:
        _implement(project, _scripted(project, [step]))
    assert caught.value.reason == "blocked"
    assert "which rounding to use" in str(caught.value)
    assert project.commits() == []


def test_agent_environment_holds_no_forge_token_or_secret(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent sees its own key and per-repo HOME, and none of the planted secrets."""
    monkeypatch.setenv("AFK_TEST_MODEL_API_KEY", "sk-configured")
    dump = project.outside / "env.json"
    agent = _scripted(
        project,
        [{**GOOD, "dump_env": str(dump)}],
        api_key=SecretRef(env="AFK_TEST_MODEL_API_KEY"),
    )
    _implement(project, agent)
    seen = json.loads(dump.read_text())
    leaked = [name for name, value in seen.items() if value in SENTINELS.values()]
    assert leaked == [] and not any(name.startswith("PIPELINE_") for name in seen)
    assert seen["HOME"] == str(project.home)
    assert seen["ANTHROPIC_API_KEY"] == "sk-configured"
    assert "AFK_TEST_MODEL_API_KEY" not in seen


def test_kept_dependency_dirs_are_never_committed(project: Project) -> None:
    """A ``.venv`` the repo does not ignore stays out of the pipeline's commit."""
    (project.root / ".venv").mkdir()
    (project.root / ".venv" / "marker").write_text("x")
    outcome = _implement(project, _scripted(project, [GOOD]))
    files = git(project.root, "show", "--name-only", "--format=", outcome.head_sha).split()
    assert sorted(files) == ["calc.py", "test_calc.py"]


class _CostlyAgent:
    """An agent that fixes nothing and reports a fixed cost per invocation."""

    name = "costly"

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.requests: list[AgentRequest] = []

    def run(
        self, request: AgentRequest, *, events: EventSink, stop: StopToken | None
    ) -> AgentResult:
        self.requests.append(request)
        (request.workdir / "calc.py").write_text(STILL_WRONG)
        (request.workdir / "test_calc.py").write_text(FAILING_TEST)
        return AgentResult(session_id="s-1", cost_usd=self.cost, tokens_in=10, tokens_out=5)


def test_run_budget_is_enforced_across_invocations(project: Project) -> None:
    """Cost adds up over fix attempts; the remaining budget is passed on; over it escalates."""
    agent = _CostlyAgent(0.6)
    seen: list[Mapping[str, object]] = []
    with pytest.raises(EscalationError) as caught:
        repo = project.repo(max_budget_usd=1.0)
        _implement(project, agent, repo=repo, record=seen.append)
    assert caught.value.reason == "budget" and "$1.2000" in str(caught.value)
    assert [request.max_budget_usd for request in agent.requests] == [1.0, pytest.approx(0.4)]
    assert agent.requests[1].resume_session == "s-1" and len(seen) == 2


def test_a_test_command_the_sandbox_cannot_find_escalates_at_once(project: Project) -> None:
    """No `test_command` on PATH (exit 127) is for a human: the agent is not asked to fix it."""
    repo = project.repo(test_command="PYTHONHASHSEED=0 no-such-runner -q", max_fix_iterations=3)
    with pytest.raises(EscalationError) as caught:
        _implement(project, _scripted(project, [GOOD]), repo=repo)
    assert caught.value.reason == "test_command_missing"
    assert f"repos.{repo.name}.test_command: 'no-such-runner' was not found" in str(caught.value)
    assert len(prompts(project.outside / "agent")) == 1  # the first invocation, no fix rounds


@pytest.mark.parametrize(
    "command",
    [
        "./run-tests.sh",  # the repo's own script: the agent may have broken it
        "sh -c 'no-such-tool'",  # a command the suite runs: the agent's to fix
    ],
)
def test_a_missing_command_inside_the_suite_stays_red_for_the_agent(
    project: Project, command: str
) -> None:
    """Exit 127 from something the test command runs is red tests, fed back to the agent."""
    sink = RecordingSink()
    jail = Jail.unconfined(project.root, base_env(), project.home)
    result = run_test_gate(project.repo(test_command=command), project.root, jail, sink, None)
    assert result.returncode == 127 and "failed (exit 127)" in sink.events[0][1]


def test_gate_without_test_command_passes(project: Project) -> None:
    """A repo with no test command has a gate that passes and says so."""
    sink = RecordingSink()
    jail = Jail.unconfined(project.root, {}, project.home)
    result = run_test_gate(project.repo(test_command=None), project.root, jail, sink, None)
    assert result.ok and "no test_command" in sink.events[0][1]


def test_gate_times_out_as_red_and_runs_scrubbed(project: Project) -> None:
    """A slow suite is red with a timeout; the suite's environment is scrubbed too."""
    sink = RecordingSink()
    slow = project.repo(test_command="sleep 5", test_timeout_s=0.3)
    jail = Jail.unconfined(project.root, base_env(), project.home)
    result = run_test_gate(slow, project.root, jail, sink, None)
    assert not result.ok and result.timed_out and "timed out" in sink.events[0][1]
    dump = project.outside / "gate-env.txt"
    run_test_gate(project.repo(test_command=f"env > {dump}"), project.root, jail, sink, None)
    assert not any(value in dump.read_text() for value in SENTINELS.values())


def test_gate_artifacts_are_never_committed(project: Project) -> None:
    """Files the test gate leaves behind (logs, caches) stay out of the run's commit."""
    gate = f"{project.repo().test_command}; s=$?; echo ran >> gate-output.log; exit $s"
    outcome = _implement(
        project, _scripted(project, [RED, GOOD]), repo=project.repo(test_command=gate)
    )
    changed = git(project.root, "show", "--name-only", "--format=", outcome.head_sha).split()
    assert outcome.fix_iterations == 1
    assert sorted(changed) == ["calc.py", "test_calc.py"]


def test_work_left_on_another_branch_is_taken_onto_the_run_branch(project: Project) -> None:
    """An agent that commits on the run's branch, then switches to a branch of its own for the
    rest, gets all of it tested and committed on the run's branch, which publish pushes."""
    steps: list[Mapping[str, object]] = [
        {"files": {"test_calc.py": FAILING_TEST}, "commit": "Add a failing test for add"},
        {"switch": "feature/add", "files": {"calc.py": FIXED}},
    ]
    sink = RecordingSink()
    outcome = _implement(project, _scripted(project, steps), sink=sink)
    assert git(project.root, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(project.root, "rev-parse", "main") == outcome.head_sha
    assert git(project.root, "show", "main:calc.py") == FIXED.strip()
    assert _trailers_ok(project.message(outcome.head_sha))
    assert any("feature/add" in message for _, message, _ in sink.of_kind("agent"))
