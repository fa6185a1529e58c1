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
from pathlib import Path
from typing import TextIO

from pipeline import __version__
from pipeline.cli import history
from pipeline.cli import ops as cli_ops
from pipeline.cli.common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Handler,
    add_command,
    load,
)
from pipeline.core.errors import ConfigError


def cmd_db_upgrade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.core.masking import redact_url
    from pipeline.store import Store

    settings = load(args)
    store = Store(settings.database_url)
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


def cmd_config_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.config.load import check_command

    return check_command(args.file or args.config, out, err)


def cmd_config_show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from pipeline.config.load import show_command

    return show_command(args.file or args.config, out, err, as_json=args.json)


def _env_help() -> str:
    try:
        from pipeline.config.load import ENV_VARS
    except ImportError:
        return ""
    lines = ["environment variables:"]
    lines += [f"  {name:<28}{text}" for name, text in sorted(ENV_VARS.items())]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipeline",
        description="afk-pipeline: hand issues labelled ready-for-agent to coding agents.",
        epilog="Run `pipeline COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"afk-pipeline {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")

    db = top.add_parser("db", help="database schema").add_subparsers(dest="sub", metavar="SUB")
    history.json_flag(
        add_command(
            db, "upgrade", cmd_db_upgrade, "apply migrations up to the latest schema (idempotent)"
        )
    )

    cfg_parser = top.add_parser(
        "config",
        help="check or show the configuration",
        epilog=_env_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cfg = cfg_parser.add_subparsers(dest="sub", metavar="SUB")
    check = add_command(
        cfg, "check", cmd_config_check, "validate a config file; exit 2 on problems"
    )
    check.add_argument("file", nargs="?", type=Path, help="config file")
    show = add_command(cfg, "show", cmd_config_show, "print the effective config, secrets redacted")
    show.add_argument("file", nargs="?", type=Path, help="config file")
    show.add_argument("--json", action="store_true", help="print JSON")

    runs = top.add_parser("runs", help="review and steer runs").add_subparsers(
        dest="sub", metavar="SUB"
    )
    history.register_runs(runs)
    history.register_repos(top)
    cli_ops.register(top, runs)
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(out)
        return EXIT_OK if args.command is None else EXIT_USAGE
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
        err.write(f"pipeline: database {_redacted(url)} unavailable: {db_problem}\n")
        return EXIT_FAIL


def _redacted(url: str) -> str:
    from pipeline.core.masking import redact_url

    return redact_url(url) if url else "(configured)"
