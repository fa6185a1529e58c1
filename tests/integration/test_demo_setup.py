"""The demo world on real git and a real deploy target, worked by the real demo agent."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import httpx
import pytest

from pipeline.agents.base import AgentRequest, AgentResult
from pipeline.agents.command import CommandAgent
from pipeline.config.load import load_settings
from pipeline.config.settings import AgentPreset, RepoSettings, Settings
from pipeline.core.proc import shell_argv
from pipeline.demo.setup import ISSUES, DemoWorld, build_world, project_files
from pipeline.demo.tasks import TASKS, Change
from pipeline.git.repo import GitRepo
from pipeline.run.implement import implement
from pipeline.run.prompt import IssueInfo, build_prompt
from pipeline.testing.gitrepos import git
from pipeline.testing.sinks import RecordingSink
from pipeline.watch.deploy import http_probe


@pytest.fixture
def world(tmp_path: Path) -> Iterator[DemoWorld]:
    built = build_world(tmp_path / "demo")
    yield built
    built.close()


@pytest.fixture
def settings(world: DemoWorld) -> Settings:
    return load_settings(world.config_path, environ={})


def _issue(number: int) -> IssueInfo:
    issue = ISSUES[number - 1]
    return IssueInfo(
        ref=f"#{number}",
        number=number,
        title=issue["title"],
        body=issue["body"],
        comments=(),
        url=f"local://{issue['repo']}/issues/{number}",
        author="demo",
    )


def _clone(repo: RepoSettings, into: Path) -> Path:
    subprocess.run(
        ["git", "clone", "-q", repo.remote_url, str(into)], check=True, capture_output=True
    )
    return into


def _suite(repo: RepoSettings, workdir: Path) -> subprocess.CompletedProcess[str]:
    """The repo's configured test command, as the daemon's test gate runs it."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        shell_argv(repo.test_command or ""),
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _agent(settings: Settings) -> CommandAgent:
    preset = settings.agent("demo")
    assert isinstance(preset, AgentPreset)
    return CommandAgent(preset)


def _run_agent(
    settings: Settings, workdir: Path, prompt: str, bare_env: bool = False
) -> AgentResult:
    """The demo agent through the real command adapter (``bare_env``: no git identity)."""
    env = {k: v for k, v in os.environ.items() if not (bare_env and k.startswith("GIT_"))}
    request = AgentRequest(prompt, workdir, env, workdir.parent / "home")
    return _agent(settings).run(request, events=RecordingSink(), stop=None)


def _prompt(
    repo: RepoSettings, clone: Path, number: int, run_id: int, evidence: str | None = None
) -> str:
    return build_prompt(
        _issue(number),
        run_id=run_id,
        repo=repo,
        repo_root=clone,
        workdir=clone,
        extra_prompt=evidence,
    )


def _check_test_first(
    repo: RepoSettings, clone: Path, change: Change, base: str, tmp: Path
) -> None:
    """The change's test fails on the base tree and the whole suite passes at HEAD."""
    before = tmp / f"before-{change.test_path.replace('/', '-')}"
    git(clone, "worktree", "add", "-q", "--detach", str(before), base)
    (before / change.test_path).write_text(git(clone, "show", f"HEAD:{change.test_path}"))
    assert _suite(repo, before).returncode != 0
    assert _suite(repo, clone).returncode == 0


def _work_issue(
    settings: Settings,
    repo: RepoSettings,
    clone: Path,
    number: int,
    run_id: int,
    evidence: str | None = None,
    bare_env: bool = False,
) -> tuple[str, AgentResult]:
    base = git(clone, "rev-parse", "HEAD").strip()
    prompt = _prompt(repo, clone, number, run_id, evidence)
    result = _run_agent(settings, clone, prompt, bare_env)
    assert result.blocked_reason is None, result.result_text
    assert result.result_text.index("red, as expected") < result.result_text.index("green:")
    assert git(clone, "rev-parse", "HEAD~1").strip() == base
    assert git(clone, "status", "--porcelain") == ""
    return git(clone, "rev-parse", "HEAD").strip(), result


