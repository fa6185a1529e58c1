"""Ship and watch, end to end: the real daemon against fake GitHub and a local deploy target.

Each test runs ``python -m pipeline run`` as a subprocess. Issues are filed
and labelled on the fake GitHub; CI is reported there as check runs (no
commit statuses, as in an Actions-only repo) for each commit that lands on
the remote; the remote's hook deploys the app whose ``/health`` the probes
read; escalations go through apprise to a loopback receiver.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from pipeline.store import Run

from .ci_feeder import CheckPlan
from .world import BLOCKED, READY, TOKEN, WORKING, ShipWorld, ship_world

pytestmark = pytest.mark.deploy_e2e


def _by_issue(runs: list[Run], number: int, repo: str = "web") -> Run:
    return next(
        r for r in runs if r.issue_number == number and r.repo_name == repo and r.kind == "issue"
    )


def _done(runs: list[Run], number: int, repo: str = "web") -> bool:
    return any(
        r.issue_number == number and r.repo_name == repo and r.kind == "issue" and r.terminal
        for r in runs
    )


def _label_history(world: ShipWorld, repo: str, number: int) -> list[tuple[str, bool]]:
    issue = world.fake.issue(world.repos[repo].slug, number)
    return [(e.label, e.added) for e in issue.events]


def _comments(world: ShipWorld, repo: str, number: int) -> list[str]:
    return [c.body for c in world.fake.issue(world.repos[repo].slug, number).comments]


def _health(world: ShipWorld, repo: str) -> tuple[int, dict[str, object]] | None:
    return world.repos[repo].target.health(timeout_s=10)


def test_labelled_issue_ships_and_closes(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A labelled GitHub issue is pushed, green on CI, healthy in deploy, closed with its SHA."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        world.start()
        runs = world.wait("the run succeeds", lambda rs: _done(rs, number))
        run = _by_issue(runs, number)
        assert run.state == "succeeded", world.describe(runs)
        sha = run.pushed_sha
        assert sha and world.remote_log("web")[0] == sha
        assert world.commits_of_run("web", run.id) == [sha]
        slug = world.repos["web"].slug
        assert any(
            r.path == f"/repos/{slug}/commits/{sha}/check-runs" for r in world.fake.requests
        ), "CI was never asked about the pushed SHA"
        assert _health(world, "web") == (200, {"version": sha, "status": "ok"})
        issue = world.fake.issue(slug, number)
        assert issue.state == "closed"
        resolved = [c for c in _comments(world, "web", number) if "Done in" in c]
        assert len(resolved) == 1 and sha in resolved[0]
        history = _label_history(world, "web", number)
        assert history.index((WORKING, True)) < history.index((WORKING, False))
        assert (READY, False) in history
        assert WORKING not in issue.labels and BLOCKED not in issue.labels
        events = world.events(run.id)
        assert any(e.startswith("ci: CI for") and "success" in e for e in events)
        assert any("deploy healthy" in e for e in events)
        # The forge token stays with the daemon: not in the agent's env, logs or history.
        assert [c["token_vars"] for c in world.agent_calls()] == [[]]
        assert TOKEN not in world.log_path(0).read_text()
        for db in tmp_path.glob("history.db*"):
            assert TOKEN.encode() not in db.read_bytes()


def test_broken_deploy_is_fixed_forward_ahead_of_the_queue(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A deploy broken by a run is healed by a fix-forward that jumps the repo's queue."""
    with ship_world(tmp_path, cli_env, fix_mode="heal") as world:
        breaking = world.label("web", "Ask the backend for status", "break")
        queued = world.label("web", "Add a reports helper", "feature reports")
        world.start()
        runs = world.wait(
            "both issues resolved", lambda rs: _done(rs, breaking) and _done(rs, queued), 90
        )
        first, second = _by_issue(runs, breaking), _by_issue(runs, queued)
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert [r.kind for r in runs].count("fix_forward") == 1, world.describe(runs)
        assert first.state == "failed" and first.error_class == "deploy_broken"
        assert fix.parent_id == first.id and fix.state == "succeeded", world.describe(runs)
        assert second.state == "succeeded", world.describe(runs)
        # The other issue was queued before the fix-forward existed, yet ran after it.
        assert second.id < fix.id
        assert fix.started_at and second.started_at and fix.finished_at
        assert fix.finished_at <= second.started_at
        assert [c["run"] for c in world.agent_calls()] == [first.id, fix.id, second.id]
        # The broken commit, then the fix forward on top of it, then the other issue.
        assert world.remote_log("web")[:3] == [second.pushed_sha, fix.pushed_sha, first.pushed_sha]
        prompt = next(c for c in world.agent_calls() if c["fix_forward"])
        assert prompt["run"] == fix.id
        evidence = world.store.run_events(fix.id)
        text = next(str(e.data["prompt"]) for e in evidence if e.kind == "evidence")
        assert first.pushed_sha and "status backend unreachable" in text
        assert f"commit {first.pushed_sha} on main is broken after its push (the deploy" in text
        slug = world.repos["web"].slug
        for number in (breaking, queued):
            assert world.fake.issue(slug, number).state == "closed"
        closing = sorted(
            (c.id, number)
            for number in (breaking, queued)
            for c in world.fake.issue(slug, number).comments
            if "Done in" in c.body
        )
        assert [number for _, number in closing] == [breaking, queued]
        healed = next(c for c in _comments(world, "web", breaking) if "Done in" in c)
        assert f"Done in {fix.pushed_sha} " in healed and f"fix-forward run {fix.id}" in healed
        assert _health(world, "web") == (200, {"version": second.pushed_sha, "status": "ok"})


