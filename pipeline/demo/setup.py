"""The world ``pipeline demo`` runs in: two real repositories, a deploy target, three issues.

``build_world(root)`` lays out, all under ``root``::

    pipeline.toml          the daemon's configuration (relative paths, short intervals)
    api-token              the bearer token of the write API
    remotes/greeter.git    bare remote of ``demo/greeter`` (a library + CLI; no CI, no deploy)
    webapp-deploy/         the local deploy target of ``demo/webapp``: its bare
                           ``remote.git``, whose push deploys and restarts the app
    data/                  history database and volume

The projects come from ``pipeline/demo/projects`` (package data). The issues
carry a ``demo-task:`` tag the local demo agent (``pipeline.demo.agent``)
recognises; ``add-version`` is built to pass its tests but break the deploy's
health probe, so the run is followed by a fix-forward that heals it.
"""

from __future__ import annotations

import json
import secrets
import shlex
import sys
from dataclasses import dataclass, field
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from pipeline.testing.deploy_target import DeployTarget
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.ports import free_port

GITIGNORE = "__pycache__/\n*.pyc\n.venv/\n"
TEST_COMMAND_ARGS = ("-m", "unittest", "discover", "-s", "tests", "-q")
TRACKER = "local"
AGENT = "demo"

ISSUES: tuple[dict[str, str], ...] = (
    {
        "repo": "demo/webapp",
        "title": "Add a /version endpoint",
        "body": "Operators want to ask the service which build it runs without reading "
        "the health check. Add `GET /version` answering "
        '`{"version": <deployed commit>, "release": <service.RELEASE>}`.\n\n'
        "demo-task: add-version\n",
    },
    {
        "repo": "demo/greeter",
        "title": "Add a --shout option to the greeter command",
        "body": "`python -m greeter --shout Ada` should print `HELLO, ADA!`. Without the "
        "option the output stays as it is.\n\ndemo-task: add-shout\n",
    },
    {
        "repo": "demo/greeter",
        "title": "Add farewell() to the greeter library",
        "body": "We greet people but never say goodbye. Add `greeter.farewell(name)` "
        "returning `Goodbye, <name>!`, treating a blank name like `greet` does.\n\n"
        "demo-task: add-farewell\n",
    },
)


@dataclass(frozen=True)
class DemoRepo:
    """One enrolled demo repository."""

    name: str  # the [repos.NAME] key
    slug: str  # owner/name on the local tracker; an issue's ``repo``
    remote_url: str  # the bare repository (a local path)


@dataclass
class DemoWorld:
    """Everything ``build_world`` made; ``close()`` stops the deployed app."""

    root: Path
    config_path: Path
    repos: tuple[DemoRepo, ...]
    issues: list[dict[str, str]]
    target: DeployTarget  # the deploy target of demo/webapp
    http_url: str  # where the daemon's HTTP server listens
    api_token_path: Path
    test_command: str
    closed: bool = field(default=False, init=False)

    def repo(self, slug: str) -> DemoRepo:
        return next(r for r in self.repos if r.slug == slug)

    def close(self) -> None:
        """Stop the deployed app (idempotent); the files under ``root`` are kept."""
        if not self.closed:
            self.target.stop()
            self.closed = True


def project_files(name: str) -> dict[str, str]:
    """The files of demo project ``name`` (relative path -> text), plus a .gitignore."""
    base = files("pipeline.demo") / "projects" / name
    if not base.is_dir():
        raise FileNotFoundError(f"demo project {name!r} is missing from the installed package")
    found: dict[str, str] = {".gitignore": GITIGNORE}
    _collect(base, "", found)
    return found


def _collect(node: Traversable, prefix: str, found: dict[str, str]) -> None:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name == "__pycache__" or child.name.endswith(".pyc"):
            continue
        path = f"{prefix}{child.name}"
        if child.is_dir():
            _collect(child, f"{path}/", found)
        else:
            found[path] = child.read_text(encoding="utf-8")


def build_world(root: Path) -> DemoWorld:
    """Create the demo's repositories, deploy target and configuration under ``root``."""
    root = root.absolute()
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root}: the demo needs an empty directory; this one has files")
    (root / "remotes").mkdir(exist_ok=True)
    greeter_url = make_remote(root / "remotes", project_files("greeter"), name="greeter")
    target = DeployTarget.create(root / "webapp-deploy", files=project_files("webapp"))
    try:
        repos = (
            DemoRepo("greeter", "demo/greeter", greeter_url),
            DemoRepo("webapp", "demo/webapp", target.remote_url),
        )
        token_path = root / "api-token"
        token_path.write_text(secrets.token_urlsafe(24) + "\n", encoding="utf-8")
        token_path.chmod(0o600)
        port = free_port()
        test_command = " ".join(shlex.quote(part) for part in (sys.executable, *TEST_COMMAND_ARGS))
        config_path = root / "pipeline.toml"
        config_path.write_text(render_config(repos, target, port, test_command), encoding="utf-8")
    except BaseException:
        target.stop()
        raise
    return DemoWorld(
        root=root,
        config_path=config_path,
        repos=repos,
        issues=[dict(i) for i in ISSUES],
        target=target,
        http_url=f"http://127.0.0.1:{port}",
        api_token_path=token_path,
        test_command=test_command,
    )


def _q(value: str) -> str:
    """A TOML basic string (JSON's escapes are a subset of TOML's)."""
    return json.dumps(value)


def _array(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def render_config(
    repos: tuple[DemoRepo, ...], target: DeployTarget, port: int, test_command: str
) -> str:
    """The daemon's TOML: SQLite history, fast loops, the local tracker and the demo agent."""
    # -P: the checkout (the agent's cwd) must not shadow modules the agent imports.
    agent_argv = (sys.executable, "-P", "-m", "pipeline.demo.agent", "{prompt_file}", "{workdir}")
    head = f"""\
# Written by `pipeline demo`: two local repositories, the local tracker, the demo agent.
database_url = "sqlite:///data/history.db"
volume = "data/volume"
max_concurrency = 2
poll_interval_s = 1

[scheduler]
lease_s = 10
heartbeat_s = 2
sweep_interval_s = 1
claim_interval_s = 0.2
backoff_base_s = 1
backoff_max_s = 5

[workspace]
fetch_debounce_s = 0

[http]
listen = "127.0.0.1:{port}"
api_token_file = "api-token"

[trackers.{TRACKER}]
kind = "local"

[agents.{AGENT}]
kind = "command"
command = {_array(agent_argv)}
idle_timeout_s = 60
exit_grace_s = 2
"""
    return head + "".join(_repo_table(r, target, test_command) for r in repos)


def _repo_table(repo: DemoRepo, target: DeployTarget, test_command: str) -> str:
    table = f"""
[repos.{repo.name}]
tracker = "{TRACKER}"
slug = {_q(repo.slug)}
remote_url = {_q(repo.remote_url)}
test_command = {_q(test_command)}
test_timeout_s = 120
agent = "{AGENT}"
max_fix_iterations = 1
max_fix_forwards = 2
run_timeout_s = 300
"""
    if repo.remote_url != target.remote_url:
        return table
    return (
        table
        + f"""
[repos.{repo.name}.deploy]
initial_delay_s = 0.5
interval_s = 0.5
count = 2
failure_limit = 0
progress_deadline_s = 20

[[repos.{repo.name}.deploy.probes]]
kind = "http"
url = {_q(target.health_url)}
expect_status = 200
json_field = "version"
timeout_s = 2
"""
    )
