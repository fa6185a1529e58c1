"""`pipeline demo`: the designed outcome, a JSON summary, history left to review, --serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from pipeline.store import Store

PIPELINE = [sys.executable, "-m", "pipeline"]


def demo_env(tmp_path: Path) -> dict[str, str]:
    """The user's environment with a data directory of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINE_")}
    env["PIPELINE_DATA_DIR"] = str(tmp_path / "data")
    return env


def test_demo_reaches_the_designed_outcome(tmp_path: Path) -> None:
    """The demo resolves three issues, heals one broken deploy, and exits 0."""
    env = demo_env(tmp_path)
    proc = subprocess.run(
        [*PIPELINE, "demo", "--json"], capture_output=True, text=True, timeout=170, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    assert summary["issues_closed"] == summary["issues_total"] == 3
    assert summary["fix_forwards"] == 1
    assert summary["runs_by_kind"] == {"issue": 3, "fix_forward": 1}
    assert summary["runs_by_state"] == {"succeeded": 3, "failed": 1}
    assert summary["frozen_repos"] == []
    assert summary["dashboard"] is None  # not served: no dead URL in the summary
    assert "run" in proc.stderr  # progress went to stderr, the summary alone to stdout
    history = subprocess.run(
        [*PIPELINE, "runs", "list", "--json", "--database-url", summary["database_url"]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert history.returncode == 0, history.stderr
    runs = json.loads(history.stdout)
    assert sorted(r["kind"] for r in runs) == ["fix_forward", "issue", "issue", "issue"]
    fix = next(r for r in runs if r["kind"] == "fix_forward")
    broken = next(r for r in runs if r["id"] == fix["parent_id"])
    assert broken["error_class"] == "deploy_broken"


def test_serve_keeps_the_dashboard_up_despite_an_earlier_demos_leftovers(tmp_path: Path) -> None:
    """With queued runs and frozen repos in the default database, `demo --serve` still
    succeeds, prints the dashboard URL, serves it after the summary, and stops on Ctrl-C."""
    env = demo_env(tmp_path)
    leftover = Store(f"sqlite:///{tmp_path / 'data' / 'history.db'}")
    leftover.upgrade()
    for name, slug in (("greeter", "demo/greeter"), ("webapp", "demo/webapp")):
        leftover.ensure_repo(name, tracker="local", slug=slug)
        leftover.enqueue(name)
        leftover.freeze_repo(name, "an earlier demo broke it", "recovery")
    leftover.close()
    proc = subprocess.Popen(
        [*PIPELINE, "demo", "--json", "--serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        summary = json.loads(line)
        assert summary["ok"] is True, summary
        assert proc.poll() is None  # still serving after the summary
        page = httpx.get(summary["dashboard"], timeout=10)
        assert page.status_code == 200 and "greeter" in page.text
        # The summary says where the token to sign in with is, and it is the one.
        token = Path(summary["api_token_file"]).read_text(encoding="utf-8").strip()
        login = httpx.post(summary["dashboard"] + "login", data={"token": token}, timeout=10)
        assert login.status_code == 303, login.text
        assert login.headers["set-cookie"].startswith("afk_session="), login.headers
        os.killpg(proc.pid, signal.SIGINT)
        _, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, errors
    assert "until Ctrl-C" in errors


def test_the_commands_the_summary_names_work_as_printed(tmp_path: Path) -> None:
    """The text summary's review commands, pasted as printed (ID filled in), read the demo's
    own history, not the default database."""
    env = demo_env(tmp_path)
    proc = subprocess.run([*PIPELINE, "demo"], capture_output=True, text=True, timeout=170, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("Review the history: "))
    listing, _, rest = line.removeprefix("Review the history: ").partition("  (one run: ")
    showing = rest.removesuffix(")").replace(" ID", " 1")
    for command in (listing, showing):
        argv = command.split()
        assert argv[0] == "pipeline", command
        done = subprocess.run(
            [*PIPELINE, *argv[1:]], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 0, (command, done.stderr)
        assert "greeter" in done.stdout or "webapp" in done.stdout, (command, done.stdout)
