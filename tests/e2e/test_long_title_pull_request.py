"""Push mode ``branch`` through ``pipeline run``: the pull request's title fits the forge.

The title is the issue's, with its reference. Gitea and GitLab take an issue title of
255 characters and refuse a pull (merge) request's over 255; GitHub's limit is 256. The
issue's full title plus " (#1)" was refused, after the branch was pushed. Read from
the fake forge: the pull request is opened, its title at most 255 characters, keeping
the reference and the title's start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ENDED
from .forge_world import SLUG, forge_world

LIMIT = 255  # the smallest of the forges' limits on a pull request's title


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_a_pull_request_for_a_longest_title_fits_the_forge(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    title = "Write notes " + "about the service's ports " * 20
    title = title[:LIMIT].strip()
    with forge_world(tmp_path, cli_env, kind) as world:
        with world.cli.config.open("a") as config:
            config.write('[repos.app.push]\nmode = "branch"\n')
        world.start()
        number = world.issue(title)
        world.wait("the pull request", lambda: world.fake.pulls(SLUG))
        world.wait("the run ended", lambda: world.runs()[0].state in ENDED)
        assert world.stop() == 0, world.log.read_text()[-3000:]
        [pull] = world.fake.pulls(SLUG)
    assert len(pull.title) <= LIMIT, pull.title
    assert pull.title.endswith(f" (#{number})"), pull.title
    assert pull.title.startswith("Write notes about the service's ports"), pull.title


def test_a_pull_request_title_closes_no_other_issue(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Title "Fix #2: add notes": merged as proposed (a merge commit's message, a squash's
    subject, Gitea's actionable references of a pull request), the title would close
    issue 2. The pull request still names #2, with no closing keyword before it, and as
    words only (``inert_quote``): no back-link on issue 2 either; its own issue is linked."""
    with forge_world(tmp_path, cli_env, "gitea") as world:
        with world.cli.config.open("a") as config:
            config.write('[repos.app.push]\nmode = "branch"\n')
        world.start()
        number = world.issue("Fix #2: add notes")
        world.wait("the pull request", lambda: world.fake.pulls(SLUG))
        world.wait("the run ended", lambda: world.runs()[0].state in ENDED)
        assert world.stop() == 0, world.log.read_text()[-3000:]
        [pull] = world.fake.pulls(SLUG)
    assert pull.title.replace("\u200b", "") == f"Refs #2: add notes (#{number})", pull.title
    assert "#2" not in pull.title and pull.title.endswith(f" (#{number})"), pull.title
