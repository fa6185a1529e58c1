"""The README stays in sync with the example config and the environment variables."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.config.load import ENV_VARS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _keys(table: dict[str, Any]) -> Iterator[str]:
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _keys(value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                yield from _keys(item)
        else:
            yield key


def test_every_example_option_is_in_the_readme() -> None:
    """Each option the example config documents is named in the README's reference."""
    example = tomllib.loads((ROOT / "config" / "pipeline.example.toml").read_text())
    ignored = {"from", "to", "AGENT_ENV"}  # copy_files entries and an agent env example
    missing = sorted(
        {k for k in _keys(example) if f"`{k}`" not in README and k not in ignored}
        - {k for k in _keys(example) if k.isupper()}
    )
    assert missing == [], f"README does not mention these options: {missing}"


def test_every_environment_variable_is_in_the_readme() -> None:
    """Each PIPELINE_* variable the loader reads is listed in the README."""
    missing = sorted(name for name in ENV_VARS if f"`{name}`" not in README)
    assert missing == []


def test_readme_opens_with_the_two_commands() -> None:
    """The README's first code block is the demo command, then the test command."""
    block = README.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[0] for line in block] == ["scripts/demo", "scripts/test"]
    assert (ROOT / "scripts" / "demo").exists() and (ROOT / "scripts" / "test").exists()


def _documented_commands() -> Iterator[str]:
    """Every ``pipeline …`` the README and the user docs show: in shell blocks and in
    backticks, a span broken across lines joined again."""
    import re

    for path in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
            for line in block.splitlines():
                line = re.sub(r"^\.venv/bin/|\s+#.*$", "", line.strip())
                if line.startswith("pipeline "):
                    yield line
        for span in re.findall(r"`(pipeline [^`]+)`", text):
            yield " ".join(span.split())


def test_every_documented_command_and_option_exists() -> None:
    """Each ``pipeline`` command the docs show names a command the CLI has, and each
    ``--option`` it shows is one that command takes."""
    import argparse

    from pipeline.cli.main import build_parser

    wrong = []
    for shown in _documented_commands():
        parser = build_parser()
        words = shown.replace("[", " ").replace("]", " ").split()[1:]
        while words:  # down the subcommands as far as the words name them
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs or words[0] not in subs[0].choices:
                break
            parser = subs[0].choices[words.pop(0)]
        options = {o for action in parser._actions for o in action.option_strings}
        for word in words:
            option = word.split("=", 1)[0]
            if option.startswith("--") and option not in options:
                wrong.append(f"{shown!r}: {parser.prog} has no {option}")
    assert wrong == []
