"""`pipeline run` with every kind of secret configured and an agent that prints them all.

The agent plays the attacker: it knows every secret (they are baked into its
script, as if it had found them) and prints each whole, cut short by the
timeline's bounded summary, URL-encoded and as an HTTP basic-auth header, then
says it is blocked with a secret in its reason, so the run escalates and a
notification goes out. It also prints its own key glued to the CI token, which
starts with the key's last characters: masking the key must not leave the rest
of the token showing. None of it may reach the daemon's log, its database
file, the run log, the run page, the event stream, the frozen evidence or the
notification channel.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx

from pipeline.testing.gitrepos import make_remote
from pipeline.testing.receiver import Receiver

from .conftest import Cli, free_port, stop_daemon

SECRETS = {
    "AFK_E2E_FORGE_TOKEN": "SNTL-e2e-forge-token-4b7c",
    "AFK_E2E_WEBHOOK_SECRET": "SNTL-e2e-webhook-secret-9d2e",
    "AFK_E2E_API_TOKEN": "SNTL-e2e-api-token-1f8a",
    "AFK_E2E_PUSH_TOKEN": "SNTL-e2e-push/token+6c3b",
    "AFK_E2E_CI_TOKEN": "key-2a9f-SNTL-e2e-ci-token-7e5d",  # overlaps the agent key's tail
    "AFK_E2E_AGENT_KEY": "SNTL-e2e-agent-key-2a9f",
}
NOTIFY_PASSWORD = "SNTL-e2e-notify@pass-3c6e"
GIT_CRYPT_KEY = "SNTL-e2e-gitcrypt-key-8d1b"
ALL = [*SECRETS.values(), NOTIFY_PASSWORD, GIT_CRYPT_KEY]
GLUED = SECRETS["AFK_E2E_AGENT_KEY"] + SECRETS["AFK_E2E_CI_TOKEN"].removeprefix("key-2a9f")
BASIC = base64.b64encode(f"x-access-token:{SECRETS['AFK_E2E_PUSH_TOKEN']}".encode()).decode()

AGENT = """
import base64, sys, urllib.parse
secrets = {secrets}
for value in secrets:
    print("echo", value)
    print("y" * 190, value)  # the timeline's 200-character summary cuts it short
    print("encoded", urllib.parse.quote(value, safe=""))
    basic = base64.b64encode(("x-access-token:" + value).encode()).decode()
    print("Authorization: Basic", basic)
print("glued", {glued!r})
print("BLOCKED: the deploy needs", secrets[0], "and", urllib.parse.quote(secrets[3], safe=""),
      "and", {glued!r})
"""

# The agent prints its own key (from its environment) split in time: half, a flush and a
# pause, then the rest; then on a line long enough that the output's kept tail cuts it
# inside the key, followed by another line; and fails, so that tail is the run's error.
SPLIT_AGENT = """
import os, sys, time
key = os.environ["SCRIPTED_API_KEY"]
half = len(key) // 2
sys.stdout.write("split " + key[:half])
sys.stdout.flush()
time.sleep(1.0)
sys.stdout.write(key[half:] + " done\\n")
sys.stdout.flush()
print("x" * (8192 - 12) + key + " past the tail's cut")
print("the last line")
sys.exit(1)
"""


def _needles() -> list[str]:
    """What must appear nowhere: every sentinel's start, and a basic-auth header built on one."""
    return ["SNTL", BASIC, quote(NOTIFY_PASSWORD, safe="")]


def _leaks(text: str) -> list[str]:
    return [needle for needle in _needles() if needle in text]


