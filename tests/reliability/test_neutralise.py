"""Hostile repo slugs, issue references and branch names are neutralised before any use."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.errors import ConfigError
from pipeline.git.util import branch_name, safe_component
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab
from pipeline.testing.forges.clients import client_for
from pipeline.workspace.workspaces import Workspaces

HOSTILE = [
    "../../etc",
    "..",
    "-rf",
    "foo..bar",
    "refs/heads/main",
    "a/../../b",
    "x.lock",
    "@{-1}",
    "a b\tc",
    "HEAD",
    "~1^2:",
    "/abs/path",
    "\\..\\..\\win",
    "",
]
TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))


def _valid_branch(name: str) -> bool:
    proc = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    return proc.returncode == 0


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(issue_ref=TEXT, run_id=st.integers(0, 10**9))
def test_branch_names_are_valid_refs_under_afk(issue_ref: str, run_id: int) -> None:
    """Whatever the issue reference, the run's branch is a valid ref under afk/."""
    name = branch_name(issue_ref, run_id)
    assert name.startswith("afk/") and ".." not in name and _valid_branch(name), name


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(slug=TEXT, tracker=TEXT)
def test_workspace_dirs_stay_inside_the_volume(tmp_path: Path, slug: str, tracker: str) -> None:
    """A repo's directory is inside <volume>/repos whatever its slug and tracker name."""
    spaces = Workspaces(tmp_path, WorkspaceSettings())
    repo = RepoSettings(name="r", tracker=tracker or "t", slug=slug, remote_url="unused")
    path = spaces.repo_dir(repo).resolve()
    assert spaces.repos_root.resolve() in path.parents
    assert all(part not in ("..", ".", "") for part in path.relative_to(tmp_path.resolve()).parts)


@given(raw=TEXT)
def test_safe_component_is_one_plain_component(raw: str) -> None:
    """A sanitised component has no separator, no '..', and never starts with '-' or '.'."""
    part = safe_component(raw)
    assert part and "/" not in part and "\\" not in part and ".." not in part
    assert not part.startswith(("-", "."))


@pytest.mark.parametrize("cls", [FakeGitHub, FakeGitea, FakeGitLab], ids=lambda c: c.forge)
@pytest.mark.parametrize("slug", ["../../admin/x", "acme/../../users", "a/b?x=1#", "./x"])
def test_trackers_refuse_traversal_slugs_before_sending(cls: type[FakeGitHub], slug: str) -> None:
    """A slug that tries to leave /repos/<owner>/<name> is refused; nothing reaches the forge."""
    fake = cls(token="t")
    with fake:
        client = client_for(fake)
        with pytest.raises(ConfigError):
            client.list_ready(slug)
        assert fake.requests == []
