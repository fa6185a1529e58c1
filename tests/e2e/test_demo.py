"""`pipeline demo`: the designed outcome, a JSON summary, and history left to review."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_demo_reaches_the_designed_outcome(tmp_path: Path) -> None:
    """The demo resolves three issues, heals one broken deploy, and exits 0."""
    env_cmd = [sys.executable, "-m", "pipeline"]
    proc = subprocess.run([*env_cmd, "demo", "--json"], capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    assert summary["issues_closed"] == summary["issues_total"] == 3
    assert summary["fix_forwards"] == 1
    assert summary["runs_by_kind"] == {"issue": 3, "fix_forward": 1}
    assert summary["runs_by_state"] == {"succeeded": 3, "failed": 1}
    assert summary["frozen_repos"] == []
    assert "run" in proc.stderr  # progress went to stderr, the summary alone to stdout
    history = subprocess.run(
        [*env_cmd, "runs", "list", "--json"], capture_output=True, text=True, timeout=60
    )
    assert history.returncode == 0, history.stderr
    runs = json.loads(history.stdout)
    assert sorted(r["kind"] for r in runs) == ["fix_forward", "issue", "issue", "issue"]
    fix = next(r for r in runs if r["kind"] == "fix_forward")
    broken = next(r for r in runs if r["id"] == fix["parent_id"])
    assert broken["error_class"] == "deploy_broken"
