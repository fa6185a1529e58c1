"""The README's instructions in the order they work, and no placeholders left in it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
PLACEHOLDERS = re.compile(r"to be described|\bTODO\b|\bTBD\b", re.IGNORECASE)


def _shell_blocks() -> list[list[str]]:
    """The lines of every ```sh block."""
    text = README.read_text(encoding="utf-8")
    return [block.splitlines() for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL)]


def test_the_readme_has_no_placeholders() -> None:
    """No "to be described", TODO or TBD: a section is written or absent."""
    text = README.read_text(encoding="utf-8")
    found = [line for line in text.splitlines() if PLACEHOLDERS.search(line)]
    assert found == []


def test_variables_are_exported_before_config_check_reads_them() -> None:
    """In each shell block, `pipeline config check` comes after the exports it checks for
    (run before them, it reports as unset the variables the next line sets)."""
    for lines in _shell_blocks():
        checks = [n for n, line in enumerate(lines) if "pipeline config check" in line]
        exports = [n for n, line in enumerate(lines) if line.startswith("export ")]
        if checks and exports:
            assert max(exports) < min(checks), "\n".join(lines)
