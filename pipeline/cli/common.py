"""Pieces every CLI command shares: settings and store from the arguments, errors."""

from __future__ import annotations

import argparse
import getpass
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

from pipeline.config.settings import Settings

if TYPE_CHECKING:
    from pipeline.store import Store

Handler = Callable[[argparse.Namespace, TextIO, TextIO], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
# Run and issue ids are 32-bit in PostgreSQL; a larger one names nothing and must not reach SQL.
MAX_ID = 2**31 - 1


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def record_id(value: str) -> int:
    """An argparse type: a run or issue id, a whole number from 1 to ``MAX_ID``."""
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_ID:
        raise argparse.ArgumentTypeError(f"must be an id from 1 to {MAX_ID}, got {value!r}")
    return int(text)


def common_options(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """``--config`` and ``--database-url``. ``inherited``: a subcommand of a group that has
    them too; given before the subcommand they are kept (argparse would reset them to the
    subcommand's defaults), given after it they win."""
    default = argparse.SUPPRESS if inherited else None
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        help="config file (default: $PIPELINE_CONFIG, else embedded defaults)",
    )
    parser.add_argument(
        "--database-url",
        default=default,
        help="history database (default: $PIPELINE_DATABASE_URL, the config's, "
        "else sqlite under the data directory)",
    )


def add_command(
    sub: Subparsers, name: str, handler: Handler, help_text: str, common: bool = True
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    if common:
        common_options(parser)
    parser.set_defaults(handler=handler, parser=parser)
    return parser


def command_group(top: Subparsers, name: str, help_text: str, **options: Any) -> Subparsers:
    """A group of commands (``pipeline runs``); the group alone is a usage error that
    prints the group's own help, its commands, to stderr."""
    parser = top.add_parser(name, help=help_text, **options)

    def usage(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        parser.print_help(err)
        return EXIT_USAGE

    parser.set_defaults(handler=usage, parser=parser)
    return parser.add_subparsers(dest="sub", metavar="SUB")


def load(args: argparse.Namespace) -> Settings:
    """Settings from ``--config``/``$PIPELINE_CONFIG`` plus env, ``--database-url`` on top
    (checked as ``PIPELINE_DATABASE_URL`` is)."""
    from pipeline.config.load import database_url, load_settings

    settings = load_settings(getattr(args, "config", None))
    url = getattr(args, "database_url", None)
    return replace(settings, database_url=database_url(url, "--database-url")) if url else settings


def known_repo(args: argparse.Namespace, store: Store, repo: str | None) -> None:
    """``--repo``: a repo the config enrolls or the history holds; anything else exits 2,
    never an empty list that looks like an answer."""
    if repo is None:
        return
    known = {r.name for r in load(args).repos} | {r.name for r in store.list_repos()}
    if repo not in known:
        names = ", ".join(sorted(known)) or "none"
        raise CliError(f"--repo {repo}: no such repo (known: {names})")


def open_store(args: argparse.Namespace, *, require_schema: bool = True) -> Store:
    """The history store; the config's secrets are registered, so what it reads is masked."""
    from pipeline.core.masking import redact_url, register_settings_secrets

    settings = load(args)
    register_settings_secrets(settings)
    store = new_store(settings.database_url)
    problem = store.schema_problem() if require_schema else None
    if problem is not None:
        store.close()
        raise CliError(f"{redact_url(settings.database_url)}: {problem}")
    return store


def new_store(url: str) -> Store:
    """``Store(url)``; when the directory of the default SQLite file cannot be made, the
    error says it is the data directory and how to move it."""
    from pipeline.config.door import data_dir_hint
    from pipeline.core.errors import ConfigError
    from pipeline.store import Store

    try:
        return Store(url)
    except ConfigError as exc:
        if not url.startswith("sqlite:///"):
            raise
        hint = data_dir_hint("database_url", Path(url[len("sqlite:///") :]).parent, os.environ)
        raise ConfigError(f"{exc}{hint}") from None


def checked_note(note: str, by: str) -> str:
    """``--note`` of an acknowledgement or an unfreeze, stripped: refused if longer than
    what its record holds next to who did it (``note_room``)."""
    from pipeline.store.escalations import MAX_BY, note_room

    text = note.strip()
    room = note_room(by)
    if len(text) > room:
        raise CliError(
            f"--note: at most {room} characters, got {len(text)} (it is recorded as "
            f"'{by}: NOTE' in {MAX_BY} characters); say it shorter"
        )
    return text


def who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "operator")
