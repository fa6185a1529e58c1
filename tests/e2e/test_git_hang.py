"""A git remote that hangs, under ``pipeline run``: every run is bounded and leaves no git behind.

The remotes accept connections and never answer: a TCP server that stays silent
behind an ``https://`` URL (the TLS handshake never completes), and the loopback
smart-HTTP server told to stall (HTTP requests that never get an answer). The
daemon's git limits are set low in ``[workspace]``. After each ending (the
limit, a cancel, a SIGTERM of the daemon) no git process naming the remote is
left, and the next run of the repo starts and succeeds once the remote answers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline.testing.git_http import GitHttpServer, SilentServer
from pipeline.testing.gitrepos import git, make_remote

from .conftest import CALC_PROJECT, Cli, local_config, stop_daemon

pytestmark = pytest.mark.slow

TOKEN = "sntl-hang-token-Qe61ps"
AGENT = "import pathlib, sys; (pathlib.Path(sys.argv[1]) / 'note.txt').open('a').write('hi\\n')"
SHUTDOWN_S = 90  # the daemon's 30 s grace for running work, with room on a loaded machine
SCHEDULER = "[scheduler]\nmax_attempts = 2\nbackoff_base_s = 0.5\nbackoff_max_s = 1\n"


def git_processes(marker: str) -> list[str]:
    """Live git processes whose command line names ``marker`` (the remote's port)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "git" in argv and marker in argv and "pytest" not in argv:
            found.append(f"{entry.name}: {argv}")
    return found


def settle(check: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    """Wait until ``check()`` is truthy: processes take a moment to be reaped."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout_s}s")
        time.sleep(0.2)


def world(tmp_path: Path, url: str, cli_env: dict[str, str], limits: str) -> Cli:
    """The daemon's config for repo ``calc`` at ``url``, with git limits ``limits``."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = local_config(tmp_path, url, [sys.executable, str(agent), "{workdir}"])
    text = config.read_text().replace("[scheduler]\n", SCHEDULER)
    config.write_text(
        text + f'[repos.calc.push]\ntoken_env = "AFK_E2E_GIT_TOKEN"\n[workspace]\n{limits}'
    )
    cli_env["AFK_E2E_GIT_TOKEN"] = TOKEN
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    return cli


def add_issue(cli: Cli, title: str) -> None:
    cli("issue", "add", "--repo", "calc", "--title", title, "--label", "ready-for-agent")


@pytest.fixture
def stalling(tmp_path: Path) -> Iterator[tuple[GitHttpServer, Path]]:
    """A token-protected HTTP remote that, until told otherwise, never answers."""
    srv = tmp_path / "srv"
    srv.mkdir()
    bare = Path(make_remote(srv, CALC_PROJECT, name="calc"))
    with GitHttpServer(srv, TOKEN) as server:
        server.stall("")
        yield server, bare


def test_a_silent_https_remote_fails_the_run_naming_git_and_the_remote(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A remote that never completes the handshake: the run fails naming git clone and the URL."""
    with SilentServer() as silent:
        url = f"https://127.0.0.1:{silent.port}/calc.git"
        cli = world(tmp_path, url, cli_env, "git_timeout_s = 3\ngit_stall_s = 2\n")
        add_issue(cli, "Add a note")
        log = tmp_path / "daemon.log"
        daemon = cli.daemon(log)
        try:
            runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "failed", 90, daemon, log)
        finally:
            stop_daemon(daemon)
        assert silent.connections >= 2  # each attempt really reached the remote
        settle(lambda: git_processes(str(silent.port)) == [], "free of git")
    error = runs[0]["error"]
    assert f"git clone from {url} did not finish within 3s" in error, error
    assert "execution timeout" not in error


def test_a_stalled_remote_fails_the_run_and_the_next_run_works(
    tmp_path: Path, cli_env: dict[str, str], stalling: tuple[GitHttpServer, Path]
) -> None:
    """An HTTP remote that never answers fails the run on the stall limit; the next run succeeds."""
    server, bare = stalling
    url = server.url("calc.git")
    cli = world(tmp_path, url, cli_env, "git_timeout_s = 120\ngit_stall_s = 2\n")
    add_issue(cli, "Add a note")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(lambda rs: bool(rs) and rs[0]["state"] == "failed", 90, daemon, log)
        assert f"git clone from {url} gave no data for 2s" in runs[0]["error"], runs[0]["error"]
        port = url.split(":")[2].split("/")[0]
        settle(lambda: git_processes(port) == [], "free of git")
        server.stall(None)
        add_issue(cli, "Add another note")
        runs = cli.wait_for(lambda rs: rs[0]["state"] == "succeeded", 90, daemon, log)
    finally:
        stop_daemon(daemon)
    assert git(bare, "rev-parse", "main").strip() == runs[0]["pushed_sha"]


@pytest.mark.timeout(400)
def test_cancel_and_sigterm_end_a_hung_clone_and_the_repo_is_free(
    tmp_path: Path, cli_env: dict[str, str], stalling: tuple[GitHttpServer, Path]
) -> None:
    """A hung clone dies with a cancel and with the daemon's SIGTERM; then the repo runs again."""
    server, bare = stalling
    url = server.url("calc.git")
    port = url.split(":")[2].split("/")[0]
    cli = world(tmp_path, url, cli_env, "git_timeout_s = 600\ngit_stall_s = 600\n")
    add_issue(cli, "Add a note")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        settle(lambda: server.stalled >= 1 and git_processes(port), "hanging in git")
        cli("runs", "cancel", "1")
        cli.wait_for(lambda rs: rs[0]["state"] == "cancelled", 60, daemon, log)
        settle(lambda: git_processes(port) == [], "free of git after the cancel")
        add_issue(cli, "Add another note")  # the repo lock is free: this run reaches git
        settle(lambda: server.stalled >= 2 and git_processes(port), "hanging in git again")
    finally:
        stop_daemon(daemon, timeout_s=SHUTDOWN_S)  # running work gets its grace, then a stop
    settle(lambda: git_processes(port) == [], "free of git after SIGTERM")
    server.stall(None)
    add_issue(cli, "Add a third note")
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(
            lambda rs: sum(r["state"] == "succeeded" for r in rs) == 2, 180, daemon, log
        )
    finally:
        assert stop_daemon(daemon) == 0
    # the run the SIGTERM stopped in git was not cancelled: recovery ran it again
    assert sorted(r["state"] for r in runs) == ["cancelled", "succeeded", "succeeded"]
    done = sorted((r for r in runs if r["state"] == "succeeded"), key=lambda r: r["id"])
    assert git(bare, "rev-parse", "main").strip() == done[-1]["pushed_sha"]