def test_config_is_valid_with_the_designed_values(world: DemoWorld, settings: Settings) -> None:
    """The written config loads cleanly: local tracker, demo agent, two repos, webapp probes."""
    assert settings.database_url == f"sqlite:///{world.root}/data/history.db"
    assert settings.volume == world.root / "data" / "volume"
    assert settings.max_concurrency == 2 and settings.poll_interval_s == 1
    assert (settings.scheduler.lease_s, settings.scheduler.heartbeat_s) == (10, 2)
    assert settings.scheduler.claim_interval_s == 0.2
    assert settings.http.api_token.resolve() == world.api_token_path.read_text().strip()
    assert f"{settings.http.listen_host}:{settings.http.listen_port}" in world.http_url
    tracker = settings.tracker("local")
    assert tracker is not None and tracker.kind == "local"
    agent = _agent(settings).preset
    assert agent.command[-3:] == ("pipeline.demo.agent", "{prompt_file}", "{workdir}")
    greeter, webapp = settings.repo("greeter"), settings.repo("webapp")
    assert greeter is not None and webapp is not None
    assert greeter.remote_url == world.repo("demo/greeter").remote_url
    assert webapp.remote_url == world.target.remote_url
    assert greeter.ci.kind == "none" and greeter.deploy.probes == ()
    (probe,) = webapp.deploy.probes
    assert (probe.kind, probe.url, probe.json_field) == ("http", world.target.health_url, "version")
    assert (webapp.deploy.count, webapp.deploy.failure_limit, webapp.max_fix_forwards) == (2, 0, 2)


def test_world_holds_real_repos_a_serving_target_and_three_issues(world: DemoWorld) -> None:
    """Both remotes hold their project; the webapp is deployed and healthy; close() stops it."""
    for slug, marker in (("demo/greeter", "greeter/cli.py"), ("demo/webapp", "app.py")):
        tree = git(Path(world.repo(slug).remote_url), "ls-tree", "-r", "--name-only", "main")
        assert marker in tree.split() and ".gitignore" in tree.split()
    response = httpx.get(world.target.health_url, timeout=5)
    assert response.json() == {"status": "ok", "version": world.target.initial_sha}
    assert [i["repo"] for i in world.issues].count("demo/greeter") == 2
    assert {i["repo"] for i in world.issues} == {"demo/greeter", "demo/webapp"}
    assert stat.S_IMODE(world.api_token_path.stat().st_mode) == 0o600
    world.close()
    world.close()
    assert world.target.health(timeout_s=1) is None


def test_world_needs_an_empty_directory(tmp_path: Path) -> None:
    """Building into a directory that holds files is refused, naming the directory."""
    (tmp_path / "old").write_text("x")
    with pytest.raises(FileExistsError, match="needs an empty directory"):
        build_world(tmp_path)


def test_projects_are_package_data_with_passing_suites(
    world: DemoWorld, settings: Settings, tmp_path: Path
) -> None:
    """The projects are reachable as package resources and their suites pass as shipped."""
    base = files("pipeline.demo") / "projects"
    assert (base / "greeter" / "greeter" / "core.py").is_file()
    assert (base / "webapp" / "service" / "routes.py").is_file()
    assert not any("__pycache__" in name for name in project_files("webapp"))
    for repo in settings.repos:
        clone = _clone(repo, tmp_path / repo.name)
        done = _suite(repo, clone)
        assert done.returncode == 0, done.stderr
        assert "Ran 3 tests" in done.stderr


