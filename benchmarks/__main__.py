"""Dispatch ``python -m benchmarks <name> [args]`` to ``benchmarks.<name>.main``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def _names() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def main(argv: list[str]) -> int:
    names = _names()
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: python -m benchmarks <name> [--json] [options]")
        print("benchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(f"unknown benchmark {name!r}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"benchmarks.{name}")
    return int(module.main(rest))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
