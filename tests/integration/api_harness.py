"""A real API server on 127.0.0.1 over a real store, for the HTTP tests."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from pipeline.config.settings import HttpSettings, SecretRef, Settings, TrackerSettings
from pipeline.http.app import AppOptions, ServerHandle, create_app, serve
from pipeline.store import Run, Store

TOKEN = "test-token-3f9a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
OWNER = "worker-test"


@dataclass
class ApiHarness:
    store: Store
    handle: ServerHandle
    client: httpx.Client
    settings: Settings

    @property
    def url(self) -> str:
        return self.handle.url

    def claim(self) -> Run:
        """Claim the next queued run as a worker would (it becomes ``preparing``)."""
        run = self.store.claim_next(OWNER, max_concurrency=10, lease_s=60.0)
        assert run is not None, "no run to claim"
        return run

    def sign_in(self, token: str = TOKEN) -> str:
        """Sign the harness client in with ``token``; returns the page's CSRF token ('' if none)."""
        answer = self.client.post("/login", data={"token": token, "next": "/repos"})
        assert answer.status_code == 303, answer.text
        page = self.client.get("/repos").text
        found = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page)
        return found.group(1) if found else ""

    def finish(self, run: Run, state: str = "succeeded", **facts: Any) -> Run:
        """Walk a claimed run through implementing and testing to ``state``."""
        self.store.transition(run.id, OWNER, run.attempt, "implementing")
        if facts:
            self.store.update_run(run.id, OWNER, run.attempt, **facts)
        self.store.append_event_fenced(
            run.id, OWNER, run.attempt, "test", "tests passed", {"tail": "3 passed in 0.1s"}
        )
        return self.store.finish(run.id, OWNER, run.attempt, state)


def make_settings(
    database_url: str, tmp_path: Path, *, token: bool = True, **overrides: Any
) -> Settings:
    token_ref = SecretRef()
    if token:
        token_file = tmp_path / "api-token"
        token_file.write_text(TOKEN + "\n", encoding="utf-8")
        token_ref = SecretRef(file=token_file)
    settings = Settings(
        database_url=database_url,
        volume=tmp_path / "volume",
        http=HttpSettings(api_token=token_ref),
        trackers=(TrackerSettings(name="gh", kind="github"),),
    )
    return replace(settings, **overrides)


@contextmanager
def running_api(
    database_url: str,
    tmp_path: Path,
    *,
    token: bool = True,
    app_kwargs: dict[str, Any] | None = None,
    **overrides: Any,
) -> Iterator[ApiHarness]:
    """A migrated store with repos ``alpha`` and ``beta``, served on a free port."""
    store = Store(database_url)
    store.upgrade()
    store.ensure_repo("alpha", tracker="gh", slug="org/alpha")
    store.ensure_repo("beta", tracker="gh", slug="org/beta")
    settings = make_settings(database_url, tmp_path, token=token, **overrides)
    kwargs = {"sse_poll_s": 0.05, "sse_keepalive_s": 0.2, **(app_kwargs or {})}
    handle = serve(create_app(store, settings, AppOptions(**kwargs)))
    client = httpx.Client(base_url=handle.url, timeout=10.0)
    try:
        yield ApiHarness(store, handle, client, settings)
    finally:
        client.close()
        handle.stop()
        store.close()


@dataclass
class SseMessage:
    id: int | None
    event: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SseReader:
    """Parses an SSE response line by line; remembers comments it saw."""

    lines: Iterator[str]
    comments: list[str] = field(default_factory=list)

    def next_messages(self, count: int, timeout_s: float = 10.0) -> list[SseMessage]:
        """The next ``count`` messages; fails when they do not arrive in time."""
        deadline = time.monotonic() + timeout_s
        found: list[SseMessage] = []
        current: dict[str, str] = {}
        while len(found) < count:
            assert time.monotonic() < deadline, f"only {len(found)} of {count} SSE messages"
            line = next(self.lines)
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
            elif line == "":
                if "event" in current:
                    found.append(
                        SseMessage(
                            int(current["id"]) if "id" in current else None,
                            current["event"],
                            json.loads(current.get("data", "{}")),
                        )
                    )
                current = {}
            else:
                key, _, value = line.partition(":")
                current[key] = value.lstrip(" ")
        return found

    def wait_comment(self, text: str, timeout_s: float = 10.0) -> None:
        """Read until a comment starting with ``text`` arrives."""
        deadline = time.monotonic() + timeout_s
        while not any(c.startswith(text) for c in self.comments):
            assert time.monotonic() < deadline, f"no {text!r} comment; saw {self.comments}"
            line = next(self.lines)
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
