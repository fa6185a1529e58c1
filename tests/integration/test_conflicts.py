"""Rebase conflicts handed to a scripted command agent, on real git repos."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from pipeline.agents import build_agent
from pipeline.config.settings import AgentPreset, PushSettings, RepoSettings
from pipeline.core.errors import EscalationError, RetryableError
from pipeline.git.mirror import Mirror
from pipeline.run.conflicts import ConflictResolver, resolve_conflict_with_agent
from pipeline.run.implement import implement, run_test_gate
from pipeline.run.publish import PublishHooks, PublishResult, publish
from pipeline.sandbox import Jail
from pipeline.testing.scopes import TreeSpec, scope_for
from pipeline.testing.sinks import RecordingSink
from tests.fakes.project_repo import (
    FAILING_TEST,
    FIXED,
    ISSUE,
    Project,
    base_env,
    git,
    make_project,
)

BRANCH = "afk/run-42"
TYPED, MUL = "def add(a: int, b: int) -> int:\n", "\n\ndef mul(a, b):\n    return a * b\n"
THEIRS = f"{TYPED}    return a - b\n{MUL}"  # conflicts with the run's fix of the next line
RESOLVED = f"{TYPED}    return a + b\n{MUL}"
TEST_MUL = (
    "import unittest\n\nfrom calc import mul\n\n\n"
    "class MulTest(unittest.TestCase):\n"
    "    def test_mul(self):\n"
    "        self.assertEqual(mul(2, 3), 6)\n"
)
_IDENTITY = "-c user.name=colleague -c user.email=colleague@test.invalid"

_AGENT = """\
import json, os, subprocess, sys
plan = json.load(open(sys.argv[1]))
state = sys.argv[2]
count = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(count + 1))
prompt = open(sys.argv[3]).read()
open(os.path.join(os.path.dirname(state), f"prompt-{count}.txt"), "w").write(prompt)
for action in plan[min(count, len(plan) - 1)]:
    if action[0] == "write":
        open(action[1], "w").write(action[2])
    elif action[0] == "sh":
        subprocess.run(action[1], shell=True)
    elif action[0] == "print":
        print(action[1], flush=True)
    elif action[0] == "exit":
        sys.exit(action[1])
"""

Plan = Sequence[Sequence[object]]  # actions: write, sh, print, exit
IMPLEMENT: Plan = [["write", "test_calc.py", FAILING_TEST], ["write", "calc.py", FIXED]]
REBASE = ["sh", "git rebase origin/main"]
CONTINUE = ["sh", "git add -A && git rebase --continue"]
GOOD_RESOLUTION = [REBASE, ["write", "calc.py", RESOLVED], CONTINUE]


@dataclass
class World:
    """The project clone on the run branch, a colleague's clone, and what was recorded."""

    project: Project
    colleague: Path
    sink: RecordingSink = field(default_factory=RecordingSink)
    recorded: list[str] = field(default_factory=list)
    results: list[Mapping[str, object]] = field(default_factory=list)

    @property
    def agent_dir(self) -> Path:
        return self.project.outside / "agent"

    def push_theirs(self) -> str:
        """The colleague's conflicting change, pushed to main (a shell line the agent runs)."""
        return (
            f"cd {self.colleague} && git pull -q origin main && "
            f"printf %s '{THEIRS}' > calc.py && printf %s '{TEST_MUL}' > test_mul.py && "
            f"git add -A && git {_IDENTITY} commit -q -m 'Type add, add mul' && "
            "git push -q origin HEAD:main"
        )

    def repo(self, **push: object) -> RepoSettings:
        return self.project.repo(push=PushSettings(**push))  # type: ignore[arg-type]

    def agent_preset(self, resolution: Plan) -> AgentPreset:
        """Implements the fix while the colleague pushes, then plays ``resolution``."""
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        script, plan = self.agent_dir / "agent.py", self.agent_dir / "plan.json"
        script.write_text(_AGENT)
        plan.write_text(json.dumps([[*IMPLEMENT, ["sh", self.push_theirs()]], resolution]))
        argv = (
            sys.executable,
            str(script),
            str(plan),
            str(self.agent_dir / "count"),
            "{prompt_file}",
        )
        return AgentPreset(name="scripted", kind="command", command=argv)

    def prompts(self) -> list[Path]:
        return sorted(self.agent_dir.glob("prompt-*.txt"))

    def rebase_in_progress(self) -> bool:
        root = self.project.root
        return (root / git(root, "rev-parse", "--git-path", "rebase-merge")).exists()

    def run(
        self,
        resolution: Plan,
        env: Mapping[str, str] | None = None,
        before_publish: Callable[[], object] | None = None,
        **push: object,
    ) -> PublishResult:
        """Implement, then publish with the agent as the conflict resolver."""
        env = dict(env or base_env())
        repo = self.repo(**push)
        agent = build_agent(self.agent_preset(resolution))
        root = self.project.root
        jail = Jail.unconfined(root, env, self.project.home)
        mirror = self.project.outside / "mirror.git"
        Mirror(mirror, repo).create(None)
        spec = TreeSpec(root, self.project.tree, env, self.project.home, branch=BRANCH)
        ws = replace(spec.workspace(repo), mirror=mirror, base_sha=self.project.base)
        scope = scope_for(42, repo, ws, self.sink, agent, ISSUE)
        scope.ledger.record = self.results.append
        outcome = implement(scope)
        resolver = ConflictResolver(
            scope,
            test_gate=lambda: run_test_gate(repo, root, jail, self.sink, None).ok,
            resume_session=outcome.agent.session_id,
        )
        if before_publish is not None:
            before_publish()
        hooks = PublishHooks(
            retest=resolver.retest,
            record_pushed=self.recorded.append,
            resolve_conflict=resolver,
        )
        return publish(scope, hooks)

    def remote_file(self, name: str) -> str:
        return git(self.project.remote, "show", f"main:{name}")

    def messages(self, kind: str) -> list[str]:
        return [message for _, message, _ in self.sink.of_kind(kind)]


