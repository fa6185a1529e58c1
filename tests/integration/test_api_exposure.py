"""Safe to expose: Host allowlist, cross-site writes, sign-in sessions, read protection.

Each promise has its attacker: a DNS-rebinding page (foreign ``Host``), a
cross-site form POST riding the victim's cookie, a reader with no cookie, a
forged or stale cookie, and a read-only session trying to write.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pipeline.config.settings import HttpSettings, SecretRef
from pipeline.http.links import link_base
from pipeline.http.session import COOKIE, cookie_header
from tests.integration.api_harness import AUTH, TOKEN, ApiHarness, running_api

READ_TOKEN = "read-token-77c1"
READS = [
    "/api/runs",
    "/api/runs/1",
    "/api/runs/1/log",
    "/api/repos",
    "/api/escalations",
    "/api/events",
    "/fragments/runs",
    "/fragments/runs/1",
    "/",
    "/runs/1",
    "/repos",
]
OPEN = ["/health", "/health/live", "/health/ready", "/metrics", "/static/style.css", "/login"]


def http_settings(tmp_path: Path, **changes: object) -> HttpSettings:
    token = tmp_path / "api-token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    read = tmp_path / "read-token"
    read.write_text(READ_TOKEN + "\n", encoding="utf-8")
    base = HttpSettings(api_token=SecretRef(file=token), read_token=SecretRef(file=read))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def api(sqlite_url: str, tmp_path: Path) -> Iterator[ApiHarness]:
    """A server with both tokens, public at http://pipeline.example.com."""
    http = http_settings(
        tmp_path, public_url="http://pipeline.example.com", allowed_hosts=("ops.internal",)
    )
    with running_api(sqlite_url, tmp_path, http=http) as harness:
        harness.store.enqueue("alpha")
        yield harness


