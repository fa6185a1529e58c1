"""The shared HTTP edge, paging rules, CI summaries and build_tracker, without a server."""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pipeline.config.settings import SecretRef, TrackerSettings
from pipeline.core.errors import ConfigError, FatalError, RetryableError
from pipeline.testing.forges.clients import ManualClock
from pipeline.trackers import GiteaTracker, GitHubTracker, GitLabTracker, build_tracker
from pipeline.trackers.base import split_slug
from pipeline.trackers.gitea import _next_page as gitea_next
from pipeline.trackers.gitea import summarise_statuses
from pipeline.trackers.github import summarise_ci
from pipeline.trackers.gitlab import next_page as gitlab_next
from pipeline.trackers.http import ForgeHttp, HttpOptions, Page, link_next
from pipeline.trackers.token import TokenHeader

Handler = Callable[[httpx.Request], httpx.Response]


def _http(handler: Handler, clock: ManualClock | None = None, **opts: Any) -> ForgeHttp:
    clock = clock or ManualClock()
    options = HttpOptions(clock=clock.time, sleep=clock.sleep, **opts)
    return ForgeHttp(
        "github",
        "https://forge.test/api",
        {},
        options=options,
        transport=httpx.MockTransport(handler),
    )


def _page(headers: dict[str, str], data: Any, url: str = "https://f.test/x?page=1") -> Page:
    return Page(data, httpx.Headers(headers), url)


def test_retry_after_as_http_date() -> None:
    """A Retry-After given as an HTTP date is turned into seconds from now."""
    clock = ManualClock()
    when = email.utils.formatdate(clock.now + 90, usegmt=True)
    http = _http(lambda r: httpx.Response(429, headers={"retry-after": when}), clock)
    with pytest.raises(RetryableError) as info:
        http.get("/x")
    assert info.value.retry_after_s == pytest.approx(90)
    assert http.not_before == pytest.approx(clock.now + 90)


def test_rate_limit_without_any_header_uses_default_wait() -> None:
    """A bare 429 waits default_rate_wait_s."""
    http = _http(lambda r: httpx.Response(429), default_rate_wait_s=42.0)
    with pytest.raises(RetryableError) as info:
        http.get("/x")
    assert info.value.retry_after_s == 42.0


def test_get_optional_answers_none_on_404() -> None:
    """get_optional reads 404 as an answer, while get raises the caller's kind."""
    http = _http(lambda r: httpx.Response(404, json={"message": "Not Found"}))
    assert http.get_optional("/x") is None
    with pytest.raises(FatalError) as info:
        http.get("/x", not_found="missing_issue")
    assert info.value.kind == "missing_issue" and "Not Found" in str(info.value)


def test_gone_is_the_callers_not_found_kind() -> None:
    """GitHub answers a deleted issue 410 Gone: as a 404, the caller's kind (the issue is gone)."""
    http = _http(lambda r: httpx.Response(410, json={"message": "This issue was deleted"}))
    with pytest.raises(FatalError) as info:
        http.mutate("POST", "/x", {"body": "hi"}, not_found="missing_issue")
    assert info.value.kind == "missing_issue" and "deleted" in str(info.value)


def test_unprocessable_request_is_fatal() -> None:
    """A 422 is a fatal forge_request error carrying the forge's message."""
    http = _http(lambda r: httpx.Response(422, json={"message": "Validation Failed"}))
    with pytest.raises(FatalError) as info:
        http.mutate("POST", "/x", {"a": 1})
    assert info.value.kind == "forge_request" and "Validation Failed" in str(info.value)


def test_endless_pagination_is_cut_off() -> None:
    """A forge that always says 'next' cannot loop the client forever."""
    link = '<https://forge.test/api/x?page=2>; rel="next"'
    http = _http(lambda r: httpx.Response(200, json=[1], headers={"link": link}), max_pages=5)
    with pytest.raises(RetryableError) as info:
        http.collect("/x", {}, link_next)
    assert info.value.kind == "forge_bad_response" and "more than 5 pages" in str(info.value)


