"""The sweep benchmark runs end to end on a small tree (a smoke test, nothing timed)."""

from __future__ import annotations

import json

import pytest

from benchmarks import sweep


def test_sweep_benchmark_prints_one_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Every side is sampled each round over a real repository; JSON comes last."""
    assert sweep.main(["--json", "--files", "400", "--rounds", "2"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["entries"], summary["rounds"], summary["tracked_files"]) == (400, 2, 300)
    assert summary["directories"] > 400 // 32 * 4
    assert set(summary["git_untracked_s"]) == {"min", "median", "max"}
    assert summary["ratio_sweep_vs_git"] > 0 and summary["ratio_sweep_vs_git_full_walk"] > 0