@pytest.mark.parametrize("host", ["evil.example", "attacker.test:8787", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_refused_before_any_handler(api: ApiHarness, host: str) -> None:
    """A DNS-rebinding page (its own name resolving to us) gets 421 and no data, even signed in."""
    api.sign_in()
    for path in ("/api/runs", "/", "/api/events", "/health"):
        answer = api.client.get(path, headers={"Host": host})
        assert answer.status_code == 421, (path, answer.status_code)
        assert "alpha" not in answer.text and "allowed_hosts" in answer.text


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:1", "localhost", "[::1]:8787", "10.1.2.3", "pipeline.example.com", "OPS.internal"],
)
def test_own_hosts_are_served(api: ApiHarness, host: str) -> None:
    """IP literals, localhost, public_url's host and allowed_hosts are served."""
    assert api.client.get("/health/live", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("path", READS)
def test_reads_without_a_session_are_refused(api: ApiHarness, path: str) -> None:
    """With a read token set, no cookie and no bearer means 401 and no run data."""
    answer = api.client.get(path, headers={"Accept": "text/html"})
    assert answer.status_code == 401
    assert "alpha" not in answer.text


def test_a_refused_page_offers_the_sign_in_form(api: ApiHarness) -> None:
    """A browser sent to a page without a session sees the sign-in form (status 401)."""
    answer = api.client.get("/runs/1", headers={"Accept": "text/html"})
    assert answer.status_code == 401 and 'action="/login"' in answer.text
    assert 'name="next" value="/runs/1"' in answer.text


@pytest.mark.parametrize("path", OPEN)
def test_probes_metrics_and_sign_in_stay_open(api: ApiHarness, path: str) -> None:
    """Health, metrics, static files and the sign-in page need no session."""
    assert api.client.get(path).status_code == 200


@pytest.mark.parametrize(("token", "status"), [(READ_TOKEN, 200), (TOKEN, 200), ("nope", 401)])
def test_bearer_tokens_read(api: ApiHarness, token: str, status: int) -> None:
    """The read token and the API token both read as bearer tokens; another does not."""
    answer = api.client.get("/api/runs", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == status


def test_the_session_cookie_is_httponly_strict_and_per_browser_session(api: ApiHarness) -> None:
    """Signing in sets HttpOnly, SameSite=Strict, no lifetime; Secure for an https public_url."""
    answer = api.client.post("/login", data={"token": READ_TOKEN, "next": "/runs/1"})
    assert answer.status_code == 303 and answer.headers["location"] == "/runs/1"
    cookie = answer.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert attribute in cookie
    assert "Max-Age" not in cookie and "Expires" not in cookie and "Secure" not in cookie
    https = dataclasses.replace(api.settings.http, public_url="https://pipeline.example.com")
    assert "; Secure" in cookie_header(https, "x")
    assert READ_TOKEN not in cookie
    api.client.cookies.set(COOKIE, cookie.split(";")[0].split("=", 1)[1])
    assert api.client.get("/api/runs").status_code == 200


def test_a_wrong_token_does_not_sign_in(api: ApiHarness) -> None:
    """A wrong token answers 401 with the form again and sets no cookie."""
    answer = api.client.post("/login", data={"token": "guess", "next": "/"})
    assert answer.status_code == 401 and "set-cookie" not in answer.headers


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil"])
def test_sign_in_never_redirects_off_site(api: ApiHarness, target: str) -> None:
    """``next`` pointing elsewhere is replaced by ``/`` (no open redirect)."""
    answer = api.client.post("/login", data={"token": TOKEN, "next": target})
    assert answer.status_code == 303 and answer.headers["location"] == "/"


def test_a_write_session_acts_without_pasting_the_token(api: ApiHarness) -> None:
    """Signed in with the API token, a write with the page's CSRF token needs no bearer."""
    csrf = api.sign_in()
    assert csrf
    answer = api.client.post(
        "/api/repos/alpha/freeze", json={"note": "by hand"}, headers={"X-CSRF-Token": csrf}
    )
    assert answer.status_code == 200, answer.text
    repo = api.store.get_repo("alpha")
    assert repo is not None and repo.frozen


def test_a_session_write_without_the_csrf_token_is_refused(api: ApiHarness) -> None:
    """The cookie alone (what a cross-site request could carry) does not write."""
    api.sign_in()
    for headers in ({}, {"X-CSRF-Token": "0" * 32}):
        answer = api.client.post("/api/repos/alpha/freeze", json={}, headers=headers)
        assert answer.status_code == 401
        assert "X-CSRF-Token header is missing or does not match" in answer.json()["error"]
    repo = api.store.get_repo("alpha")
    assert repo is not None and not repo.frozen


def test_a_read_session_cannot_write(api: ApiHarness) -> None:
    """A session signed in with the read token reads but cannot freeze, cancel or retry."""
    csrf = api.sign_in(READ_TOKEN)
    assert csrf == ""  # read sessions get no CSRF token at all
    assert api.client.get("/api/runs").status_code == 200
    for path in ("/api/repos/alpha/freeze", "/api/runs/1/cancel"):
        answer = api.client.post(path, json={}, headers={"X-CSRF-Token": "x"})
        assert answer.status_code == 401
        assert "signed in with the read-only token" in answer.json()["error"]
    assert api.store.get_run(1) is not None and api.store.get_run(1).state == "queued"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_cross_site_form_post_is_refused(api: ApiHarness, headers: dict[str, str]) -> None:
    """A form on another site posting to a write endpoint or /login gets 403, nothing changes."""
    csrf = api.sign_in()
    form = {"note": "pwned"}
    for path in ("/api/repos/alpha/freeze", "/api/runs/1/cancel", "/login", "/logout"):
        answer = api.client.post(path, data=form, headers={**headers, "X-CSRF-Token": csrf})
        assert answer.status_code == 403, (path, answer.status_code)
    repo = api.store.get_repo("alpha")
    assert repo is not None and not repo.frozen
    assert api.store.get_run(1).state == "queued"  # type: ignore[union-attr]


def test_the_own_origin_may_write(api: ApiHarness) -> None:
    """A write from this server's own origin (as addressed, or public_url) is served."""
    csrf = api.sign_in()
    for origin in (api.url, "http://pipeline.example.com"):
        answer = api.client.post(
            "/api/repos/alpha/freeze",
            json={},
            headers={"Origin": origin, "X-CSRF-Token": csrf},
        )
        assert answer.status_code == 200, (origin, answer.text)


@pytest.mark.parametrize(
    "cookie",
    [
        "v1.write.99999999999.00.00",
        "v1.read.1.aa.bb",
        "garbage",
    ],
)
def test_forged_cookies_are_refused(api: ApiHarness, cookie: str) -> None:
    """A made-up or altered cookie reads nothing."""
    api.client.cookies.set(COOKIE, cookie)
    assert api.client.get("/api/runs").status_code == 401


def test_a_cookie_with_non_ascii_bytes_is_refused_not_a_500(api: ApiHarness) -> None:
    """A cookie whose MAC is not ASCII is forged like any other: 401 on a read and a write."""
    cookie = {"Cookie": f"{COOKIE}=v1.write.99999999999.00.".encode() + b"\xe9"}
    assert api.client.get("/api/runs", headers=cookie).status_code == 401
    answer = api.client.post("/api/repos/alpha/freeze", json={}, headers=cookie)
    assert answer.status_code == 401, answer.status_code


def test_an_upgraded_or_stale_cookie_is_refused(api: ApiHarness, tmp_path: Path) -> None:
    """A read cookie relabelled ``write`` is refused; rotating a token ends its sessions."""
    api.sign_in(READ_TOKEN)
    value = api.client.cookies[COOKIE]
    api.client.cookies.clear()
    api.client.cookies.set(COOKIE, value.replace("v1.read.", "v1.write.", 1))
    assert api.client.get("/api/runs").status_code == 401
    api.client.cookies.clear()
    api.client.cookies.set(COOKIE, value)
    assert api.client.get("/api/runs").status_code == 200
    (tmp_path / "read-token").write_text("rotated-token\n", encoding="utf-8")
    assert api.client.get("/api/runs").status_code == 401


def test_sign_out_forgets_the_session(api: ApiHarness) -> None:
    """POST /logout clears the cookie; reads are refused again."""
    api.sign_in()
    assert api.client.post("/logout").status_code == 303
    assert api.client.get("/api/runs").status_code == 401


def test_reads_stay_open_without_a_read_token(sqlite_url: str, tmp_path: Path) -> None:
    """Without a read token the API reads as before (writes still need the API token)."""
    with running_api(sqlite_url, tmp_path) as api:
        assert api.client.get("/api/runs").status_code == 200
        assert api.client.post("/api/repos/alpha/freeze", json={}).status_code == 401
        assert api.client.post("/api/repos/alpha/freeze", json={}, headers=AUTH).status_code == 200


def test_liveness_does_not_ask_the_database(
    api: ApiHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the database unreachable /health/live stays 200; readiness answers 503."""

    def down() -> bool:
        raise OSError("connection refused")

    monkeypatch.setattr(api.store, "ping", down)
    assert api.client.get("/health/live").status_code == 200
    assert api.client.get("/health/ready").status_code == 503
    assert api.client.get("/health").status_code == 503


def test_a_separate_webhook_listener_serves_only_webhooks(sqlite_url: str, tmp_path: Path) -> None:
    """With webhook_listen set, the main listener has no webhooks and the hook one nothing else."""
    from pipeline.http.app import create_webhook_app, serve
    from pipeline.http.metrics import Metrics

    http = http_settings(tmp_path, webhook_listen=("127.0.0.1", 0))

    def handler(tracker: str, headers: object, body: bytes) -> tuple[int, dict[str, str]]:
        return 202, {"tracker": tracker}

    with running_api(
        sqlite_url, tmp_path, http=http, app_kwargs={"webhook_handler": handler}
    ) as api:
        assert api.client.post("/webhooks/gh", content=b"{}").status_code == 404
        hooks = serve(create_webhook_app(api.store, api.settings, handler, Metrics()))
        try:
            with httpx.Client(base_url=hooks.url) as client:
                assert client.post("/webhooks/gh", content=b"{}").json() == {"tracker": "gh"}
                for path in ("/api/runs", "/", "/api/events", "/metrics"):
                    assert client.get(path).status_code == 404
        finally:
            hooks.stop()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"public_url": "https://ci.example.com/afk/"}, "https://ci.example.com/afk"),
        ({"listen_host": "0.0.0.0"}, None),
        ({"listen_host": "::"}, None),
        ({"listen_host": "127.0.0.1", "listen_port": 9000}, "http://127.0.0.1:9000"),
        ({"listen_host": "0.0.0.0", "public_url": "https://x.example"}, "https://x.example"),
    ],
)
def test_links_use_public_url_never_a_wildcard(changes: dict[str, object], expected: str) -> None:
    """Comment links point at public_url; a wildcard listen address is never written."""
    http = dataclasses.replace(HttpSettings(), **changes)  # type: ignore[arg-type]
    assert link_base(http) == expected


def test_an_oversized_sign_in_body_is_refused_unread(api: ApiHarness) -> None:
    """/login is open to anyone: a body past the form's size is 413, never read whole."""
    form = f"token={TOKEN}&next=/&pad=".encode()

    def chunks() -> Iterator[bytes]:
        yield form
        yield from (b"x" * 4096 for _ in range(64))

    answer = api.client.post(
        "/login", content=chunks(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code == 413, answer.status_code
    assert COOKIE not in answer.headers.get("set-cookie", "")


def test_a_declared_oversized_sign_in_body_is_answered_before_it_is_sent(api: ApiHarness) -> None:
    """A Content-Length past the limit is refused at once: the server waits for no byte."""
    host, port = api.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 1000000000\r\n\r\n"
        )
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413"), answer


def test_a_sign_in_form_with_many_fields_is_a_clear_refusal(api: ApiHarness) -> None:
    """A form with more fields than the sign-in form has is a 4xx with the form, not a 500."""
    fields = {f"f{n}": "x" for n in range(20)} | {"token": TOKEN}
    answer = api.client.post("/login", data=fields)
    assert answer.status_code == 400, answer.status_code
    assert 'action="/login"' in answer.text and "set-cookie" not in answer.headers