@pytest.fixture
def world(tmp_path: Path) -> World:
    """The buggy project cloned twice: the run's clone on its branch, and a colleague's."""
    project = make_project(tmp_path)
    git(project.root, "checkout", "-q", "-b", BRANCH)
    colleague = tmp_path / "colleague"
    git(tmp_path, "clone", "-q", str(project.remote), str(colleague))
    return World(project, colleague)


def _trailered(message: str) -> bool:
    lines = message.splitlines()
    return "Afk-Run: 42" in lines and f"Refs: {ISSUE.url}" in lines


def test_agent_resolves_a_real_conflict_and_both_changes_are_pushed(world: World) -> None:
    """A colleague's conflicting push during the run is resolved by the agent; both land."""
    env = {k: v for k, v in base_env().items() if not k.startswith(("GIT_AUTHOR", "GIT_COMMIT"))}
    result = world.run(GOOD_RESOLUTION, env=env)
    remote = world.project.remote
    assert result.rebased and world.recorded == [result.pushed_sha]
    assert git(remote, "rev-parse", "main") == result.pushed_sha
    assert world.remote_file("calc.py") == RESOLVED.strip()
    assert world.remote_file("test_mul.py") == TEST_MUL.strip()
    assert world.remote_file("test_calc.py") == FAILING_TEST.strip()
    assert git(remote, "log", "-1", "--format=%s", "main~1") == "Type add, add mul"
    assert _trailered(git(remote, "log", "-1", "--format=%B", "main"))
    prompt = world.prompts()[1].read_text()
    assert "calc.py" in prompt and "git rebase origin/main" in prompt and ISSUE.title in prompt
    assert any("the agent resolved the conflict" in m for m in world.messages("agent"))
    # Implement's gate, then the resolver's; publish's re-test reuses the green result.
    assert len(world.messages("test")) == 3 and "not run again" in world.messages("test")[2]
    assert len(world.results) == 2


def test_resolution_that_drops_the_trailers_gets_them_back(world: World) -> None:
    """An agent that rewrites the message without trailers is squashed with them again."""
    amend = ["sh", "git -c user.name=a -c user.email=a@x commit -q --amend -m 'Resolved'"]
    result = world.run([*GOOD_RESOLUTION, amend])
    message = git(world.project.remote, "log", "-1", "--format=%B", "main")
    assert _trailered(message) and message.startswith("Resolved")
    assert git(world.project.remote, "rev-parse", "main") == result.pushed_sha
    assert world.remote_file("calc.py") == RESOLVED.strip()


def test_an_index_lock_the_resolving_agent_left_does_not_undo_its_resolution(
    world: World,
) -> None:
    """The agent resolves the conflict, then a git of its own is killed holding the index
    lock: the resolution is pushed. Every git of the daemon in the tree failed on the lock,
    so the resolution was lost to a git error."""
    leave_lock = ["sh", 'touch "$(git rev-parse --git-dir)/index.lock"']
    result = world.run([*GOOD_RESOLUTION, leave_lock])
    assert git(world.project.remote, "rev-parse", "main") == result.pushed_sha
    assert world.remote_file("calc.py") == RESOLVED.strip()
    removed = "removed index.lock, left behind by a git of the agent"
    assert removed in world.messages("agent")


