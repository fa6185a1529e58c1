"""Object shapes the fake GitHub answers with: users, node ids, check runs, commit statuses."""

from __future__ import annotations

import base64
import zlib
from typing import Any

from pipeline.testing.forges.model import FakeCheckRun, FakeStatus


def node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"{kind}{number}".encode()).decode()


def user(login: str) -> dict[str, Any]:
    user_id = zlib.crc32(login.encode()) % 10**6
    return {
        "login": login,
        "id": user_id,
        "node_id": node_id("User", user_id),
        "type": "User",
        "site_admin": False,
    }


def check_run(run: FakeCheckRun, sha: str) -> dict[str, Any]:
    return {
        "id": run.id,
        "head_sha": sha,
        "node_id": node_id("CheckRun", run.id),
        "external_id": "",
        "url": run.details_url,
        "html_url": run.details_url,
        "details_url": run.details_url,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": None,
        "completed_at": None,
        "output": {"title": None, "summary": None},
        "name": run.name,
        "check_suite": {"id": 1},
        "app": {"id": 1, "slug": "ci"},
        "pull_requests": [],
    }


def status(status: FakeStatus, number: int) -> dict[str, Any]:
    return {
        "url": "",
        "avatar_url": None,
        "id": number,
        "node_id": node_id("Status", number),
        "state": status.state,
        "description": status.description,
        "target_url": status.target_url or None,
        "context": status.context,
        "created_at": None,
        "updated_at": None,
    }


def combined_state(statuses: list[FakeStatus]) -> str:
    states = {s.state for s in statuses}
    if states & {"failure", "error"}:
        return "failure"
    if not statuses or "pending" in states:
        return "pending"
    return "success"
