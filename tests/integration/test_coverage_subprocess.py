"""``scripts/test --cov`` measures the ``python -m pipeline`` processes a test starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from coverage import CoverageData

ROOT = Path(__file__).resolve().parents[2]

# Plays a test: it never imports pipeline itself, it starts the CLI as a user would.
SPAWNER = """
import subprocess, sys
subprocess.run([sys.executable, "-m", "pipeline", "--help"], check=True, capture_output=True)
"""


def _measured_lines(data_dir: Path, module: str) -> dict[str, int]:
    """Per data file: how many lines of ``module`` it recorded."""
    counts = {}
    for path in sorted(data_dir.glob(".coverage.*")):
        data = CoverageData(basename=str(path))
        data.read()
        counts[path.name] = sum(
            len(data.lines(f) or ()) for f in data.measured_files() if f.endswith(module)
        )
    return counts


def test_a_cli_subprocess_is_measured_with_the_project_settings(tmp_path: Path) -> None:
    """The child's own data file holds the CLI's lines; the parent, which never ran it, none."""
    spawner = tmp_path / "spawner.py"
    spawner.write_text(SPAWNER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE")}
    env["COVERAGE_FILE"] = str(tmp_path / "data" / ".coverage")
    (tmp_path / "data").mkdir()
    subprocess.run(
        [sys.executable, "-m", "coverage", "run", "--rcfile", "pyproject.toml", str(spawner)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    counts = _measured_lines(tmp_path / "data", "pipeline/cli/main.py")
    assert len(counts) == 2, counts  # the parent's file and the child's
    assert sorted(counts.values())[0] == 0
    assert sorted(counts.values())[1] > 0