def _frozen(world: ShipWorld, repo: str) -> bool:
    record = world.store.get_repo(repo)
    return record is not None and record.frozen


def test_failed_fix_forwards_freeze_the_repo_and_unfreeze_resumes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Two failed fix-forwards freeze the repo, keep evidence, notify; unfreeze resumes."""
    with ship_world(tmp_path, cli_env, repos=("web", "api"), fix_mode="fail") as world:
        breaking = world.label("web", "Ask the backend for status", "break")
        waiting = world.label("web", "Add a reports helper", "feature reports")
        world.start()
        runs = world.wait(
            "the repo freezes",
            lambda rs: (
                _frozen(world, "web")
                and any(
                    r.kind == "fix_forward" and r.terminal and r.error_class == "frozen" for r in rs
                )
            ),
            90,
        )
        first = _by_issue(runs, breaking)
        fixes = [r for r in runs if r.kind == "fix_forward"]
        assert len(fixes) == 2, world.describe(runs)
        assert fixes[0].parent_id == first.id and fixes[1].parent_id == fixes[0].id
        assert [first.state, fixes[0].state, fixes[1].state] == ["failed", "failed", "escalated"]
        last = fixes[1]
        assert _by_issue(runs, waiting).state == "queued"
        # Evidence: the last fix-forward's worktree and a manifest, nothing reverted.
        evidence = tmp_path / "volume" / "frozen" / str(last.id)
        manifest = json.loads((evidence / "manifest.json").read_text())
        assert manifest["run_id"] == last.id and manifest["repo"] == "web"
        assert manifest["head_sha"] == last.pushed_sha and manifest["extra"]["frozen"] is True
        assert (evidence / manifest["worktree"] / "lib.py").is_file()
        assert world.remote_log("web")[0] == last.pushed_sha
        # The escalation reached the loopback receiver through apprise's json:// URL.
        notice = next(
            (r for r in world.receiver.wait_for(1, timeout_s=20) if r.path.startswith("/afk-hook")),
            None,
        )
        assert notice is not None and notice.method == "POST"
        payload = notice.json()
        assert isinstance(payload, dict) and "(frozen)" in payload["title"]
        assert "pipeline repos unfreeze web" in payload["message"]
        assert str(evidence) in payload["message"]
        world.wait_event(last.id, "notify: freeze sent to json://127.0.0.1")
        escalations = world.store.list_escalations("web")
        assert {(e.reason, e.run_id) for e in escalations} == {("frozen", last.id)}
        issue = world.fake.issue(world.repos["web"].slug, breaking)
        assert BLOCKED in issue.labels and WORKING not in issue.labels and issue.state == "open"
        marker = f"afk-pipeline:run={last.id}:ended"
        blocked = [c for c in _comments(world, "web", breaking) if marker in c]
        assert len(blocked) == 1 and "pipeline repos unfreeze web" in blocked[0], blocked
        # Another repo on the same daemon keeps running while this one is frozen.
        other = world.label("api", "Add a reports helper", "feature reports")
        runs = world.wait("the other repo's issue", lambda rs: _done(rs, other, "api"))
        assert _by_issue(runs, other, "api").state == "succeeded", world.describe(runs)
        assert _frozen(world, "web") and _by_issue(runs, waiting).state == "queued"
        # A human restores main by hand and unfreezes; the queue resumes.
        world.human_commit("web", {"lib.py": world.app_lib}, "Restore lib.status by hand")
        out = world.cli("repos", "unfreeze", "web", "--note", "restored lib.status").stdout
        assert "unfrozen" in out
        acknowledged = [e.acknowledged_by or "" for e in world.store.list_escalations("web")]
        assert all("restored lib.status" in who for who in acknowledged), acknowledged
        runs = world.wait("the queued issue runs", lambda rs: _done(rs, waiting), 60)
        resumed = _by_issue(runs, waiting)
        assert resumed.state == "succeeded", world.describe(runs)
        assert not _frozen(world, "web")
        assert _health(world, "web") == (200, {"version": resumed.pushed_sha, "status": "ok"})


def test_push_race_rebases_and_retests(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A commit landing on the remote during the run: rebased onto, tests re-run, both kept."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Add a reports helper", "race-clean reports")
        world.start()
        runs = world.wait("the run ends", lambda rs: _done(rs, number))
        run = _by_issue(runs, number)
        assert run.state == "succeeded", world.describe(runs)
        subjects = world.remote_log("web", "%H %P %s")
        pushed, raced = subjects[0].split(" ", 3), subjects[1].split(" ", 3)
        assert pushed[0] == run.pushed_sha and pushed[1] == raced[0]
        assert raced[2:] == ["Add", "release notes"]
        assert world.commits_of_run("web", run.id) == [run.pushed_sha]
        assert run.base_sha == raced[1], "the run started before the racing commit"
        events = world.events(run.id)
        assert any(e.startswith("publish: rebased onto origin/main") for e in events), events
        assert any(e == "publish: tests after rebase: green" for e in events), events
        assert _health(world, "web") == (200, {"version": run.pushed_sha, "status": "ok"})


def test_conflicting_push_race_escalates_and_keeps_the_work(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A conflicting commit on the remote escalates; it and the run's commit both survive."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Greet more briefly", "race-conflict")
        world.start()
        runs = world.wait("the run ends", lambda rs: _done(rs, number))
        run = _by_issue(runs, number)
        assert run.state == "escalated" and run.error_class == "conflict", world.describe(runs)
        assert run.pushed_sha is None and world.commits_of_run("web", run.id) == []
        assert world.remote_log("web", "%s")[0] == "Greet with hey"
        calls = world.agent_calls()
        assert [c["conflict"] for c in calls] == [False, True], calls
        events = world.events(run.id)
        assert "agent: rebase conflict handed to the agent" in events, events
        assert any(
            e.startswith("agent: the conflict is not resolved: the agent is blocked")
            for e in events
        ), events
        world.wait_event(run.id, "notify: escalation sent to json://127.0.0.1")  # told
        evidence = tmp_path / "volume" / "frozen" / str(run.id)
        manifest = json.loads((evidence / "manifest.json").read_text())
        tree = evidence / manifest["worktree"]
        kept = world.git_in(tree, "log", "-1", "--format=%H%n%B", manifest["branch"])
        assert kept.startswith(run.head_sha or "-") and f"Afk-Run: {run.id}" in kept
        assert 'GREETING = "hi"' in world.git_in(tree, "show", f"{run.head_sha}:lib.py")
        issue = world.fake.issue(world.repos["web"].slug, number)
        assert BLOCKED in issue.labels and WORKING not in issue.labels
        assert any("conflict" in c for c in _comments(world, "web", number))
        assert not _frozen(world, "web")
        assert any("(conflict)" in str(r.json()) for r in world.receiver.wait_for(1, 20))
        world.wait_event(run.id, "notify: escalation sent to json://127.0.0.1")


def test_kill_between_push_and_record_pushes_once(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A daemon killed right after its push records the remote's SHA on restart, pushing nothing."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        killed = world.start(faults="after_push")
        assert killed.wait(timeout=60) == -signal.SIGKILL, world.describe(world.runs())
        run = _by_issue(world.runs(), number)
        on_remote = world.commits_of_run("web", run.id)
        assert len(on_remote) == 1 and run.pushed_sha is None and not run.terminal
        world.start()
        runs = world.wait("the run ends after restart", lambda rs: _done(rs, number))
        run = _by_issue(runs, number)
        assert run.state == "succeeded", world.describe(runs)
        assert run.pushed_sha == on_remote[0]
        assert world.commits_of_run("web", run.id) == on_remote
        assert len(world.remote_log("web")) == 2
        assert len(world.agent_calls()) == 1, "the restarted run implemented again"
        events = world.events(run.id)
        assert any(on_remote[0][:12] in e and "instead" in e for e in events), events
        comments = _comments(world, "web", number)
        assert sum("An agent is working" in c for c in comments) == 1
        assert sum("Done in" in c for c in comments) == 1


def test_a_push_found_after_a_crash_is_watched_even_if_the_issue_was_closed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Killed right after its push, then the issue closed (the change landed): the restarted
    run finds its commit and watches it; a closed issue does not cancel what is on main."""
    with ship_world(tmp_path, cli_env) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        killed = world.start(faults="after_push")
        assert killed.wait(timeout=60) == -signal.SIGKILL, world.describe(world.runs())
        on_remote = world.commits_of_run("web", _by_issue(world.runs(), number).id)
        world.fake.set_state(world.repos["web"].slug, number, "closed")
        world.start()
        runs = world.wait("the run ends after restart", lambda rs: _done(rs, number))
        run = _by_issue(runs, number)
        assert run.state == "succeeded", world.describe(runs)
        assert run.pushed_sha == on_remote[0] and len(world.agent_calls()) == 1


