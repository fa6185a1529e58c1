"""The sweep benchmark's tree: a node_modules of the asked size and a realistic shape."""

from __future__ import annotations

import posixpath

from benchmarks.sweep import node_modules, summarise


def test_node_modules_holds_exactly_the_asked_entries_nested_scoped_and_linked() -> None:
    """Files and ``.bin`` links add up to the count; packages nest and scope as npm's do."""
    for entries in (1, 31, 32, 33, 5000):
        files, links = node_modules(entries)
        assert len(files) + len(links) == entries
        assert len(set(files) | set(links)) == entries
    files, links = node_modules(5000)
    assert all(path.startswith("node_modules/") for path in [*files, *links])
    assert max(path.count("/node_modules/") for path in files) == 2  # three levels deep
    assert any("/@scope" in path for path in files)
    assert len({posixpath.dirname(path) for path in files}) * 6 < len(files)
    for link, target in links.items():  # each link reaches a file of the tree
        assert link.startswith("node_modules/.bin/")
        assert posixpath.normpath(posixpath.join("node_modules/.bin", target)) in files


def test_the_summary_compares_the_sweep_with_git_round_by_round() -> None:
    """Ratios are medians of per-round ratios; the target is on the sweep's median."""
    samples = {
        "sweep": [0.2, 0.3, 0.4],
        "git_untracked": [0.1, 0.1, 0.4],
        "git_ignored": [0.1, 0.1, 0.1],
        "git_full_walk": [0.4, 0.3, 0.2],
    }
    summary = summarise(samples, entries=50000, directories=7000)
    assert summary["sweep_median_s"] == 0.3 and summary["meets_target"] is True
    assert summary["ratio_sweep_vs_git"] == 2.0  # of 2.0, 3.0, 1.0
    assert summary["ratio_sweep_vs_git_full_walk"] == 1.0  # of 0.5, 1.0, 2.0
    assert summary["sweep_s"] == {"min": 0.2, "median": 0.3, "max": 0.4}
    assert summary["sweep_us_per_entry"] == 6.0
