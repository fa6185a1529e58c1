"""Secrets in everything stored or served: masked in the database and over HTTP, on both engines.

Every kind of configured secret gets a sentinel value (all start with ``SNTL``);
an agent-like writer puts them, whole, cut short, URL-encoded and base64 as in
basic auth, into run events, errors, summaries, escalations, freeze reasons and
comments. Nothing of them may reach the database file or tables, the API, the
plain-text log, the event stream or the pages.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from pipeline.agents.base import summarise
from pipeline.config.settings import (
    AgentPreset,
    CiSettings,
    HttpSettings,
    NotifySettings,
    PushSettings,
    RepoSettings,
    SecretRef,
    Settings,
    TrackerSettings,
)
from pipeline.core.masking import clear_secrets, register_settings_secrets
from pipeline.http.app import AppOptions, create_app, serve
from pipeline.store import Run, Store

OWNER = "worker-masking"
SECRETS = {
    "AFK_T_FORGE_TOKEN": "SNTL-forge-token-a1b2c3d4",
    "AFK_T_WEBHOOK_SECRET": "SNTL-webhook-secret-e5f6g7",
    "AFK_T_API_TOKEN": "SNTL-api-token-h8i9j0k1",
    "AFK_T_PUSH_TOKEN": "SNTL-push/token+l2m3n4o5",
    "AFK_T_CI_TOKEN": "SNTL-ci-token-p6q7r8s9",
    "AFK_T_AGENT_KEY": "SNTL-agent-key-t0u1v2w3",
}
NOTIFY_PASSWORD = "SNTL-notify@pass/x4y5z6"
NOTIFY_URLS = f"json://bot:{quote(NOTIFY_PASSWORD, safe='')}@127.0.0.1:9/notify\n"
GIT_CRYPT_KEY = "SNTL-gitcrypt-key-a7b8c9d0"
ALL_VALUES = [*SECRETS.values(), NOTIFY_PASSWORD, GIT_CRYPT_KEY]
BASIC = base64.b64encode(f"x-access-token:{SECRETS['AFK_T_PUSH_TOKEN']}".encode()).decode()
NEEDLES = ("SNTL", BASIC, quote(NOTIFY_PASSWORD, safe=""))


def leaks(text: str) -> list[str]:
    """The needles (any sentinel's start, a basic-auth header, a URL-encoded one) in ``text``."""
    return [needle for needle in NEEDLES if needle in text]


def secret_settings(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings that reference every kind of secret, with the sentinels in place."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    urls = tmp_path / "notify-urls"
    urls.write_text(NOTIFY_URLS)
    key = tmp_path / "git-crypt.key"
    key.write_text(GIT_CRYPT_KEY)
    repo = RepoSettings(
        name="app",
        tracker="gh",
        slug="org/app",
        remote_url="https://git.test/org/app.git",
        workspace="clone",
        git_crypt_key=SecretRef(file=key),
        push=PushSettings(token=SecretRef(env="AFK_T_PUSH_TOKEN")),
        ci=CiSettings(kind="github", token=SecretRef(env="AFK_T_CI_TOKEN")),
    )
    return Settings(
        database_url=database_url,
        volume=tmp_path / "volume",
        http=HttpSettings(api_token=SecretRef(env="AFK_T_API_TOKEN")),
        trackers=(
            TrackerSettings(
                name="gh",
                kind="github",
                token=SecretRef(env="AFK_T_FORGE_TOKEN"),
                webhook_secret=SecretRef(env="AFK_T_WEBHOOK_SECRET"),
            ),
        ),
        agents=(
            AgentPreset(name="claude", kind="claude", api_key=SecretRef(env="AFK_T_AGENT_KEY")),
        ),
        repos=(repo,),
        notify=NotifySettings(urls=SecretRef(file=urls)),
    )


def hostile_texts() -> list[str]:
    """Every sentinel in every form a tool could print it."""
    texts = []
    for value in ALL_VALUES:
        texts.append(f"echo {value}")
        texts.append(summarise("y" * 190 + " " + value))  # cut short by a bounded summary
        texts.append(f"url-encoded {quote(value, safe='')}")
    texts.append(f"curl -H 'Authorization: Basic {BASIC}'")
    texts.append(f"notify {NOTIFY_URLS.strip()}")
    return texts


def write_history(store: Store) -> Run:
    """A run whose events, summary, error, escalation, freeze and comments carry the secrets."""
    store.ensure_repo("app", tracker="gh", slug="org/app")
    queued = store.enqueue("app").run
    run = store.claim_next(OWNER, max_concurrency=5, lease_s=60)
    assert run is not None and run.id == queued.id
    texts = hostile_texts()
    for text in texts:
        store.append_event_fenced(
            run.id,
            OWNER,
            run.attempt,
            "agent",
            text,
            {"output": text, "nested": {"list": [text], text[:40]: 1}},
        )
    store.update_run(
        run.id, OWNER, run.attempt, summary="\n".join(texts), agent_session=ALL_VALUES[0]
    )
    store.add_escalation("app", "blocked", "\n".join(texts), run.id)
    store.claim_side_effect(f"effect:{run.id}", run.id, detail=texts[0])
    store.freeze_repo("app", texts[1], "tester", run.id)
    issue = store.add_local_issue("app", f"title {texts[0]}", body="\n".join(texts))
    store.add_local_comment(issue.id, "\n".join(texts), "afk")
    return store.finish(
        run.id, OWNER, run.attempt, "escalated", error_class="blocked", error="\n".join(texts)
    )


def raw_database(store: Store, database_url: str, tmp_path: Path) -> str:
    """Everything the database holds, as text: SQLite file bytes, or every PostgreSQL row."""
    if store.dialect == "sqlite":
        files = sorted(tmp_path.glob("history.db*"))
        assert files, "no SQLite files"
        return b"".join(f.read_bytes() for f in files).decode("latin-1")
    import psycopg

    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        assert "run_events" in tables
        return "\n".join(
            str(row) for t in tables for row in conn.execute(f'SELECT t::text FROM "{t}" t')
        )


def served(store: Store, settings: Settings, run: Run) -> dict[str, str]:
    """What the API, the log, the pages and the event stream serve about ``run``."""
    handle = serve(create_app(store, settings, AppOptions(sse_poll_s=0.05, sse_keepalive_s=0.2)))
    pages = (
        "/api/runs",
        f"/api/runs/{run.id}",
        f"/api/runs/{run.id}/log",
        f"/runs/{run.id}",
        f"/fragments/runs/{run.id}",
        "/",
        "/repos",
        "/api/repos",
        "/api/escalations",
    )
    try:
        with httpx.Client(base_url=handle.url, timeout=10.0) as client:
            out = {path: client.get(path).text for path in pages}
            assert all(client.get(p).status_code == 200 for p in pages)
            out["/api/events"] = read_stream(client, len(store.run_events(run.id)))
    finally:
        handle.stop()
    return out


def read_stream(client: httpx.Client, count: int) -> str:
    """The event stream from the start until ``count`` messages arrived."""
    seen, lines = 0, []
    with client.stream("GET", "/api/events?after=0") as response:
        for line in response.iter_lines():
            lines.append(line)
            seen += line.startswith("data:")
            if seen >= count:
                break
    return "\n".join(lines)


@pytest.fixture
def settings(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return secret_settings(database_url, tmp_path, monkeypatch)


def test_every_secret_is_stored_masked(
    settings: Settings, store: Store, database_url: str, tmp_path: Path
) -> None:
    """Events, errors, summaries, escalations, freezes and comments reach the database masked."""
    assert register_settings_secrets(settings) == []
    run = write_history(store)
    events = store.run_events(run.id)
    assert len(events) > len(ALL_VALUES) * 3
    assert "***" in events[3].message and "***" in json.dumps(events[3].data)
    assert leaks(repr(events)) == []
    stored = store.get_run(run.id)
    assert stored is not None and stored.error and "***" in stored.error
    assert leaks(repr(stored)) == [] and leaks(repr(store.list_escalations())) == []
    assert leaks(repr(store.list_repos())) == []
    assert leaks(raw_database(store, database_url, tmp_path)) == []


def test_every_secret_is_served_masked(settings: Settings, store: Store) -> None:
    """API, run log, run page, fragments and the event stream hold none of the secrets."""
    register_settings_secrets(settings)
    run = write_history(store)
    bodies = served(store, settings, run)
    for path, body in bodies.items():
        assert leaks(body) == [], path
    for path in (
        f"/api/runs/{run.id}",
        f"/api/runs/{run.id}/log",
        f"/runs/{run.id}",
        "/api/events",
    ):
        assert "***" in bodies[path], path  # the text is there, masked


def test_rows_written_before_a_secret_was_configured_are_served_masked(
    settings: Settings, store: Store
) -> None:
    """History written while a secret was unknown is masked once it is configured."""
    clear_secrets()
    run = write_history(store)
    assert "SNTL" in repr(store.run_events(run.id))  # written in clear: no secret known yet
    register_settings_secrets(replace(settings))
    assert leaks(repr(store.run_events(run.id))) == []
    for path, body in served(store, settings, run).items():
        assert leaks(body) == [], path