def test_uncommitted_work_of_the_agent_is_committed_but_not_older_artefacts(
    world: World,
) -> None:
    """A file the agent left uncommitted is pushed; one untracked before it ran is not."""
    artefact = world.project.root / "gate-report.log"
    notes = ["write", "NOTES.md", "calc: add is typed now\n"]
    precise = [
        REBASE,
        ["write", "calc.py", RESOLVED],
        ["sh", "git add calc.py && git rebase --continue"],
        notes,
    ]
    world.run(precise, before_publish=lambda: artefact.write_text("old\n"))
    files = git(world.project.remote, "show", "--name-only", "--format=", "main").split()
    assert sorted(files) == ["NOTES.md", "calc.py", "test_calc.py"]
    assert _trailered(git(world.project.remote, "log", "-1", "--format=%B", "main"))


BAD_RESOLUTIONS = {  # what the agent does, and what the pipeline says is wrong
    "rebase left in progress": ([REBASE], "operation in progress (rebase-merge)"),
    "tests red": ([REBASE, ["write", "calc.py", THEIRS], CONTINUE], "tests are red"),
    "blocked": (
        [REBASE, ["sh", "git rebase --abort"], ["print", "BLOCKED: both sides matter"]],
        "blocked: both sides matter",
    ),
    "change dropped": ([["sh", "git reset -q --hard origin/main"]], "change is gone"),
    "detached head": ([["sh", "git checkout -q --detach origin/main"]], "detached"),
}


@pytest.mark.parametrize("case", sorted(BAD_RESOLUTIONS))
def test_unresolved_conflict_escalates_with_the_branch_put_back(world: World, case: str) -> None:
    """Whatever the agent leaves short of a green rebase escalates ``conflict``; nothing lost."""
    resolution, problem = BAD_RESOLUTIONS[case]
    with pytest.raises(EscalationError) as caught:
        world.run(resolution)
    root = world.project.root
    assert caught.value.reason == "conflict" and "calc.py" in str(caught.value)
    head = git(root, "rev-parse", BRANCH)
    assert git(root, "symbolic-ref", "--short", "HEAD") == BRANCH
    assert git(root, "rev-parse", f"{head}~1") == world.project.base
    assert git(root, "show", f"{head}:calc.py") == FIXED.strip()
    assert _trailered(git(root, "log", "-1", "--format=%B", head))
    assert git(root, "status", "--porcelain") == ""
    assert not world.rebase_in_progress()
    assert git(world.project.remote, "log", "-1", "--format=%s", "main") == "Type add, add mul"
    assert world.recorded == [] and len(world.prompts()) == 2
    assert any("not resolved" in m and problem in m for m in world.messages("agent"))


def test_two_attempts_resume_the_agent_twice(world: World) -> None:
    """With conflict_agent_attempts = 2 the agent gets a second try after a failed one."""
    with pytest.raises(EscalationError) as caught:
        world.run([REBASE], conflict_agent_attempts=2)
    assert caught.value.reason == "conflict" and len(world.prompts()) == 3
    assert len([m for m in world.messages("agent") if "not resolved" in m]) == 2


def test_no_attempts_configured_escalates_without_the_agent(world: World) -> None:
    """conflict_agent_attempts = 0 escalates at once; the agent is not asked."""
    with pytest.raises(EscalationError) as caught:
        world.run(GOOD_RESOLUTION, conflict_agent_attempts=0)
    assert caught.value.reason == "conflict" and len(world.prompts()) == 1


def test_agent_error_is_classified_and_the_branch_put_back(world: World) -> None:
    """A failing agent invocation raises as in implement, after the branch is restored."""
    failing: Plan = [REBASE, ["print", "API error: rate limit exceeded"], ["exit", 1]]
    with pytest.raises(RetryableError) as caught:
        world.run(failing)
    root = world.project.root
    assert caught.value.kind == "agent_rate_limited"
    assert git(root, "status", "--porcelain") == ""
    assert git(root, "show", f"{BRANCH}:calc.py") == FIXED.strip()
    assert not world.rebase_in_progress()
    assert len(world.results) == 2 and world.recorded == []


def test_spent_budget_escalates_without_asking_the_agent(world: World) -> None:
    """A run whose budget is already spent does not hand the conflict to the agent."""
    root = world.project.root
    repo = world.project.repo(max_budget_usd=0.5)
    agent = build_agent(world.agent_preset(GOOD_RESOLUTION))
    spec = TreeSpec(root, world.project.tree, base_env(), world.project.home, branch=BRANCH)
    scope = scope_for(42, repo, spec.workspace(repo), world.sink, agent, ISSUE)
    scope.ledger.attempt.cost_usd = 0.5  # what the implement phase spent
    resolver = ConflictResolver(scope, test_gate=lambda: True)
    head = git(root, "rev-parse", "HEAD")
    assert resolve_conflict_with_agent("conflicts in calc.py", resolver) is False
    assert world.prompts() == [] and git(root, "rev-parse", "HEAD") == head
    assert any("budget is spent" in m for m in world.messages("agent"))
