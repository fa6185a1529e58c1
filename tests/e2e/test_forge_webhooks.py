"""Gitea and GitLab deliveries to ``pipeline run``: what queues a run and what never does.

Polling is hourly here, so only a delivery can queue a run after the start-up
poll. GitLab sends a confidential issue's events as ``Confidential Issue Hook``
(the hook's "Confidential issues events"); they queue the run as ``Issue Hook``
does. Forged, malformed or foreign deliveries queue nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from pipeline.testing.forges import FakeGitea, FakeGitLab, send_webhook
from pipeline.testing.forges.base import webhook_headers

from .forge_world import MAINTAINER, READY, SECRET, SLUG, ForgeWorld, forge_world


def _labelled(world: ForgeWorld, number: int) -> dict[str, object]:
    world.fake.apply_label(SLUG, number, READY, MAINTAINER)
    if isinstance(world.fake, FakeGitLab):
        return world.fake.labeled_webhook(SLUG, number, READY, MAINTAINER)
    assert isinstance(world.fake, FakeGitea)
    return world.fake.labeled_webhook(SLUG, number, MAINTAINER)


def _started(world: ForgeWorld) -> None:
    world.start()
    world.wait("the start-up poll", lambda: any("/issues" in p for p in world.fake.paths("GET")))


@pytest.mark.parametrize("event", ["Issue Hook", "Confidential Issue Hook"])
def test_a_gitlab_label_delivery_queues_the_run(
    tmp_path: Path, cli_env: dict[str, str], event: str
) -> None:
    """A signed label delivery, for an issue or a confidential one, queues its run at once."""
    with forge_world(tmp_path, cli_env, "gitlab", poll_interval_s=3600) as world:
        number = world.issue("Write notes", labelled=False)
        _started(world)
        answer = send_webhook(
            world.webhook_url, event, _labelled(world, number), SECRET, kind="gitlab"
        )
        world.wait("the queued run", world.runs, timeout_s=30)
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert answer.status_code == 202, answer.text
    assert [run.issue_number for run in world.runs()] == [number]


@pytest.mark.parametrize("kind", ["gitea", "gitlab"])
def test_forged_malformed_and_foreign_deliveries_queue_nothing(
    tmp_path: Path, cli_env: dict[str, str], kind: str
) -> None:
    """A wrong secret, no signature, broken JSON, another repo: refused or ignored, no run."""
    event = "issues" if kind == "gitea" else "Issue Hook"
    with forge_world(tmp_path, cli_env, kind, poll_interval_s=3600) as world:
        number = world.issue("Write notes", labelled=False)
        _started(world)
        payload = _labelled(world, number)
        body = json.dumps(payload).encode()
        wrong = webhook_headers(kind, event, "d-1", "not-the-secret", body)
        broken = b'{"action": '
        foreign = json.loads(body)
        where = (
            ("repository", "full_name") if kind == "gitea" else ("project", "path_with_namespace")
        )
        foreign[where[0]][where[1]] = "evil/other"
        answers = [
            httpx.post(world.webhook_url, content=body, headers=wrong, timeout=10).status_code,
            httpx.post(world.webhook_url, content=body, timeout=10).status_code,
            httpx.post(
                world.webhook_url,
                content=broken,
                headers=webhook_headers(kind, event, "d-2", SECRET, broken),
                timeout=10,
            ).status_code,
            send_webhook(world.webhook_url, event, foreign, SECRET, kind=kind).status_code,
        ]
        assert world.stop() == 0, world.log.read_text()[-3000:]
    assert answers == [401, 401, 400, 202]
    assert world.runs() == []
