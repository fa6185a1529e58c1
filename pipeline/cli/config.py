"""``pipeline config``: check, show and describe the configuration file."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TextIO

from pipeline.cli.common import EXIT_OK, EXIT_USAGE, Subparsers, add_command, command_group
from pipeline.config.settings import Settings
from pipeline.core.errors import ConfigError


def _load(path: Path | None, err: TextIO, database_url: str | None = None) -> Settings | None:
    """The settings, ``database_url`` (``--database-url``) on top as every command has it."""
    from pipeline.config.load import database_url as checked_url
    from pipeline.config.load import load_settings

    try:
        settings = load_settings(path)
        if database_url:
            url = checked_url(database_url, "--database-url")
            settings = dataclasses.replace(settings, database_url=url)
        return settings
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        return None


def check_command(
    path: Path | None,
    out: TextIO,
    err: TextIO,
    static: bool = False,
    database_url: str | None = None,
) -> int:
    """``pipeline config check``: 0 and a summary, or 2 and one line per problem.

    Unless ``static``, what the daemon needs at start is checked too: every
    secret reference resolves and every directory exists or can be created.
    """
    from pipeline.config.door import door_problems
    from pipeline.config.load import DEFAULTS_SOURCE

    settings = _load(path, err, database_url)
    problems = [] if settings is None or static else door_problems(settings)
    for problem in problems:
        print(problem, file=err)
    if settings is None or problems:
        return EXIT_USAGE
    source = settings.source if settings.source is not None else DEFAULTS_SOURCE
    trackers, repos = len(settings.trackers), len(settings.repos)
    print(f"OK: {source}: {_count(trackers, 'tracker')}, {_count(repos, 'repo')}", file=out)
    return EXIT_OK


def show_command(
    path: Path | None,
    out: TextIO,
    err: TextIO,
    as_json: bool = False,
    database_url: str | None = None,
) -> int:
    """``pipeline config show``: the effective settings as a file that loads again."""
    from pipeline.config.render import render_json, render_toml
    from pipeline.config.values import redact

    settings = _load(path, err, database_url)
    if settings is None:
        return EXIT_USAGE
    settings = dataclasses.replace(settings, database_url=redact(settings.database_url))
    out.write(render_json(settings) if as_json else render_toml(settings))
    return EXIT_OK


def schema_command(out: TextIO) -> int:
    """``pipeline config schema``: the file's JSON Schema, for editors and linters."""
    from pipeline.config.load import file_schema

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    schema |= file_schema()
    out.write(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK


def _env_help() -> str:
    from pipeline.config.load import ENV_VARS

    lines = ["environment variables:"]
    lines += [f"  {name:<28}{text}" for name, text in sorted(ENV_VARS.items())]
    return "\n".join(lines)


def register(top: Subparsers) -> None:
    """Add ``config check``, ``config show`` and ``config schema`` to the parser."""
    sub = command_group(
        top,
        "config",
        "check, show or describe the configuration",
        epilog=_env_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check = add_command(
        sub,
        "check",
        lambda a, out, err: check_command(a.file or a.config, out, err, a.static, a.database_url),
        "validate a config file and what it refers to; exit 2 on problems",
    )
    check.add_argument("file", nargs="?", type=Path, help="config file")
    check.add_argument(
        "--static", action="store_true", help="the file only: resolve no secret or directory"
    )
    show = add_command(
        sub,
        "show",
        lambda a, out, err: show_command(
            a.file or a.config, out, err, as_json=a.json, database_url=a.database_url
        ),
        "print the effective config (a file that loads again; secrets only by reference)",
    )
    show.add_argument("file", nargs="?", type=Path, help="config file")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_command(
        sub,
        "schema",
        lambda a, out, err: schema_command(out),
        "print the config file's JSON Schema",
        common=False,
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
