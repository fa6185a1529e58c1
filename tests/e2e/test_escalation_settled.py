"""An escalation a later run settles: it leaves `pipeline escalations` by itself.

The agent stops BLOCKED, so run 1 escalates and `pipeline escalations` (and
``GET /api/escalations``) list it as waiting for a human, with its next step. The
operator retries it; run 2 succeeds. The issue is done: nothing waits for a human any
more, so neither the CLI nor the API lists the escalation as open, and the full list
says which run settled it. SQLite and PostgreSQL alike (ADR 36).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx

from pipeline.testing.gitrepos import make_remote

from .conftest import Cli, local_config, stop_daemon
from .test_local_loop import HANG_GUARD_S, PROJECT
from .test_retry_resume import AGENT  # blocked until a retry carries its question back

SETTLED = "afk-pipeline: settled by run 2, which succeeded"


def _api(listen: str, query: str = "") -> list[dict[str, Any]]:
    reply = httpx.get(f"http://{listen}/api/escalations{query}", timeout=30)
    assert reply.status_code == 200, reply.text
    shown: list[dict[str, Any]] = reply.json()["escalations"]
    return shown


def test_a_retry_that_succeeds_settles_the_escalation(
    tmp_path: Path, cli_env: dict[str, str], database_url: str
) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    remote = make_remote(tmp_path, PROJECT)
    config = local_config(tmp_path, remote, argv, database_url=database_url)
    listen = tomllib.loads(config.read_text())["http"]["listen"]
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "escalated", HANG_GUARD_S)
        waiting = cli.json("escalations")
        assert [(e["id"], e["run_id"], e["reason"]) for e in waiting] == [(1, 1, "blocked")]
        assert waiting[0]["next_step"] == "pipeline runs retry 1"
        assert [e["id"] for e in _api(listen)] == [1]
        cli("runs", "retry", "1")
        runs = cli.wait_for(
            lambda rs: len(rs) == 2 and rs[0]["state"] in ("succeeded", "escalated", "failed"),
            HANG_GUARD_S,
            daemon,
            log,
        )
        assert (runs[0]["id"], runs[0]["state"]) == (2, "succeeded"), runs
        served, served_all = _api(listen), _api(listen, "?show=all")
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    assert served == []
    assert [(e["id"], e["acknowledged"], e["next_step"]) for e in served_all] == [(1, True, None)]
    assert served_all[0]["acknowledged_by"] == SETTLED
    proc = cli("escalations")
    assert proc.stdout == "no escalation waits for a human\n"
    every = cli("escalations", "--all").stdout
    assert f"{SETTLED} at " in every and "none waits for a human" in every, every
    assert cli.json("escalations", "--all")[0]["acknowledged_by"] == SETTLED
    timeline = cli("runs", "show", "1").stdout
    assert "escalation 1 (blocked) settled by run 2, which succeeded" in timeline, timeline
