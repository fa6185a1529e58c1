"""Reading a run's tree from the daemon: no link out of it, no FIFO, no endless file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import ConfigError
from pipeline.core.files import UnsafeFile, links_on_the_way, read_inside
from pipeline.run.prompt import instruction_files, load_template


def test_a_link_inside_the_tree_is_followed_and_the_read_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("x" * 10_000)
    (tmp_path / "AGENTS.md").symlink_to("docs/notes.md")
    assert read_inside(tmp_path, tmp_path / "AGENTS.md", 100) == b"x" * 100


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero", "../secret"])
def test_a_link_out_of_the_tree_is_refused(tmp_path: Path, target: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "secret").write_text("token")
    (tree / "AGENTS.md").symlink_to(target)
    with pytest.raises(UnsafeFile, match=r"AGENTS\.md is a link to outside the repository"):
        read_inside(tree, tree / "AGENTS.md", 100)


def test_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").symlink_to("CLAUDE.md")
    (tmp_path / "CLAUDE.md").symlink_to("AGENTS.md")
    found, skipped = instruction_files(tmp_path, tmp_path)
    assert found == []
    assert skipped == ["AGENTS.md is a loop of symlinks", "CLAUDE.md is a loop of symlinks"]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "AGENTS.md")
    with pytest.raises(UnsafeFile, match="not a regular file"):
        read_inside(tmp_path, tmp_path / "AGENTS.md", 100)


def test_instruction_files_name_what_they_skipped(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("Be brief.")
    os.mkfifo(tmp_path / "AGENTS.md")
    found, skipped = instruction_files(tmp_path, tmp_path)
    assert found == [("CLAUDE.md", "Be brief.")]
    assert skipped == ["AGENTS.md is not a regular file"]


def test_links_on_the_way_names_the_first_symlink(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "config").symlink_to("app")
    assert links_on_the_way(tmp_path, Path("config/local.env")) == Path("config")
    assert links_on_the_way(tmp_path, Path("app/new/local.env")) is None


def test_a_repo_template_linked_out_of_the_tree_is_a_config_error(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tmp_path / "secret").write_text("token")
    (tree / "tmpl.txt").symlink_to(tmp_path / "secret")
    repo = RepoSettings(
        name="web", tracker="local", slug="o/web", remote_url="x", prompt_template=Path("tmpl.txt")
    )
    with pytest.raises(ConfigError, match=r"tmpl\.txt is a link to outside the repository"):
        load_template(repo, tree)
