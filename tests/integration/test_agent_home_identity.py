"""Which identity the agent's git gets is decided without the agent's HOME.

The daemon gives the agent's git a fallback identity when nothing the daemon
trusts names one. The agent's ``~/.gitconfig`` is the agent's to write (its HOME
is kept between runs), so the daemon's git never reads it: an ``include`` there
could name a file only the daemon can read, a FIFO, or a huge file.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.git.run import FALLBACK_EMAIL
from pipeline.run.scope import RunScope
from pipeline.testing.scopes import TreeSpec, scope_for
from pipeline.testing.sinks import RecordingSink
from tests.fakes.project_repo import Project, git, make_project


def _scope(project: Project) -> RunScope:
    """A run's scope on a host with no git identity variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "EMAIL"}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    repo = project.repo()
    spec = TreeSpec(project.root, project.tree, env, project.home)
    return scope_for(1, repo, spec.workspace(repo), RecordingSink())


def test_a_config_the_agent_planted_in_its_home_is_not_read(tmp_path: Path) -> None:
    """The agent's ``~/.gitconfig`` includes a file only the daemon can read, which names
    an identity: the agent still gets the fallback. Before, the daemon's git read the
    included file with the agent's HOME, and its answer depended on what was there."""
    project = make_project(tmp_path)
    hidden = tmp_path / "daemon-only.conf"
    hidden.write_text("[user]\n\temail = read-by-the-daemon@example.invalid\n")
    (project.home / ".gitconfig").write_text(f"[include]\n\tpath = {hidden}\n")
    identity = _scope(project).git_identity()
    assert identity["GIT_COMMITTER_EMAIL"] == FALLBACK_EMAIL
    assert identity["GIT_AUTHOR_EMAIL"] == FALLBACK_EMAIL


def test_an_identity_in_the_repos_config_still_wins(tmp_path: Path) -> None:
    """The repository's own ``user.email`` (config the daemon keeps) needs no fallback."""
    project = make_project(tmp_path)
    git(project.root, "config", "user.email", "repo@example.invalid")
    assert _scope(project).git_identity() == {}
