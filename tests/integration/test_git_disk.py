"""What a failed run leaves on the volume goes first: before any fetch, reset or checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.errors import RetryableError
from pipeline.testing.gitrepos import make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

FILES = {"README.md": "hello\n", ".gitignore": ".venv/\nbuild/\n"}


def spaces(volume: Path) -> Workspaces:
    """Workspaces as a freshly started daemon has them (nothing busy, every fetch due)."""
    return Workspaces(volume, WorkspaceSettings(fetch_debounce_s=0.0))


def prepare(
    ws: Workspaces, repo: RepoSettings, run_id: int, sink: RecordingSink
) -> PreparedWorkspace:
    return ws.prepare(
        repo, run_id=run_id, issue_ref=f"#{run_id}", base_env=dict(os.environ), events=sink
    )


def litter(path: Path) -> None:
    """What a run leaves: an untracked file, an ignored build dir, and a kept .venv."""
    (path / "junk.bin").write_bytes(b"x" * 4096)
    (path / "build").mkdir()
    (path / "build" / "out.o").write_text("obj")
    (path / ".venv").mkdir()
    (path / ".venv" / "made").write_text("kept")


@pytest.fixture
def repo(tmp_path: Path) -> RepoSettings:
    """A repo with a local remote and ``.venv`` as its dependency dir."""
    url = make_remote(tmp_path, FILES, name="app")
    return RepoSettings(
        name="app", tracker="gh", slug="acme/app", remote_url=url, keep_dirs=(".venv",)
    )


def test_a_killed_runs_leftovers_go_before_the_fetch(tmp_path: Path, repo: RepoSettings) -> None:
    """After a crash (no release), the next prepare cleans the slot before it fetches."""
    volume = tmp_path / "volume"
    volume.mkdir()
    first = prepare(spaces(volume), repo, 1, RecordingSink())
    litter(first.path)
    staging = first.path.parent.parent / "mirror.git.tmp-4242"
    (staging / "objects").mkdir(parents=True)
    Path(repo.remote_url).rename(tmp_path / "gone.git")  # the fetch will fail
    sink = RecordingSink()

    with pytest.raises(RetryableError, match="git fetch from"):
        prepare(spaces(volume), repo, 2, sink)

    assert not (first.path / "junk.bin").exists() and not (first.path / "build").exists()
    assert (first.path / ".venv" / "made").read_text() == "kept"
    assert not staging.exists()
    removed = [data for _, message, data in sink.events if "earlier run left in slot-0" in message]
    assert removed == [{"removed": 3}], sink.events


def test_the_names_an_earlier_run_left_are_shown_cut_and_escaped(tmp_path: Path) -> None:
    """The leftovers event shows a name the agent chose cut to 100 characters, its escape
    sequences and line breaks escaped: a 300-character path can neither flood the timeline
    nor steer a terminal."""
    url = make_remote(tmp_path, {**FILES, f"{'d' * 60}/keep.txt": "kept\n"}, name="app")
    repo = RepoSettings(name="app", tracker="gh", slug="acme/app", remote_url=url)
    volume = tmp_path / "volume"
    volume.mkdir()
    first = prepare(spaces(volume), repo, 1, RecordingSink())
    path = f"{'d' * 60}/\x1b]0;owned\x07\x1b[2J\nstill the name{'n' * 220}"
    (first.path / path).write_text("left by the agent")
    sink = RecordingSink()

    prepare(spaces(volume), repo, 2, sink)

    assert len(path) >= 300 and not (first.path / path).exists()
    [message] = [message for _, message, _ in sink.events if "earlier run left in" in message]
    assert message.isprintable(), message
    assert message.endswith(f"left in slot-0: {path[:100]!r}"), message


def test_a_failed_run_is_cleaned_on_release(tmp_path: Path, repo: RepoSettings) -> None:
    """Releasing a failed run's slot deletes what it wrote at once, dependency dirs kept."""
    volume = tmp_path / "volume"
    volume.mkdir()
    workspaces = spaces(volume)
    ws = prepare(workspaces, repo, 1, RecordingSink())
    litter(ws.path)

    workspaces.release(ws, succeeded=False)

    assert sorted(p.name for p in ws.path.iterdir()) == [".git", ".gitignore", ".venv", "README.md"]
