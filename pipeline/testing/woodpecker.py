"""A fake Woodpecker server: the pipelines list of each repo, served on 127.0.0.1.

It answers the one endpoint the Woodpecker CI source reads,
``GET /api/repos/{repo_id}/pipelines`` (newest first; ``page`` and
``perPage`` are not needed by the tests' short lists, so every pipeline is on
page 1). Each pipeline is an object of the server swagger's ``Pipeline``
definition with ``status`` one of its ``StatusValue``; the shape test
(``tests/integration/test_tracker_fake_shapes.py``) checks them against
``tests/fixtures/woodpecker/swagger.json``. Any other path answers 404.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pipeline.testing.receiver import Receiver

# Woodpecker's ``StatusValue`` of a pipeline that has not finished.
UNFINISHED = frozenset({"pending", "running", "blocked", "created"})


class FakeWoodpecker:
    """Pipelines per Woodpecker repo id; ``add`` and ``set_status`` change what is served."""

    def __init__(self) -> None:
        self.server = Receiver(default_status=404)
        self.lock = threading.Lock()
        self.repos: dict[str, list[dict[str, Any]]] = {}
        self._next_id = 1000

    @property
    def url(self) -> str:
        return self.server.url

    def add_repo(self, repo_id: str) -> None:
        with self.lock:
            self.repos.setdefault(repo_id, [])
            self._publish(repo_id)

    def add(self, repo_id: str, sha: str, status: str) -> int:
        """A new push pipeline for commit ``sha``; its number."""
        with self.lock:
            pipelines = self.repos.setdefault(repo_id, [])
            self._next_id += 1
            number = len(pipelines) + 1
            now = int(time.time())
            pipelines.insert(0, _pipeline(self._next_id, number, sha, status, now))
            self._publish(repo_id)
            return number

    def set_status(self, repo_id: str, sha: str, status: str) -> None:
        """Every unfinished pipeline of ``sha`` takes ``status`` (finished when not unfinished)."""
        with self.lock:
            for pipeline in self.repos.get(repo_id, []):
                if pipeline["commit"] == sha and pipeline["status"] in UNFINISHED:
                    pipeline["status"] = status
                    if status not in UNFINISHED:
                        pipeline["finished"] = int(time.time())
            self._publish(repo_id)

    def pipelines(self, repo_id: str) -> list[dict[str, Any]]:
        """What the list endpoint answers for ``repo_id`` now, newest first."""
        with self.lock:
            return [dict(p) for p in self.repos.get(repo_id, [])]

    def _publish(self, repo_id: str) -> None:
        self.server.route("GET", f"/api/repos/{repo_id}/pipelines", self.repos[repo_id])

    def close(self) -> None:
        self.server.close()


def _pipeline(ident: int, number: int, sha: str, status: str, now: int) -> dict[str, Any]:
    return {
        "id": ident,
        "number": number,
        "parent": 0,
        "event": "push",
        "status": status,
        "errors": None,
        "created": now,
        "started": now,
        "finished": 0 if status in UNFINISHED else now,
        "commit": sha,
        "branch": "main",
        "ref": "refs/heads/main",
        "message": f"pipeline {number}\n",
        "author": "alice",
    }
