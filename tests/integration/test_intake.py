"""Polling intake per forge: real tracker clients on fake forges, a real store on both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.intake.lifecycle import marker
from pipeline.testing.forges import FakeGitea, served
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld, WorldKnobs

from .conftest import READY, SLUG, intake_over

OTHER = "acme/other"  # on the forge, not enrolled
UNTRUSTED_KEY = "untrusted:mallory"


@pytest.fixture
def forge_others() -> tuple[str, ...]:
    """A second repo on the forge, for showing that one not enrolled is ignored."""
    return (OTHER,)


@pytest.fixture
def world_knobs() -> WorldKnobs:
    """Polled every 10 s, as the tests advance the clock."""
    return {"poll_interval_s": 10.0}


def untrusted_comments(fake: FakeForge, number: int) -> list[str]:
    tag = marker(UNTRUSTED_KEY)
    return [c.body for c in fake.issue(SLUG, number).comments if tag in c.body]


def queued_numbers(world: IntakeWorld) -> list[int]:
    return sorted(run.issue_number or 0 for run in world.runs())


def test_ready_issues_on_several_pages_are_queued_once(fake: FakeForge, world: IntakeWorld) -> None:
    """Every trusted ready issue over several pages is queued once; a second poll is free."""
    count = 105  # the clients ask for 100 a page
    if isinstance(fake, FakeGitea):
        fake.max_items, count = 10, 25  # a server cap the client discovers
    numbers = [fake.add_issue(SLUG, f"ready {n}", labels=[READY]) for n in range(count)]
    fake.add_issue(SLUG, "not ready", labels=["bug"])
    report = world.intake.poll(fake.forge)
    assert (report.seen, report.enqueued, report.error) == (count, count, None)
    assert queued_numbers(world) == numbers
    assert len([p for p in fake.paths("GET") if p.endswith("/issues")]) >= 2
    spent = fake.rate_used
    again = world.intake.poll(fake.forge)
    assert (again.enqueued, again.unchanged) == (0, 1)
    assert fake.rate_used == spent  # 304s spend no rate limit
    world.restart()  # cold ETag cache: a paid poll, but the store dedupes
    assert world.intake.poll(fake.forge).enqueued == 0
    assert len(world.runs()) == count


def test_pull_requests_and_repos_not_enrolled_are_ignored(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """A labelled PR and a ready issue in a repo that is not enrolled queue nothing."""
    pull = fake.add_pull_request(SLUG, "a PR", labels=[READY])
    fake.add_issue(OTHER, "elsewhere", labels=[READY])
    issue = fake.add_issue(SLUG, "real", labels=[READY])
    report = world.intake.poll(fake.forge)
    assert report.error is None and queued_numbers(world) == [issue]
    assert not any(OTHER in path for path in fake.paths())
    assert fake.issue(SLUG, pull).comments == []
    assert not any(f"/{pull}/" in path for path in fake.paths())  # not even looked at


def test_untrusted_labeller_gets_one_comment_across_polls_and_restarts(
    fake: FakeForge, world: IntakeWorld, tmp_path: Path
) -> None:
    """A label from a user without write access queues nothing and is explained exactly once."""
    number = fake.add_issue(SLUG, "sneaky", labels=[READY], labelled_by="mallory")
    world.intake.poll(fake.forge)
    assert world.runs() == []
    [comment] = untrusted_comments(fake, number)
    assert "@mallory" in comment and READY in comment
    fake.add_issue(SLUG, "trusted", labels=[READY])  # the list changes: a full poll again
    world.clock.advance(10)
    assert world.intake.poll(fake.forge).enqueued == 1
    world.restart()
    world.intake.poll(fake.forge)
    assert len(untrusted_comments(fake, number)) == 1
    # A store that lost its keys still finds the marker on the issue.
    with intake_over(fake, SLUG, f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path / "v2") as fresh:
        fresh.intake.poll(fake.forge)
    assert len(untrusted_comments(fake, number)) == 1


def test_a_label_by_a_configured_trusted_actor_is_queued(
    fake: FakeForge, database_url: str, tmp_path: Path
) -> None:
    """``trusted_actors`` trusts a user the forge gives no write access, without asking it."""
    number = fake.add_issue(SLUG, "by bob", labels=[READY], labelled_by="bob")
    with intake_over(
        fake, SLUG, database_url, tmp_path / "volume", trusted_actors=("bob",)
    ) as built:
        built.intake.poll(fake.forge)
        assert queued_numbers(built) == [number]
        assert not any("permission" in p or "members" in p for p in fake.paths())


def test_a_missing_repo_does_not_stop_the_others_on_its_tracker(
    fake: FakeForge, database_url: str, tmp_path: Path
) -> None:
    """A repo the forge answers 404 for is reported and backed off alone (ADR 33); the next
    repo is still polled and the tracker keeps its pace."""
    number = fake.add_issue(SLUG, "ready", labels=[READY])
    built = IntakeWorld.build(
        database_url,
        tmp_path / "volume",
        {fake.forge: fake},
        [(fake.forge, "acme/gone"), (fake.forge, SLUG)],
    )
    try:
        report = built.intake.poll(fake.forge)
        assert report.error is not None and "acme-gone" in report.error
        assert queued_numbers(built) == [number]
        assert not built.intake.poll(fake.forge).skipped
        assert built.intake.metrics.poll_errors[fake.forge] == 1  # the gone repo waits
        [refused] = built.intake.access.refusals()
        assert (refused.slug, refused.status) == ("acme/gone", "404")
    finally:
        built.close()


def test_an_issue_gone_since_listed_does_not_block_the_rest(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """A 404 for one listed issue skips that issue only; later issues are queued every poll."""
    gone = fake.add_issue(SLUG, "deleted meanwhile", labels=[READY])
    kept = fake.add_issue(SLUG, "still here", labels=[READY])
    events = {"github": "events", "gitea": "timeline", "gitlab": "resource_label_events"}
    fake.inject(rf"/issues/{gone}/{events[fake.forge]}$", status=404, times=100)
    report = world.intake.poll(fake.forge)
    assert (report.seen, report.enqueued) == (2, 1)
    assert queued_numbers(world) == [kept]
    assert world.intake.metrics.poll_errors[fake.forge] == 1


def test_a_name_longer_than_its_column_is_queued_cut_with_a_marker(
    database_url: str, tmp_path: Path
) -> None:
    """A forge's user name may be longer than the 200 characters the store keeps (GitLab
    allows 255): PostgreSQL refused it, so the issue was never queued and every poll
    failed on it ("database unavailable"). It is queued, the name cut with a marker."""
    name = "b" * 250
    with served("gitlab", SLUG, writer=name) as fake:
        number = fake.add_issue(SLUG, "long name", author=name, labels=[READY])
        with intake_over(fake, SLUG, database_url, tmp_path / "v") as world:
            report = world.intake.poll("gitlab")
            assert (report.enqueued, report.error) == (1, None), report
            (run,) = world.runs()
            assert run.issue_number == number and run.requested_by == "b" * 199 + "…"
            assert run.issue_id is not None
            issue = world.store.get_issue(run.issue_id)
            assert issue is not None and issue.author == "b" * 199 + "…"


def test_an_untrusted_long_name_is_explained_once(database_url: str, tmp_path: Path) -> None:
    """The comment's store key holds the labeller's name (GitLab allows 255 characters) and
    the slug: past the key's 300 characters PostgreSQL refused it, and every poll failed
    there. A longer key is kept as its start and a digest: one comment, across polls."""
    name, slug = "m" * 255, "acme-corporation/platform-team/widgets"  # a GitLab subgroup
    with served("gitlab", slug) as fake:
        number = fake.add_issue(slug, "sneaky", labels=[READY], labelled_by=name)
        with intake_over(fake, slug, database_url, tmp_path / "v") as world:
            assert world.intake.poll("gitlab").error is None
            world.restart()  # a full poll again: the key is found, nothing posted twice
            assert world.intake.poll("gitlab").error is None
            assert world.runs() == []
            comments = [c.body for c in fake.issue(slug, number).comments]
            assert len(comments) == 1 and f"@{name}" in comments[0], comments
