"""A notification outlives a down channel and a daemon restart, through `pipeline run`."""

from __future__ import annotations

import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.deploy_target import free_port
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.receiver import Receiver

from .conftest import Cli, local_config, stop_daemon

PROJECT = {"app.py": "X = 1\n", "test_app.py": "import unittest\n"}
AGENT = "print('BLOCKED: the issue names a file that does not exist')\n"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def _config(tmp_path: Path, database_url: str, port: int) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = local_config(
        tmp_path, make_remote(tmp_path, PROJECT), [sys.executable, str(agent), "{prompt_file}"]
    )
    urls = tmp_path / "notify-urls"
    urls.write_text(f"json://127.0.0.1:{port}/afk-hook\n")
    changes = {
        "database_url": database_url,
        "notify": {"urls_file": str(urls), "retry_delay_s": 0.2},
    }
    write_config(config, merged(tomllib.loads(config.read_text()), changes))
    return config


def _until(what: str, check: Callable[[], bool], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(
        f"{what}: not within {timeout_s}s\n{log.read_text(errors='replace')[-4000:]}"
    )


def test_an_escalation_reaches_a_channel_that_was_down_across_a_restart(
    tmp_path: Path, cli_env: dict[str, str], database_url: str
) -> None:
    """Channel down at the escalation: the run says undelivered and the log says why; after a
    restart with the channel back, exactly one notification arrives and the mark goes."""
    port = free_port()
    cli = Cli(_config(tmp_path, database_url, port), cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Fix it", "--label", "ready-for-agent")
    first_log = tmp_path / "daemon-0.log"
    daemon = cli.daemon(first_log)
    try:
        cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "escalated", 60, daemon, first_log)
        _until(
            "the failed send is logged",
            lambda: "failed (attempt" in first_log.read_text(errors="replace"),
            first_log,
        )
        (run,) = cli.json("runs", "list")
        assert run["notifications_undelivered"] == 1, run
    finally:
        stop_daemon(daemon)
    with Receiver(port=port) as receiver:
        second_log = tmp_path / "daemon-1.log"
        daemon = cli.daemon(second_log)
        try:
            _until("the receiver gets it", lambda: len(receiver.received) >= 1, second_log)
            cli.wait_for(lambda rs: rs[0]["notifications_undelivered"] == 0, 30, daemon, second_log)
        finally:
            stop_daemon(daemon)
        (request,) = receiver.received
    payload = request.json()
    assert isinstance(payload, dict) and "(blocked)" in payload["title"], payload
    assert "delivered to json://127.0.0.1" in second_log.read_text(errors="replace")
