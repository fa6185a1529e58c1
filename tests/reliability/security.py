"""A full run with sentinel secrets, then a scan of everything the daemon wrote.

The world configures every kind of secret the daemon knows (forge token,
webhook secret, API token, agent API key, push token), some under variable
names that do not look secret. The issues live on the loopback fake GitHub
(``pipeline.testing.forges``), which answers only requests carrying the forge
token: the token is really sent on every request, so a leak would be real.
One repo's run succeeds with an issue whose title and body try shell
injection, path traversal and ref injection; the other repo's deploy probe
prints its whole environment and fails, so the repo is frozen and its
evidence kept. Then the logs, every text in every table, the CLI's views,
the forge's comments and every file of the volume are scanned for the
sentinels, and the agent's environment for any secret but its own key.
"""

from __future__ import annotations

import ast
import sqlite3
import sys
import time
from pathlib import Path

import httpx

from pipeline.testing.forges import FakeGitHub

from .figures import Figures
from .oracle import IssueView, judge
from .world import READY, World, WorldSpec, agent_area, fresh_database, stop

SECRETS = {
    "SENTINEL_FORGE_TOKEN": "sntl-forge-7Hq2c9Zr",
    "FORGE_HOOK": "sntl-hook-9Lx4u1Wd",  # the webhook secret, under a plain name
    "PIPELINE_API_TOKEN": "sntl-api-3Kd8m5Qa",
    "VENDOR_CRED": "sntl-agent-5Pz1y7Nb",  # the agent's API key, under a plain name
    "PUSHER": "sntl-push-2Wv6t3Jk",  # the push token, under a plain name
}
AGENT_KEY = SECRETS["VENDOR_CRED"]
PRINT_ENV_AND_FAIL = "import os, sys; print(sorted(os.environ.items())); sys.exit(1)"
TRACKER = "gh"
MAINTAINER = "maintainer"


def _spec(root: Path, forge_url: str) -> WorldSpec:
    push = {"push": {"token_env": "PUSHER"}}
    probe = {"kind": "command", "command": [sys.executable, "-c", PRINT_ENV_AND_FAIL]}
    broken = {"max_fix_forwards": 0, "deploy": {"interval_s": 0.2, "count": 1, "probes": [probe]}}
    tracker = {
        "kind": "github",
        "base_url": forge_url,
        "token_env": "SENTINEL_FORGE_TOKEN",
        "webhook_secret_env": "FORGE_HOOK",
        "trusted_actors": [MAINTAINER],
    }
    return WorldSpec(
        repos=2,
        tracker=TRACKER,
        config={
            "trackers": {TRACKER: tracker},
            "http": {"api_token_env": "PIPELINE_API_TOKEN"},
            "agents": {"scripted": {"api_key_env": "VENDOR_CRED"}},
            "repos": {"r0": push, "r1": {**broken, **push}},
        },
        agent_env={
            "AGENT_ENV_DUMP": str(agent_area(root) / "agent-env.txt"),
            "AGENT_PRINT_KEY": "1",
        },
    )


def hostile_issue(pwned: Path) -> tuple[str, str]:
    """A title and body that would create files in ``pwned`` if any shell ever saw them."""
    title = (
        f"Fix ../../etc/passwd $(touch {pwned}/t1) `touch {pwned}/t2` foo..bar -rf refs/heads/main"
    )
    body = (
        f"Steps: `touch {pwned}/b1`; touch {pwned}/b2 && echo $(touch {pwned}/b3) | cat\n"
        f"branch: ../../../tmp/x; ref: refs/heads/main; option: --upload-pack=touch {pwned}/b4"
    )
    return title, body


def secret_scan(root: Path, engine: str = "sqlite") -> Figures:
    figures = Figures(
        scenario="security: sentinel secrets, hostile issue text", engine=engine, trials=1
    )
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    forge = FakeGitHub(token=SECRETS["SENTINEL_FORGE_TOKEN"])
    with forge, fresh_database(engine, root) as url:
        world = World(root, url, _spec(root, forge.url))
        world.env.update(SECRETS)
        try:
            _scenario(world, forge, figures)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _file(forge: FakeGitHub, repo: str, title: str, body: str, by: str = MAINTAINER) -> int:
    """An issue on the fake forge, labelled ready by ``by``."""
    forge.set_permission(f"demo/{repo}", MAINTAINER, "write")
    return forge.add_issue(
        f"demo/{repo}", title, body=body, author=by, labels=[READY], labelled_by=by
    )


def _scenario(world: World, forge: FakeGitHub, figures: Figures) -> None:
    pwned = world.root / "pwned"
    pwned.mkdir()
    world.migrate()
    title, body = hostile_issue(pwned)
    hostile = _file(forge, "r0", title, body)
    untrusted = _file(forge, "r0", "Untrusted labeller", "please run", by="mallory")
    broken = _file(forge, "r1", "Change that breaks the deploy", "add a file")
    daemon = world.daemon("daemon")
    try:
        world.wait(lambda: _settled(world), 120, "hostile run succeeds, r1 frozen")
        _http_checks(world, figures)
        time.sleep(1.0)  # a few more polls: the untrusted issue must still be ignored
    except AssertionError as exc:
        figures.lost_issues.append(str(exc).splitlines()[0])
    finally:
        stop(daemon)
    runs = world.runs()
    if any(r.issue_number == untrusted for r in runs):
        figures.misclassified.append("an issue labelled by an untrusted actor was enqueued")
    if any(pwned.iterdir()):
        figures.misclassified.append(f"shell injection: {sorted(p.name for p in pwned.iterdir())}")
    _check_token_sent(forge, figures)
    _check_refs(world, figures, hostile)
    issues = [("r0", hostile, True), ("r0", untrusted, False), ("r1", broken, False)]
    judge(figures, [_view(forge, *i) for i in issues], runs, world.pushes_by_run())
    figures.faults_injected = len(SECRETS)
    texts = {"forge comments": _comments(forge, issues)}
    figures.leaked_secrets.extend(scan(world, runs, texts))
    figures.leaked_secrets.extend(_agent_env_leaks(agent_area(world.root) / "agent-env.txt"))