def _ci_states(events: list[str]) -> list[str]:
    """The CI states a watch reported, without ``none`` (polled before CI registered)."""
    return [e.rsplit(" ", 1)[-1] for e in events if not e.endswith(": none")]


def _actions_plan(slug: str, sha: str, subject: str) -> CheckPlan:
    red = "[ci-red]" in subject
    return CheckPlan(pending_s=2.0, conclusion="failure" if red else "success")


def test_actions_only_repo_is_judged_by_its_check_runs(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Check runs alone (no statuses) decide: pending waits, green ships, red fixes forward."""
    with ship_world(tmp_path, cli_env, plan=_actions_plan) as world:
        green = world.label("web", "Add a reports helper", "feature reports")
        red = world.label("web", "Add an audit helper [ci-red]", "feature audit")
        world.start()
        runs = world.wait(
            "both issues end",
            lambda rs: _done(rs, green) and _done(rs, red) and all(r.terminal for r in rs),
            90,
        )
        ok, failed = _by_issue(runs, green), _by_issue(runs, red)
        assert ok.state == "succeeded", world.describe(runs)
        ci = [e for e in world.events(ok.id) if e.startswith("ci: CI for")]
        assert _ci_states(ci) == ["pending", "success"], ci
        slug = world.repos["web"].slug
        status_calls = [
            r
            for r in world.fake.requests
            if r.path == f"/repos/{slug}/commits/{ok.pushed_sha}/status"
        ]
        assert status_calls and world.fake.repos[slug].statuses == {}
        assert failed.state == "failed" and failed.error_class == "deploy_broken"
        ci = [e for e in world.events(failed.id) if e.startswith("ci: CI for")]
        assert _ci_states(ci) == ["pending", "failure"], ci
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert fix.parent_id == failed.id and fix.state == "succeeded", world.describe(runs)
        evidence = next(e for e in world.store.run_events(fix.id) if e.kind == "evidence")
        assert "check build: failure" in str(evidence.data["prompt"])
        assert world.fake.issue(slug, red).state == "closed"
        for run in (ok, fix):
            assert (run.summary or "").startswith(f"pushed {(run.pushed_sha or '-')[:12]}")


def _slow_ci_plan(slug: str, sha: str, subject: str) -> CheckPlan:
    return CheckPlan(pending_s=90.0 if "[slow-ci]" in subject else 0.0)


def test_run_cancelled_while_watching_frees_its_worktree(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A run cancelled during its CI watch gives its warm worktree back to the next run."""
    with ship_world(tmp_path, cli_env, plan=_slow_ci_plan) as world:
        slow = world.label("web", "Add a reports helper [slow-ci]", "feature reports")
        world.start()
        runs = world.wait(
            "the run watches CI",
            lambda rs: any(r.issue_number == slow and r.state == "watching" for r in rs),
        )
        world.cli("runs", "cancel", str(_by_issue(runs, slow).id))
        runs = world.wait("the cancel lands", lambda rs: _done(rs, slow), 30)
        cancelled = _by_issue(runs, slow)
        assert cancelled.state == "cancelled", world.describe(runs)
        after = world.label("web", "Add an audit helper", "feature audit")
        runs = world.wait("the next run ends", lambda rs: _done(rs, after))
        run = _by_issue(runs, after)
        assert run.state == "succeeded", world.describe(runs)
        assert run.worktree == cancelled.worktree, "the cancelled run's worktree was not freed"
