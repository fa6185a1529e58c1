"""The ``pipeline`` command: run the daemon, review history, operate repos.

Every command that touches history accepts ``--database-url`` (or
``PIPELINE_DATABASE_URL``); without either it uses the config file's
database, else the embedded SQLite file under the data directory.
Human output is aligned tables; ``--json`` prints machine-readable JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from pipeline import __version__
from pipeline.cli import config as cli_config
from pipeline.cli import escalations as cli_escalations
from pipeline.cli import history
from pipeline.cli import ops as cli_ops
from pipeline.cli import retention as cli_retention
from pipeline.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Handler,
    add_command,
    command_group,
    load,
    new_store,
)
from pipeline.core.errors import ConfigError


def cmd_db_upgrade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.core.masking import redact_url

    settings = load(args)
    store = new_store(settings.database_url)
    try:
        store.upgrade()
    finally:
        store.close()
    if args.json:
        out.write(json.dumps({"database": redact_url(settings.database_url), "current": True}))
        out.write("\n")
    else:
        out.write(f"database {redact_url(settings.database_url)} is at the latest schema\n")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipeline",
        description="afk-pipeline: hand issues labelled ready-for-agent to coding agents.",
        epilog="Run `pipeline COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"afk-pipeline {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")

    db = command_group(top, "db", "database schema")
    history.json_flag(
        add_command(
            db, "upgrade", cmd_db_upgrade, "apply migrations up to the latest schema (idempotent)"
        )
    )

    cli_config.register(top)

    runs = command_group(top, "runs", "review and steer runs")
    history.register_runs(runs)
    history.register_repos(top)
    cli_ops.register(top, runs)
    cli_retention.register(db, runs)
    cli_escalations.register(top)
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the command they were given to, with its usage, not the top level's
        command: argparse.ArgumentParser = getattr(args, "parser", parser)
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:  # `pipeline` alone; a group alone has a handler that says so
        parser.print_help(out)
        return EXIT_OK
    try:
        return handler(args, out, err)
    except ConfigError as exc:
        for problem in exc.problems:
            err.write(f"{problem}\n")
        return EXIT_USAGE
    except CliError as exc:
        err.write(f"pipeline: {exc}\n")
        return EXIT_USAGE
    except LookupError as exc:
        err.write(f"pipeline: {exc.args[0] if exc.args else exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from pipeline.store import describe_db_error

        db_problem = describe_db_error(exc)
        if db_problem is None:
            raise
        url = getattr(args, "database_url", None) or os.environ.get("PIPELINE_DATABASE_URL", "")
        err.write(f"pipeline: database {_redacted(url)} {db_problem}\n")
        return EXIT_FAIL


def _redacted(url: str) -> str:
    from pipeline.core.masking import redact_url

    return redact_url(url) if url else "(configured)"