def _view(forge: FakeGitHub, repo: str, number: int, must_ship: bool) -> IssueView:
    issue = forge.issue(f"demo/{repo}", number)
    comments = tuple(c.body for c in issue.comments)
    return IssueView(repo, number, issue.state == "closed", comments, must_ship)


def _comments(forge: FakeGitHub, issues: list[tuple[str, int, bool]]) -> str:
    return "\n".join(
        c.body for repo, number, _ in issues for c in forge.issue(f"demo/{repo}", number).comments
    )


def _check_token_sent(forge: FakeGitHub, figures: Figures) -> None:
    """The daemon talked to the forge, and every request carried the forge token."""
    if not forge.requests:
        figures.misclassified.append("the daemon never called the forge")
    refused = [f"{r.method} {r.path}" for r in forge.requests if not r.authorized]
    if refused:
        figures.misclassified.append(f"forge requests without the token: {refused[:3]}")


def _settled(world: World) -> bool:
    runs = {r.repo_name: r for r in world.runs()}
    return (
        runs.get("r0") is not None
        and runs["r0"].state == "succeeded"
        and runs.get("r1") is not None
        and runs["r1"].terminal
    )


def _http_checks(world: World, figures: Figures) -> None:
    base = f"http://127.0.0.1:{world.port}"
    with httpx.Client(timeout=10) as client:
        body = b'{"action": "labeled"}'
        for headers in ({}, {"X-Hub-Signature-256": "sha256=" + "0" * 64}):
            answer = client.post(f"{base}/webhooks/{TRACKER}", content=body, headers=headers)
            if answer.status_code not in (401, 403, 404):
                figures.misclassified.append(
                    f"webhook with {headers or 'no signature'} got {answer.status_code}"
                )
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            answer = client.post(f"{base}/api/runs", json={"repo": "r0"}, headers=headers)
            if answer.status_code not in (401, 403):
                figures.misclassified.append(
                    f"API write with {headers or 'no token'} got {answer.status_code}"
                )


def _check_refs(world: World, figures: Figures, hostile: int) -> None:
    """The hostile issue's run pushed to main only, under a branch name of safe characters."""
    from pipeline.testing.gitrepos import git

    refs = git(Path(world.remotes["r0"]), "for-each-ref", "--format=%(refname)").split()
    if refs != ["refs/heads/main"]:
        figures.misclassified.append(f"remote refs after the hostile run: {refs}")
    for run in world.runs():
        if (
            run.issue_number == hostile
            and run.branch
            and (".." in run.branch or run.branch.startswith(("-", "refs/")))
        ):
            figures.misclassified.append(f"unsafe branch name {run.branch!r}")
        if run.worktree and world.root / "volume" not in Path(run.worktree).parents:
            figures.misclassified.append(f"worktree outside the volume: {run.worktree}")


def scan(world: World, runs: list[object], extra: dict[str, str]) -> list[str]:
    """Every place a sentinel appears: logs, database, CLI views, volume files, ``extra``."""
    texts: dict[str, str] = {"daemon log": world.log_text(), **extra}
    texts["database dump"] = dump_database(world.database_url)
    for run in runs:
        run_id = getattr(run, "id")  # noqa: B009
        texts[f"runs show {run_id}"] = world.cli("runs", "show", str(run_id)).stdout
        events = world.store.run_events(run_id)
        texts[f"run {run_id} events"] = "\n".join(f"{e.message} {e.data}" for e in events)
    texts["config show"] = world.cli("config", "show").stdout
    for path in sorted((world.root / "volume").rglob("*")):
        if path.is_file() and not path.is_symlink():
            texts[f"volume file {path.relative_to(world.root)}"] = path.read_bytes().decode(
                "utf-8", errors="replace"
            )
    return [
        f"{name} in {where}"
        for where, text in texts.items()
        for name, value in SECRETS.items()
        if value in text
    ]


def dump_database(url: str) -> str:
    """Every row of every table, as text."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            return "\n".join(
                repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"')
            )
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        return "\n".join(repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"'))


def _agent_env_leaks(dump: Path) -> list[str]:
    """The agent saw its own key (under its variable) and no other secret."""
    if not dump.exists():
        return ["the agent never ran (no environment dump)"]
    leaks: list[str] = []
    for line in dump.read_text().splitlines():
        seen = dict(ast.literal_eval(line))  # repr() of a sorted list of pairs
        for name, value in SECRETS.items():
            holders = [k for k, v in seen.items() if value in v]
            if value == AGENT_KEY:
                holders = [k for k in holders if k != "ANTHROPIC_API_KEY"]
            leaks.extend(f"{name} in the agent's environment as {k}" for k in holders)
    return sorted(set(leaks))
