"""``pipeline run`` against a Gitea or GitLab that stops accepting the daemon's token.

A revoked token makes every poll fail with 401. The humans' channel gets one
notification naming the tracker, the repo and the status; ``/health`` says
``degraded`` and lists the refused repo; once the token is accepted again, a
second notification says so, ``/health`` is clean and the issue labelled
meanwhile is worked on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from .forge_world import SLUG, TOKEN, ForgeWorld, forge_world


def _health(world: ForgeWorld) -> Any:
    return httpx.get(f"http://127.0.0.1:{world.port}/health", timeout=10).json()


def _notices(world: ForgeWorld) -> list[str]:
    return [n.body.decode() for n in world.receiver.received]


def _listings(world: ForgeWorld) -> int:
    with world.fake.lock:
        return sum(r.path.endswith("/issues") and r.method == "GET" for r in world.fake.requests)


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_a_revoked_token_is_told_once_shown_in_health_and_recovers(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    """Token revoked: one notification (tracker, repo, 401), /health degraded with the repo;
    token back: one more notification, /health clean, the waiting issue is done."""
    with forge_world(tmp_path, cli_env, kind) as world:
        world.start()
        world.wait("the first poll", lambda: _listings(world) > 0)
        world.fake.token = "revoked-by-an-admin"
        world.wait("the alarm", lambda: any("401" in n for n in _notices(world)), timeout_s=30)
        [alarm] = _notices(world)
        assert "forge" in alarm and SLUG in alarm
        health = _health(world)
        assert health["status"] == "degraded"
        [refused] = health["trackers_refused"]
        assert (refused["tracker"], refused["slug"], refused["status"]) == ("forge", SLUG, "401")

        number = world.issue("Write notes")
        world.fake.token = TOKEN
        world.wait("the run succeeded", lambda: [r.state for r in world.runs()] == ["succeeded"])
        world.wait("the all-clear", lambda: len(_notices(world)) >= 2, timeout_s=30)
        world.wait("the issue closed", lambda: world.fake.issue(SLUG, number).state == "closed")
        health = _health(world)
        assert world.stop() == 0, world.log.read_text()[-3000:]
    alarm, back = _notices(world)[:2]
    assert "answers again" in back and SLUG in back
    assert health["trackers_refused"] == [] and health["status"] == "ok"
    assert sum("401" in n for n in _notices(world)) == 1


def test_a_repo_the_token_cannot_see_is_told_once_shown_in_health_and_recovers(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The repo out of the token's sight (404 on its ready list): one notification saying the
    repo is missing or the token cannot see it, /health degraded with the repo and 404; back
    in sight, one all-clear and the waiting issue is done."""
    with forge_world(tmp_path, cli_env, "gitlab") as world:
        world.start()
        world.wait("the first poll", lambda: _listings(world) > 0)
        with world.fake.lock:
            hidden = world.fake.repos.pop(SLUG)
        world.wait("the alarm", lambda: any("404" in n for n in _notices(world)), timeout_s=30)
        [alarm] = _notices(world)
        assert "forge" in alarm and SLUG in alarm
        assert "the repo is missing or the token cannot see it" in alarm
        health = _health(world)
        assert health["status"] == "degraded"
        [refused] = health["trackers_refused"]
        assert (refused["tracker"], refused["slug"], refused["status"]) == ("forge", SLUG, "404")

        with world.fake.lock:
            world.fake.repos[SLUG] = hidden
        world.issue("Write notes")
        world.wait("the run succeeded", lambda: [r.state for r in world.runs()] == ["succeeded"])
        world.wait("the all-clear", lambda: len(_notices(world)) >= 2, timeout_s=30)
        health = _health(world)
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert "answers again" in _notices(world)[1] and SLUG in _notices(world)[1]
    assert health["trackers_refused"] == [] and health["status"] == "ok"
    assert sum("404" in n for n in _notices(world)) == 1
