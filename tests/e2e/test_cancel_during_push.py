"""A cancel that arrives while the push is under way: the push finishes and is recorded.

Over HTTP (or SSH) the remote goes on with a push whose client was killed: it has the
whole pack, runs its hooks and moves the branch. A run cancelled mid-push therefore
used to end "cancelled, nothing pushed, retry it" while its commit landed on the
default branch unrecorded; the retry (a new run id, which cannot find that commit as
its own) would implement the issue a second time. Read from outside: the remote, the
run's record, the issue's ending comment.
"""

from __future__ import annotations

import sys
import time
import tomllib
from pathlib import Path

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.git_http import GitHttpServer
from pipeline.testing.gitrepos import git, make_remote

from .conftest import ENDED, Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
TOKEN = "e2e-push-token-Qm4"
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

AGENT = """
import pathlib, sys
wd = pathlib.Path(sys.argv[1])
(wd / "test_mul.py").write_text(
    "import unittest\\nfrom app.calc import mul\\n\\n\\nclass T(unittest.TestCase):\\n"
    "    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n")
with open(wd / "app" / "calc.py", "a") as f:
    f.write("\\n\\ndef mul(a, b):\\n    return a * b\\n")
print("done")
"""

# The remote's pre-receive hook: says the push arrived, then holds it while ``hold`` exists.
HOOK = """#!/bin/sh
cat >/dev/null
touch "{marks}/started"
i=0
while [ -e "{marks}/hold" ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done
exit 0
"""


def _wait(condition: object, what: str, guard_s: float = HANG_GUARD_S) -> None:
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def test_a_cancel_during_the_push_lets_it_finish_and_records_the_commit(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The operator cancels the run while the remote holds its push. The push is not
    killed: it lands, the run records it and ends cancelled (so its ending says the
    commit stays and asks for no retry: tests/integration/test_endings.py). Before, the
    push was killed mid-way, the remote moved the branch all the same, and the run
    ended with nothing recorded as pushed."""
    srv, marks = tmp_path / "srv", tmp_path / "marks"
    srv.mkdir()
    marks.mkdir()
    bare = Path(make_remote(srv, PROJECT, name="calc"))
    initial = git(bare, "rev-parse", "main").strip()
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(HOOK.format(marks=marks))
    hook.chmod(0o755)
    (marks / "hold").touch()
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    cli_env["AFK_E2E_GIT_TOKEN"] = TOKEN
    with GitHttpServer(srv, TOKEN) as server:
        config = local_config(
            tmp_path, server.url("calc.git"), [sys.executable, str(agent), "{workdir}"]
        )
        changes = {"repos": {"calc": {"push": {"token_env": "AFK_E2E_GIT_TOKEN"}}}}
        write_config(config, merged(tomllib.loads(config.read_text()), changes))
        cli = Cli(config, cli_env)
        cli("db", "upgrade")
        cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
        log = tmp_path / "daemon.log"
        daemon = cli.daemon(log)
        try:
            _wait(lambda: (marks / "started").exists(), "the push reached the remote")
            run_id = str(cli.json("runs", "list")[0]["id"])
            cli("runs", "cancel", run_id)

            def cancel_seen() -> bool:
                events = cli.json("runs", "show", run_id)["events"]
                return any("cancel seen" in event["message"] for event in events)

            _wait(cancel_seen, "the daemon saw the cancel")
            # A killed push ends the run at once; give it the chance to, then let the
            # remote finish the push it holds (its client gone or not).
            end = time.monotonic() + 5
            while time.monotonic() < end and cli.json("runs", "list")[0]["state"] not in ENDED:
                time.sleep(0.2)
            (marks / "hold").unlink()
            runs = cli.wait_for(
                lambda rs: rs[0]["state"] in ENDED and "pushed_sha" in rs[0],
                HANG_GUARD_S,
                daemon,
                log,
            )
            shown = cli.json("runs", "show", run_id)
        finally:
            stop_daemon(daemon)
    head = git(bare, "rev-parse", "main").strip()
    assert head != initial, "the remote finished the push it held"
    assert f"Afk-Run: {run_id}" in git(bare, "log", "-1", "--format=%B", "main")
    run = runs[0]
    assert run["state"] == "cancelled", run
    assert run["pushed_sha"] == head, (run, [e["message"] for e in shown["events"]])
