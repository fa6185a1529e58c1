"""Which paths of a run's tree lie in its kept dependency directories."""

from __future__ import annotations

from pipeline.git.commits import in_keep_dirs

KEEP = (".venv", "node_modules", "vendor/bundle")


def test_a_bare_name_matches_at_any_depth() -> None:
    """``node_modules`` is kept wherever it sits; a name that only starts alike is not."""
    assert in_keep_dirs("node_modules/", KEEP)
    assert in_keep_dirs("web/node_modules/left-pad/index.js", KEEP)
    assert not in_keep_dirs("node_modules_notes.md", KEEP)


def test_a_path_with_a_slash_matches_from_the_root() -> None:
    """``vendor/bundle`` is the root's (it never matched, so new files in it were committed),
    not some other ``vendor/bundle`` deeper down, nor ``vendor`` itself."""
    assert in_keep_dirs("vendor/bundle/ruby/3.2/gems/x.rb", KEEP)
    assert in_keep_dirs("vendor/bundle/", KEEP)
    assert not in_keep_dirs("app/vendor/bundle/x.rb", KEEP)
    assert not in_keep_dirs("vendor/other.rb", KEEP)
