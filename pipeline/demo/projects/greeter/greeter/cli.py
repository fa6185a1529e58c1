"""The ``greeter`` command: print a greeting."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from greeter.core import greet


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, print the greeting, return the exit code."""
    parser = argparse.ArgumentParser(prog="greeter", description="Print a greeting.")
    parser.add_argument("name", nargs="?", default="world", help="who to greet")
    args = parser.parse_args(argv)
    print(greet(args.name))
    return 0
