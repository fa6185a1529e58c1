"""Each tracker client against its stateful fake forge, over real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.core.errors import FatalError
from pipeline.testing.forges import FakeGitea, FakeGitHub, FakeGitLab, served
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import client_for

SLUG = "acme/widgets"
READY = "ready-for-agent"
WRITER = {"github": "write", "gitea": "write", "gitlab": "30"}


@pytest.fixture(params=["github", "gitea", "gitlab"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    with served(request.param, SLUG) as forge:
        yield forge


def _issue_gets(fake: FakeForge) -> list[str]:
    return [r.path for r in fake.requests if r.method == "GET" and r.path.endswith("/issues")]


def test_ready_issues_found_across_pages(fake: FakeForge) -> None:
    """Every ready issue is listed even when the forge needs several pages for them."""
    if isinstance(fake, FakeGitea):
        fake.max_items = 10  # the server cap the client must discover
    count = 25 if isinstance(fake, FakeGitea) else 130
    for n in range(count):
        fake.add_issue(SLUG, f"ready {n}", labels=[READY])
    fake.add_issue(SLUG, "not ready", labels=["bug"])
    issues = client_for(fake).list_ready(SLUG)
    assert issues is not None
    assert [i.title for i in issues] == [f"ready {n}" for n in range(count)]  # oldest first
    assert len(_issue_gets(fake)) == (3 if isinstance(fake, FakeGitea) else 2)
    assert all(READY in i.labels and i.state in ("open", "opened") for i in issues)


def test_unchanged_poll_is_304_and_free(fake: FakeForge) -> None:
    """A second poll with nothing changed is answered 304, spends no rate limit, returns None."""
    for n in range(3):
        fake.add_issue(SLUG, f"ready {n}", labels=[READY])
    client = client_for(fake)
    assert client.list_ready(SLUG) is not None
    spent = fake.rate_used
    assert client.list_ready(SLUG) is None
    assert fake.rate_used == spent
    assert fake.requests[-1].status == 304
    fake.add_issue(SLUG, "new one", labels=[READY])
    fresh = client.list_ready(SLUG)
    assert fresh is not None and "new one" in {i.title for i in fresh}


def test_pull_requests_are_ignored(fake: FakeForge) -> None:
    """Pull/merge requests carrying the ready label never come back as issues."""
    fake.add_issue(SLUG, "an issue", labels=[READY])
    fake.add_pull_request(SLUG, "a pull request", labels=[READY])
    issues = client_for(fake).list_ready(SLUG)
    assert issues is not None
    assert [i.title for i in issues] == ["an issue"]
    assert not any(i.is_pull_request for i in issues)


def test_labels_and_comments_land(fake: FakeForge) -> None:
    """Label swaps and comments reach the forge, and read back through the client."""
    number = fake.add_issue(SLUG, "claim me", body="do it", labels=[READY])
    client = client_for(fake)
    client.add_labels(SLUG, number, ["agent-working"])
    client.remove_label(SLUG, number, READY)
    client.remove_label(SLUG, number, "never-there")
    client.comment(SLUG, number, "claimed <!-- afk:run=12:claimed -->")
    assert fake.issue(SLUG, number).labels == ["agent-working"]
    comments = client.list_comments(SLUG, number)
    assert [c.body for c in comments] == ["claimed <!-- afk:run=12:claimed -->"]
    assert comments[0].author == fake.bot
    detail = client.get_issue(SLUG, number)
    assert (detail.title, detail.body, detail.author) == ("claim me", "do it", "alice")
    assert detail.labels == ("agent-working",) and len(detail.comments) == 1


def test_close_posts_comment_then_closes(fake: FakeForge) -> None:
    """close() leaves the commit comment on the issue and closes it."""
    number = fake.add_issue(SLUG, "finish me", labels=["agent-working"])
    client_for(fake).close(SLUG, number, "Shipped in abc1234.")
    issue = fake.issue(SLUG, number)
    assert issue.state == "closed"
    assert [c.body for c in issue.comments] == ["Shipped in abc1234."]


def test_labeller_is_the_last_to_apply_the_label(fake: FakeForge) -> None:
    """The labeller is whoever applied the label most recently, not the first or a remover."""
    number = fake.add_issue(SLUG, "relabelled", labels=[READY], labelled_by="mallory")
    fake.unlabel(SLUG, number, READY, "mallory")
    fake.apply_label(SLUG, number, READY, "trusty")
    fake.apply_label(SLUG, number, "other", "mallory")
    client = client_for(fake)
    assert client.labeller(SLUG, number, READY) == "trusty"
    assert client.labeller(SLUG, number, "never") is None


def test_trust_from_configuration_and_permission(fake: FakeForge) -> None:
    """Configured actors are trusted; others only with write permission where the forge says."""
    fake.set_permission(SLUG, "writer", WRITER[fake.forge])
    fake.set_permission(SLUG, "reader", "read" if fake.forge != "gitlab" else "20")
    client = client_for(fake, trusted_actors=("configured",))
    assert client.is_trusted(SLUG, "configured")
    assert client.is_trusted(SLUG, "writer")
    assert not client.is_trusted(SLUG, "reader")
    assert not client.is_trusted(SLUG, "stranger")
    strict = client_for(fake, trusted_actors=("configured",), trust_write_permission=False)
    assert not strict.is_trusted(SLUG, "writer")


def test_untrusted_labeller_flow(fake: FakeForge) -> None:
    """A label by an untrusted actor is detectable and can be answered with one comment."""
    number = fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="stranger")
    client = client_for(fake)
    actor = client.labeller(SLUG, number, READY)
    assert actor == "stranger" and not client.is_trusted(SLUG, actor)
    marker = "<!-- afk:untrusted -->"
    for _ in range(2):  # a restart repeats the check; the marker stops a second comment
        if not any(marker in c.body for c in client.list_comments(SLUG, number)):
            client.comment(SLUG, number, f"Ignored: {actor} may not queue work. {marker}")
    assert len(fake.issue(SLUG, number).comments) == 1


def test_missing_repo_is_fatal(fake: FakeForge) -> None:
    """Listing a repo the forge does not have fails with missing_repo, naming the URL."""
    with pytest.raises(FatalError) as info:
        client_for(fake).list_ready("acme/nope")
    assert info.value.kind == "missing_repo"
    assert "nope" in str(info.value)


def test_wrong_token_is_forge_auth(fake: FakeForge) -> None:
    """A rejected token is a fatal forge_auth error."""
    with pytest.raises(FatalError) as info:
        client_for(fake, token="wrong").list_ready(SLUG)
    assert info.value.kind == "forge_auth"


def test_ci_state_for_a_commit(fake: FakeForge) -> None:
    """CI for a SHA reads none, then pending, then failure with a log hint."""
    client = client_for(fake)
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert client.commit_ci_state(SLUG, sha).state == "none"
    if isinstance(fake, FakeGitLab):
        fake.add_pipeline(SLUG, sha, "running")
        assert client.commit_ci_state(SLUG, sha).state == "pending"
        fake.add_pipeline(SLUG, sha, "failed")
    else:
        fake.add_status(SLUG, sha, "ci/build", "pending")
        assert client.commit_ci_state(SLUG, sha).state == "pending"
        fake.add_status(SLUG, sha, "ci/test", "failure", "https://ci.test/logs/9")
    state = client.commit_ci_state(SLUG, sha)
    assert state.state == "failure"
    assert state.log_hint.startswith("https://ci.test/")
    assert state.details


def test_github_check_runs_and_statuses_combine() -> None:
    """On GitHub a green status does not hide a failed check run, and all-green is success."""
    fake = FakeGitHub(token="t")
    with fake:
        client = client_for(fake)
        fake.add_status(SLUG, "a1", "ci/legacy", "success")
        fake.add_check_run(SLUG, "a1", "build", "completed", "success")
        assert client.commit_ci_state(SLUG, "a1").state == "success"
        fake.add_check_run(SLUG, "a1", "lint", "in_progress")
        assert client.commit_ci_state(SLUG, "a1").state == "pending"
        fake.add_check_run(SLUG, "a1", "test", "completed", "timed_out")
        assert client.commit_ci_state(SLUG, "a1").state == "failure"


def test_gitlab_canceled_pipeline_is_no_failure() -> None:
    """A pipeline GitLab canceled (a newer push superseded it) is cancelled, not failure."""
    fake = FakeGitLab(token="t")
    with fake:
        client = client_for(fake)
        fake.add_pipeline(SLUG, "a1", "canceled")
        assert client.commit_ci_state(SLUG, "a1").state == "cancelled"


def test_github_enterprise_base_url() -> None:
    """A GitHub Enterprise ``/api/v3`` base URL is honoured."""
    fake = FakeGitHub(token="t", api_prefix="/api/v3")
    fake.add_issue(SLUG, "on ghe", labels=[READY])
    with fake:
        issues = client_for(fake).list_ready(SLUG)
    assert issues is not None and [i.title for i in issues] == ["on ghe"]


def test_gitea_labels_go_by_id_and_missing_ones_are_created() -> None:
    """Gitea receives label ids, and a label the repo lacks is created first."""
    fake = FakeGitea(token="t")
    number = fake.add_issue(SLUG, "x", labels=[READY])
    with fake:
        client_for(fake).add_labels(SLUG, number, ["brand-new"])
    posts = [r.path for r in fake.requests if r.method == "POST"]
    assert posts == [f"/repos/{SLUG}/labels", f"/repos/{SLUG}/issues/{number}/labels"]
    assert fake.issue(SLUG, number).labels == [READY, "brand-new"]


def test_gitlab_nested_group_and_system_notes() -> None:
    """GitLab projects in nested groups work, and system notes are not comments."""
    fake = FakeGitLab(token="t")
    slug = "group/sub/project"
    number = fake.add_issue(slug, "nested", labels=[READY])
    fake.add_comment(slug, number, "a human note", "bob")
    with fake:
        client = client_for(fake)
        issues = client.list_ready(slug)
        comments = client.list_comments(slug, number)
    assert issues is not None and [i.number for i in issues] == [number]
    assert [c.body for c in comments] == ["a human note"]
