"""The generated benchmarks page: a verdict per target, and the figures that explain them."""

from __future__ import annotations

from benchmarks._report import CONTEXT, TARGETS, render


def test_the_page_gives_each_target_a_verdict_and_shows_the_context_figures() -> None:
    results = {
        "claim": {"ratio_vs_procrastinate": 1.2, "scale_3_vs_1": 0.9, "peer_scale_3_vs_1": 1.05},
        "workspace": None,
    }

    page = render(results, quick=False, start=("abc1234", [0.1, 0.2, 0.3]))

    assert (
        "| claim | throughput / procrastinate (median) (`ratio_vs_procrastinate`) | 1.2 |" in page
    )
    assert "| 3 replicas / 1 replica (`scale_3_vs_1`) | 0.9 | >= 2.0 | NOT met |" in page
    assert (
        "procrastinate's own 3 workers / 1 worker, same machine (`peer_scale_3_vs_1`) | 1.05 |"
        in page
    )
    # A benchmark that printed no JSON line, or was left out, is not measured: no verdict.
    assert "(`floor_ratio_vs_clone_local`) | — |" in page
    assert "(`ratio_vs_clone_local`) | — | <= 0.1 | not measured |" in page


def test_context_figures_are_never_targets() -> None:
    targets = {(name, field) for name, field, *_ in TARGETS}
    assert not targets & {(name, field) for name, field, _ in CONTEXT}
