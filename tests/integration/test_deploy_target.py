"""The local deploy target and the deploy probes against it: real git, real app process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.settings import DeploySettings, ProbeSettings
from pipeline.testing.deploy_target import DeployTarget
from pipeline.testing.sinks import RecordingSink
from pipeline.watch.deploy import command_probe, http_probe, watch_deploy


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[DeployTarget]:
    """A deploy target serving the demo app's first commit; the app is killed afterwards."""
    deployed = DeployTarget.create(tmp_path / "target")
    yield deployed
    deployed.stop()
    assert deployed.app_pid() is None


def push_change(target: DeployTarget, tmp: Path, files: dict[str, str]) -> str:
    work = tmp / "work"
    if not work.exists():
        git(tmp, "clone", "-q", target.remote_url, str(work))
    for name, text in files.items():
        (work / name).write_text(text, encoding="utf-8")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"change {', '.join(files)}")
    git(work, "push", "-q", "origin", "HEAD:main")
    return git(work, "rev-parse", "HEAD")


def deploy_settings(target: DeployTarget, **overrides: object) -> DeploySettings:
    probe = replace(target.probe(timeout_s=2.0), body_regex='"status": "ok"')
    values: dict[str, object] = {
        "probes": (probe,),
        "interval_s": 0.05,
        "count": 3,
        "failure_limit": 0,
        "progress_deadline_s": 20.0,
    }
    values.update(overrides)
    return DeploySettings(**values)  # type: ignore[arg-type]


def test_initial_commit_is_deployed_and_reports_its_sha(target: DeployTarget) -> None:
    """Creating the target deploys the seed commit; health answers 200 with that SHA."""
    assert target.health() == (200, {"version": target.initial_sha, "status": "ok"})
    assert target.deployed_sha() == target.initial_sha


def test_good_push_is_judged_healthy(target: DeployTarget, tmp_path: Path) -> None:
    """A good commit is deployed on push and the analysis calls it healthy."""
    sha = push_change(target, tmp_path, {"NOTES.md": "a harmless change\n"})
    assert target.health() == (200, {"version": sha, "status": "ok"})
    sink = RecordingSink()
    outcome = watch_deploy(deploy_settings(target), sha, sink, None)
    assert outcome.verdict == "healthy" and outcome.measurements == 3
    assert len(sink.of_kind("deploy")) == 4


def test_breaking_push_is_judged_broken(target: DeployTarget, tmp_path: Path) -> None:
    """A commit whose code raises makes health answer 500 and the analysis say broken."""
    bad = "def status():\n    raise ValueError('database url missing')\n"
    sha = push_change(target, tmp_path, {"lib.py": bad})
    status = target.health()
    assert status is not None and status[0] == 500 and status[1]["version"] == sha
    outcome = watch_deploy(deploy_settings(target), sha, RecordingSink(), None)
    assert outcome.verdict == "broken"
    assert "500" in outcome.evidence and "database url missing" in outcome.evidence


def test_app_that_cannot_start_is_judged_broken(target: DeployTarget, tmp_path: Path) -> None:
    """An import error stops the app from starting: nothing answers and the deploy is broken."""
    sha = push_change(target, tmp_path, {"lib.py": "import not_a_module\n"})
    assert target.health(timeout_s=1.0) is None
    assert "not_a_module" in target.app_log()
    outcome = watch_deploy(deploy_settings(target, failure_limit=1), sha, RecordingSink(), None)
    assert outcome.verdict == "broken" and outcome.failures == 2


def test_old_version_still_serving_is_inconclusive(target: DeployTarget) -> None:
    """A version field that never reaches the SHA is not rolled out: inconclusive, not broken."""
    outcome = watch_deploy(
        deploy_settings(target, progress_deadline_s=0.3), "f" * 40, RecordingSink(), None
    )
    assert outcome.verdict == "inconclusive"
    assert outcome.failures == 0 and "not rolled out" in outcome.evidence


def test_http_probe_checks_status_and_regex(target: DeployTarget) -> None:
    """The http probe fails on an unexpected status or a body that does not match."""
    sha = target.initial_sha
    assert http_probe(ProbeSettings(kind="http", url=target.health_url), sha).ok
    wrong_status = ProbeSettings(kind="http", url=target.health_url, expect_status=204)
    assert http_probe(wrong_status, sha).status == "failed"
    wrong_body = ProbeSettings(kind="http", url=target.health_url, body_regex="degraded")
    assert http_probe(wrong_body, sha).status == "failed"
    short_sha = ProbeSettings(kind="http", url=target.health_url, json_field="version")
    assert http_probe(short_sha, sha).ok


def test_command_probe_sees_the_sha_and_judges_by_exit_code(tmp_path: Path) -> None:
    """The command probe is healthy on exit 0; the pushed SHA is in its environment."""
    check = "import os, sys; print('rollout ok'); sys.exit(os.environ['AFK_PUSHED_SHA'] != 'abc')"
    probe = ProbeSettings(kind="command", command=(sys.executable, "-c", check), timeout_s=10)
    good = command_probe(probe, "abc", cwd=tmp_path)
    assert good.ok and "rollout ok" in good.output
    bad = command_probe(probe, "def", cwd=tmp_path)
    assert bad.status == "failed" and "exit 1" in bad.output