def _config(tmp_path: Path, port: int, receiver: Receiver, script: str = "") -> Path:
    remote = make_remote(tmp_path, {"README.md": "calc\n"})
    agent = tmp_path / "agent.py"
    agent.write_text(script or AGENT.format(secrets=json.dumps(ALL), glued=GLUED))
    urls = tmp_path / "notify-urls"
    urls.write_text(
        f"json://bot:{quote(NOTIFY_PASSWORD, safe='')}@127.0.0.1:{receiver.port}/notify\n"
    )
    key = tmp_path / "git-crypt.key"
    key.write_text(GIT_CRYPT_KEY)
    config = tmp_path / "pipeline.toml"
    config.write_text(f"""
database_url = "sqlite:///{tmp_path / "history.db"}"
volume = "{tmp_path / "volume"}"
poll_interval_s = 0.5
log_level = "debug"  # the notification's payload reaches the log too
[scheduler]
claim_interval_s = 0.2
[http]
listen = "127.0.0.1:{port}"
api_token_env = "AFK_E2E_API_TOKEN"
[trackers.local]
kind = "local"
token_env = "AFK_E2E_FORGE_TOKEN"
webhook_secret_env = "AFK_E2E_WEBHOOK_SECRET"
[agents.scripted]
kind = "command"
command = [{json.dumps(sys.executable)}, "{agent}"]
api_key_env = "AFK_E2E_AGENT_KEY"
api_key_var = "SCRIPTED_API_KEY"
[repos.calc]
tracker = "local"
slug = "demo/calc"
remote_url = "{remote}"
agent = "scripted"
[repos.calc.push]
token_env = "AFK_E2E_PUSH_TOKEN"
[repos.calc.ci]
token_env = "AFK_E2E_CI_TOKEN"
[repos.vault]
tracker = "local"
slug = "demo/vault"
remote_url = "{remote}"
agent = "scripted"
workspace = "clone"
git_crypt_key_file = "{key}"
[notify]
urls_file = "{urls}"
retries = 0
""")
    (tmp_path / "volume").mkdir()
    return config


def _served(base: str, run_id: int) -> dict[str, str]:
    """The run log, run page, run JSON and the whole event stream, as the daemon serves them."""
    with httpx.Client(base_url=base, timeout=10.0) as client:
        out = {
            path: client.get(path).text
            for path in (
                f"/api/runs/{run_id}/log",
                f"/runs/{run_id}",
                f"/api/runs/{run_id}",
                "/api/runs",
            )
        }
        total = len(client.get(f"/api/runs/{run_id}").json()["events"])
        lines: list[str] = []
        with client.stream("GET", "/api/events?after=0") as response:
            for line in response.iter_lines():
                lines.append(line)
                if sum(x.startswith("data:") for x in lines) >= total:
                    break
        out["/api/events"] = "\n".join(lines)
    return out


def test_no_secret_an_agent_prints_is_stored_or_served(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Every sentinel, in every form, is masked in the log, database, API, SSE, page and notice."""
    cli_env.update(SECRETS)
    port = free_port()
    with Receiver() as receiver:
        cli = Cli(_config(tmp_path, port, receiver), cli_env)
        cli("db", "upgrade")
        cli("issue", "add", "--repo", "calc", "--title", "Deploy it", "--label", "ready-for-agent")
        log = tmp_path / "daemon.log"
        daemon = cli.daemon(log)
        try:
            runs = cli.wait_for(
                lambda rs: bool(rs) and rs[0]["state"] == "escalated", 90, daemon, log
            )
            notices = receiver.wait_for(1, timeout_s=30)
            served = _served(f"http://127.0.0.1:{port}", runs[0]["id"])
        finally:
            assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    assert "***" in served[f"/api/runs/{runs[0]['id']}/log"]
    for where, text in served.items():
        assert _leaks(text) == [], where
    assert notices and "***" in notices[0].body.decode()
    assert [_leaks(n.body.decode()) for n in notices] == [[]] * len(notices)
    assert "***" in log.read_text() and _leaks(log.read_text()) == []
    database = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("history.db*")))
    assert _leaks(database.decode("latin-1")) == []
    manifests = list((tmp_path / "volume" / "frozen").glob("*/manifest.json"))
    assert manifests and _leaks(manifests[0].read_text()) == []
    assert _leaks(cli("runs", "show", str(runs[0]["id"])).stdout) == []


def test_a_key_split_in_time_or_cut_by_the_tail_is_masked(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The agent's key, printed in two flushes or cut by the kept output tail, shows nowhere."""
    cli_env.update(SECRETS)
    port = free_port()
    with Receiver() as receiver:
        cli = Cli(_config(tmp_path, port, receiver, SPLIT_AGENT), cli_env)
        cli("db", "upgrade")
        cli("issue", "add", "--repo", "calc", "--title", "Leak it", "--label", "ready-for-agent")
        log = tmp_path / "daemon.log"
        daemon = cli.daemon(log)
        try:
            runs = cli.wait_for(lambda rs: bool(rs) and bool(rs[0].get("error")), 90, daemon, log)
            served = _served(f"http://127.0.0.1:{port}", runs[0]["id"])
        finally:
            assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    assert "split *** done" in served[f"/api/runs/{runs[0]['id']}/log"]
    assert "***" in runs[0]["error"]
    for where, text in served.items():
        assert _leaks(text) == [], where
    assert _leaks(log.read_text()) == []
    database = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("history.db*")))
    assert _leaks(database.decode("latin-1")) == []
    assert _leaks(cli("runs", "show", str(runs[0]["id"])).stdout) == []
