"""Each tracker tells the daemon's own comments from others', so a pasted marker counts for nothing.

Over real HTTP against each fake forge: a comment carries ``own`` true when the
token's user wrote it, false when anyone else did, and ``None`` (the marker alone
decides) while the forge will not say who the token's user is, until the client's
own post tells it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.testing.forges import served
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import client_for
from pipeline.trackers.base import carries_mark

SLUG = "acme/widgets"
MARK = "<!-- afk-pipeline:run=7:ended -->"


@pytest.fixture(params=["github", "gitea", "gitlab"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeForge]:
    with served(request.param, SLUG) as forge:
        yield forge


def test_only_the_tokens_own_comment_carries_its_mark(fake: FakeForge) -> None:
    """The stranger's pasted marker is not the daemon's; the token user's comment is."""
    number = fake.add_issue(SLUG, "an issue")
    fake.add_comment(SLUG, number, f"look {MARK}", "mallory")
    fake.add_comment(SLUG, number, f"ended {MARK}", fake.bot)
    stranger, own = client_for(fake).list_comments(SLUG, number)
    assert (stranger.own, own.own) == (False, True)
    assert not carries_mark(stranger, MARK) and carries_mark(own, MARK)


def test_comments_without_markers_cost_no_identity_request(fake: FakeForge) -> None:
    """Comments carrying no marker: the forge is not asked who the token's user is."""
    number = fake.add_issue(SLUG, "an issue")
    fake.add_comment(SLUG, number, "plain words", "mallory")
    client_for(fake).list_comments(SLUG, number)
    assert "/user" not in fake.paths("GET")


def test_a_token_that_cannot_read_its_user_learns_it_from_its_post(fake: FakeForge) -> None:
    """``/user`` refused (a GitHub App's token): unknown, then known from the client's own post."""
    number = fake.add_issue(SLUG, "an issue")
    fake.add_comment(SLUG, number, f"look {MARK}", "mallory")
    fake.inject("^/user$", status=403, body='{"message": "Resource not accessible"}', times=9)
    client = client_for(fake)
    [before] = client.list_comments(SLUG, number)
    assert before.own is None  # the marker alone decides, as without identities
    client.comment(SLUG, number, f"ended {MARK}")
    stranger, own = client.list_comments(SLUG, number)
    assert (stranger.own, own.own) == (False, True)
    assert fake.paths("GET").count("/user") == 1  # a refusal is not asked again