def test_exactly_the_page_cap_is_read_whole() -> None:
    """``max_pages`` pages are allowed: only a further page is refused."""

    def handler(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        link = f'<https://forge.test/api/x?page={page + 1}>; rel="next"' if page < 3 else ""
        return httpx.Response(200, json=[page], headers={"link": link})

    assert _http(handler, max_pages=3).collect("/x", {}, link_next) == [1, 2, 3]
    with pytest.raises(RetryableError, match="more than 2 pages"):
        _http(handler, max_pages=2).collect("/x", {}, link_next)


def test_no_token_in_client_repr() -> None:
    """The client's repr shows the forge and URL only."""
    settings = TrackerSettings(name="gh", kind="github")
    client = GitHubTracker(settings, "SENTINEL-abc")
    assert "SENTINEL" not in repr(client) and "api.github.com" in repr(client)
    client.close_client()


def test_link_next_parses_github_link_header() -> None:
    """Link rel=next is followed; a Link without next ends paging."""
    headers = {
        "link": '<https://a.test/r?page=2>; rel="next", <https://a.test/r?page=5>; rel="last"'
    }
    assert link_next(_page(headers, []), {}) == ("https://a.test/r?page=2", {})
    assert link_next(_page({"link": '<https://a.test/r?page=1>; rel="prev"'}, []), {}) is None
    assert link_next(_page({}, []), {}) is None


def test_gitea_paging_uses_total_count_and_detects_a_capped_limit() -> None:
    """Gitea pages end at X-Total-Count, and a capped first page shrinks later requests."""
    params = {"page": "1", "limit": "50"}
    capped = gitea_next(_page({"x-total-count": "25"}, [0] * 10), params)
    assert capped is not None and capped[1]["limit"] == "10" and capped[1]["page"] == "2"
    assert gitea_next(_page({"x-total-count": "25"}, [0] * 5), {"page": "3", "limit": "10"}) is None
    assert gitea_next(_page({}, [0] * 3), {"page": "1", "limit": "10"}) is None
    assert gitea_next(_page({"x-total-count": "9"}, []), params) is None


def test_gitlab_paging_uses_x_next_page() -> None:
    """GitLab pages follow x-next-page and stop when it is empty."""
    params = {"per_page": "100"}
    following = gitlab_next(_page({"x-next-page": "3"}, []), params)
    assert following == ("https://f.test/x", {"per_page": "100", "page": "3"})
    assert gitlab_next(_page({"x-next-page": ""}, []), params) is None


def test_ci_summary_precedence() -> None:
    """Failure beats pending beats success; nothing reported is 'none'."""
    ok_run = {"name": "b", "status": "completed", "conclusion": "success"}
    running = {"name": "t", "status": "in_progress", "conclusion": None}
    failed = {"name": "l", "status": "completed", "conclusion": "failure", "details_url": "u"}
    assert summarise_ci([], [], "w").state == "none"
    assert summarise_ci([ok_run], [], "w").state == "success"
    assert summarise_ci([ok_run, running], [], "w").state == "pending"
    assert summarise_ci([running, failed], [], "w").log_hint == "u"
    errored = {"context": "ci", "state": "error", "target_url": "t"}
    assert summarise_ci([ok_run], [errored], "w").state == "failure"
    assert summarise_statuses([{"context": "c", "status": "warning"}], "w").state == "success"
    assert summarise_statuses([], "w").state == "none"


def test_split_slug() -> None:
    """Slugs need an owner and a name; nested GitLab groups stay in the owner."""
    assert split_slug("a/b") == ("a", "b")
    assert split_slug("g/s/p") == ("g/s", "p")
    with pytest.raises(ConfigError, match="owner/name"):
        split_slug("no-slash")
    with pytest.raises(ConfigError):
        split_slug("../etc/passwd")


def test_build_tracker_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_tracker picks the client by kind and resolves the token from its SecretRef."""
    monkeypatch.setenv("AFK_TEST_TOKEN", "t")
    token = SecretRef(env="AFK_TEST_TOKEN")
    cases = [
        ("github", None, GitHubTracker),
        ("gitlab", None, GitLabTracker),
        ("gitea", "https://git.test", GiteaTracker),
        ("forgejo", "https://f.test/api/v1", GiteaTracker),
    ]
    for kind, base_url, cls in cases:
        client = build_tracker(
            TrackerSettings(name=kind, kind=kind, base_url=base_url, token=token)
        )
        assert isinstance(client, cls)
        client.close_client()


def test_build_tracker_errors_are_actionable() -> None:
    """Unknown kinds, a missing token and Gitea without base_url say what to fix."""
    with pytest.raises(ConfigError, match=r"trackers\.x\.kind"):
        build_tracker(TrackerSettings(name="x", kind="local"))
    with pytest.raises(FatalError, match=r"<env NOPE_TOKEN> is not set") as info:
        build_tracker(TrackerSettings(name="gh", kind="github", token=SecretRef(env="NOPE_TOKEN")))
    assert info.value.kind == "forge_auth"
    with pytest.raises(ConfigError, match="base_url"):
        GiteaTracker(TrackerSettings(name="g", kind="gitea"), "t")


def test_moved_repo_redirect_is_followed() -> None:
    """A 301 for a renamed repo is followed to the new location."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/repos/old/name/issues":
            return httpx.Response(301, headers={"location": "/api/repos/new/name/issues"})
        return httpx.Response(200, json=[{"n": 1}])

    assert _http(handler).get("/repos/old/name/issues").data == [{"n": 1}]


def test_a_write_refused_after_the_token_file_changed_is_sent_again_with_the_new_token(
    tmp_path: Any,
) -> None:
    """A mutation answered 401 is sent once more when the token's file holds another token;
    the new token is in the client's repr nowhere and used for every later call."""
    token_file = tmp_path / "token"
    token_file.write_text("old-token")
    seen: list[str] = []

    def forge(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        ok = request.headers["authorization"] == "token new-token"
        return httpx.Response(200 if ok else 401, json={"ok": ok})

    auth = TokenHeader("Authorization", "token {}", "old-token", SecretRef(file=token_file))
    http = ForgeHttp(
        "gitea",
        "https://forge.test/api",
        {},
        auth=auth,
        transport=httpx.MockTransport(forge),
        options=HttpOptions(mutation_spacing_s=0.0),
    )
    token_file.write_text("new-token\n")
    assert http.mutate("POST", "/repos/a/b/issues/1/labels", {"labels": [1]}).data == {"ok": True}
    assert http.get("/x").data == {"ok": True}
    assert seen == ["token old-token", "token new-token", "token new-token"]
    assert "new-token" not in repr(http) and "new-token" not in repr(auth)