def test_greeter_issues_go_red_then_green_and_commit(
    world: DemoWorld, settings: Settings, tmp_path: Path
) -> None:
    """Each greeter issue: a failing test, the change, a green suite, one trailered commit."""
    repo = settings.repo("greeter")
    assert repo is not None
    for number, run_id in ((2, 21), (3, 22)):
        clone = _clone(repo, tmp_path / f"greeter-{number}")
        base = git(clone, "rev-parse", "HEAD").strip()
        sha, _ = _work_issue(settings, repo, clone, number, run_id)
        message = git(clone, "log", "-1", "--format=%B")
        assert f"Afk-Run: {run_id}\nRefs: local://demo/greeter/issues/{number}" in message
        change = TASKS[ISSUES[number - 1]["body"].split("demo-task: ")[1].strip()].first
        _check_test_first(repo, clone, change, base, tmp_path)
        git(clone, "push", "-q", "origin", "HEAD:main")
        assert git(Path(repo.remote_url), "rev-parse", "main").strip() == sha
    final = _clone(repo, tmp_path / "greeter-final")
    shout = subprocess.run(
        ["python3", "-m", "greeter", "--shout", "Ada"],
        cwd=final,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shout.stdout == "HELLO, ADA!\n"
    assert _suite(repo, final).returncode == 0


def test_the_implement_loop_keeps_the_agents_commit(
    world: DemoWorld, settings: Settings, tmp_path: Path
) -> None:
    """Through implement(), the agent's trailered commit passes the gate and is kept as is."""
    repo = settings.repo("greeter")
    assert repo is not None
    clone = _clone(repo, tmp_path / "greeter")
    sink = RecordingSink()
    outcome = implement(
        run_id=31,
        issue=_issue(3),
        repo=repo,
        agent=_agent(settings),
        workdir=clone,
        repo_root=clone,
        tree=GitRepo.plain(clone),
        env=dict(os.environ),
        home=tmp_path / "home",
        events=sink,
        stop=None,
    )
    assert outcome.fix_iterations == 0 and len(outcome.commits) == 1
    message = git(clone, "log", "-1", "--format=%B")
    assert message.startswith(TASKS["add-farewell"].first.subject + "\n")
    assert "Test first: tests/test_farewell.py." in message and "Afk-Run: 31" in message
    assert [data["ok"] for _, _, data in sink.of_kind("test")] == [True]


def test_version_issue_breaks_the_deploy_and_the_fix_forward_heals_it(
    world: DemoWorld, settings: Settings, tmp_path: Path
) -> None:
    """add-version passes its tests but fails the health probe; the evidence-driven fix heals."""
    repo = settings.repo("webapp")
    assert repo is not None
    (probe,) = repo.deploy.probes
    clone = _clone(repo, tmp_path / "webapp")
    # No git identity in the environment here: the agent supplies its own.
    broken, _ = _work_issue(settings, repo, clone, 1, 41, bare_env=True)
    assert git(clone, "log", "-1", "--format=%an <%ae>").strip() == (
        "afk demo agent <demo-agent@afk-pipeline.invalid>"
    )
    git(clone, "push", "-q", "origin", "HEAD:main")
    assert world.target.deployed_sha() == broken
    health = httpx.get(world.target.health_url, timeout=5)
    assert health.status_code == 200 and "version" not in health.json()
    verdict = http_probe(probe, broken)
    assert verdict.status == "failed" and "no JSON field version" in verdict.output

    evidence = f"The deploy of {broken[:12]} is broken.\n{verdict.output}"
    healed, result = _work_issue(settings, repo, clone, 1, 42, evidence=evidence)
    assert "fix-forward" in result.result_text
    assert "Afk-Run: 42" in git(clone, "log", "-1", "--format=%B")
    heal = TASKS["add-version"].heal
    assert heal is not None
    _check_test_first(repo, clone, heal, broken, tmp_path)
    git(clone, "push", "-q", "origin", "HEAD:main")
    assert http_probe(probe, healed).status == "ok"
    version = httpx.get(f"{world.target.url}/version", timeout=5).json()
    assert version == {"version": healed, "release": "1.4.0"}
