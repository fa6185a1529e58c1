"""Label ids that change under the daemon (Gitea) and trust beyond the first page (GitLab)."""

from __future__ import annotations

import pytest

from pipeline.core.errors import FatalError
from pipeline.testing.forges import FakeGitea, FakeGitLab
from pipeline.testing.forges.clients import client_for

SLUG = "acme/widgets"
READY = "ready-for-agent"
WORKING = "agent-working"


def test_gitea_label_deleted_and_made_again_is_applied_and_removed() -> None:
    """A label an admin deleted and made again (a new id) is still added and removed."""
    fake = FakeGitea(token="t")
    first = fake.add_issue(SLUG, "one", labels=[READY])
    second = fake.add_issue(SLUG, "two", labels=[READY])
    with fake:
        client = client_for(fake)
        client.add_labels(SLUG, first, [WORKING])  # fills the cache with WORKING's id
        client.remove_label(SLUG, first, WORKING)
        fake.delete_label(SLUG, WORKING)
        fake.delete_label(SLUG, READY)
        fake.create_label(SLUG, WORKING)
        fake.create_label(SLUG, READY)
        fake.apply_label(SLUG, second, READY, "admin")
        client.add_labels(SLUG, second, [WORKING])
        client.remove_label(SLUG, second, READY)
    assert fake.issue(SLUG, second).labels == [WORKING]


def test_gitea_label_made_after_the_cache_was_filled_is_removed() -> None:
    """The ready label created after the daemon read the repo's labels is still taken off."""
    fake = FakeGitea(token="t")
    number = fake.add_issue(SLUG, "one")
    with fake:
        client = client_for(fake)
        client.add_labels(SLUG, number, [WORKING])  # reads the labels: no READY yet
        fake.apply_label(SLUG, number, READY, "admin")  # made (and applied) since
        client.remove_label(SLUG, number, READY)
    assert fake.issue(SLUG, number).labels == [WORKING]


def test_gitea_label_the_forge_keeps_refusing_fails_naming_label_and_repo() -> None:
    """A remove the forge refuses after one fresh read of the labels says which label, where."""
    fake = FakeGitea(token="t")
    number = fake.add_issue(SLUG, "one", labels=[READY])
    with fake:
        client = client_for(fake)
        fake.inject(r"/issues/\d+/labels/\d+$", status=422, times=2, method="DELETE")
        with pytest.raises(FatalError) as info:
            client.remove_label(SLUG, number, READY)
    message = str(info.value)
    assert READY in message and SLUG in message
    label_reads = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/labels")]
    assert len(label_reads) == 2  # the first fill, then one refresh; no loop


def test_gitlab_maintainer_beyond_the_first_page_of_members_is_trusted() -> None:
    """A maintainer listed after 100 other matching members is still trusted."""
    fake = FakeGitLab(token="t")
    fake.add_repo(SLUG)
    for n in range(120):  # their usernames contain the maintainer's, so a search finds them first
        fake.set_permission(SLUG, f"dev{n:03d}", "10")
    fake.set_permission(SLUG, "dev", "40")
    fake.set_permission(SLUG, "guest-dev", "10")
    with fake:
        client = client_for(fake)
        assert client.is_trusted(SLUG, "dev")
        assert not client.is_trusted(SLUG, "guest-dev")
        assert not client.is_trusted(SLUG, "dev001")
        assert not client.is_trusted(SLUG, "nobody")
