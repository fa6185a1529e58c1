"""The example config's comments tell the truth about defaults.

Each option in ``config/pipeline.example.toml`` is compared with what the code
does when the option is left out (the effective settings of a minimal file):
a default the comments state as a value (``Default: 30.``, ``"omit" (default)``)
must be the code's, and an option whose example value is not the default must
say what the default is (or that it is required), so no reader takes an example
for a default.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.load import load_settings
from pipeline.config.render import to_file

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "pipeline.example.toml"

# The least a file must say for each kind of table the example shows; what it
# says is required, so it is not compared.
MINIMAL = """
[trackers.github]
kind = "github"
[agents.claude]
[agents.codex]
[agents.aider]
kind = "command"
command = ["aider"]
[repos.web]
tracker = "github"
slug = "example/web"
[[repos.web.deploy.probes]]
kind = "http"
url = "https://web.example.com/healthz"
[[repos.web.deploy.probes]]
kind = "command"
command = ["true"]
[repos.notes]
tracker = "local"
slug = "me/notes"
remote_url = "repos/notes.git"
"""
# Tables whose keys are free (environment variables, a preset's options).
FREE_TABLES = {"env", "agent_options"}
# [budgets] is folded into each repository: its defaults are the repos' budgets.
FOLDED = {
    ("budgets", "default_max_run_usd"): ("repos", "web", "max_budget_usd"),
    ("budgets", "default_daily_usd_per_repo"): ("repos", "web", "daily_budget_usd"),
}
UNSET = object()
_LITERAL = re.compile(r'"[^"]*"|\[[^\]]*\]|-?\d+(?:\.\d+)?(?![\w.]*\w)|true\b|false\b')


@dataclass(frozen=True)
class Option:
    """One ``key = value`` line of the example (or ``# key = value``) and its comment."""

    path: tuple[str | int, ...]
    key: str
    comment: str
    commented_out: bool
    line: int

    @property
    def where(self) -> str:
        return f"{EXAMPLE.name}:{self.line}: {'.'.join(map(str, (*self.path, self.key)))}"


def example_options(text: str) -> list[Option]:
    """Every option line with the comment lines right above it (a blank line ends a comment)."""
    options: list[Option] = []
    path: tuple[str | int, ...] = ()
    counts: dict[tuple[str, ...], int] = {}
    block: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.fullmatch(r"(\[\[?)([\w.]+)\]\]?", line)
        option = re.fullmatch(r"(# ?)?(\w+) = .+", line)
        if header:
            parts = tuple(header.group(2).split("."))
            path = parts
            if header.group(1) == "[[":
                counts[parts] = counts.get(parts, -1) + 1
                path = (*parts, counts[parts])
            block = []
        elif option:
            options.append(Option(path, option.group(2), " ".join(block), bool(option[1]), number))
            block = []
        elif line.startswith("#"):
            block.append(line.lstrip("#").strip())
        else:
            block = []
    return options


def stated_defaults(comment: str) -> tuple[list[Any], bool]:
    """The defaults a comment states as TOML values, and whether it speaks of a default at all."""
    literals = [m.group(1) for m in re.finditer(r'("[^"]*") \(default\b', comment)]
    for found in re.finditer(r"\b[Dd]efault:\s*", comment):
        literal = _LITERAL.match(comment, found.end())
        if literal is not None:
            literals.append(literal.group(0))
    values = []
    for literal in literals:
        try:
            values.append(tomllib.loads(f"v = {literal}")["v"])
        except tomllib.TOMLDecodeError:
            continue  # prose that looks like a value: "[sandbox] network"
    speaks = bool(re.search(r"\b[Dd]efault\b|\brequired\b", comment))
    return values, speaks


def lookup(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(data, list) or part >= len(data):
                return UNSET
            data = data[part]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return UNSET
    return data


def same(stated: Any, actual: Any) -> bool:
    if isinstance(stated, list) and isinstance(actual, list):
        return len(stated) == len(actual) and all(map(same, stated, actual))
    if isinstance(stated, int | float) and not isinstance(stated, bool):
        return isinstance(actual, int | float) and float(stated) == float(actual)
    return bool(stated == actual)


@pytest.fixture(scope="module")
def effective(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the example's effective settings, a minimal file's) as files."""
    root = tmp_path_factory.mktemp("minimal")
    minimal = root / "pipeline.toml"
    minimal.write_text(MINIMAL, encoding="utf-8")
    environ = {"PIPELINE_DATA_DIR": str(root / "data")}
    return to_file(load_settings(EXAMPLE, environ=environ)), to_file(
        load_settings(minimal, environ=environ)
    )


def _required() -> set[tuple[str | int, ...]]:
    """Every key MINIMAL sets, by its full path."""
    found: set[tuple[str | int, ...]] = set()

    def walk(prefix: tuple[str | int, ...], value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk((*prefix, key), item)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for index, item in enumerate(value):
                walk((*prefix, index), item)
        else:
            found.add(prefix)

    walk((), tomllib.loads(MINIMAL))
    return found


REQUIRED = _required()


def _checked(option: Option) -> bool:
    required = (*option.path, option.key) in REQUIRED
    return not required and not FREE_TABLES & {str(p) for p in option.path}


def _default(defaults: dict[str, Any], option: Option) -> Any:
    full = (*option.path, option.key)
    return lookup(defaults, FOLDED.get((str(full[0]), option.key), full))  # type: ignore[arg-type]


def test_every_default_the_example_states_is_the_codes(
    effective: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """A default the example's comments state as a value is what the code uses."""
    _, defaults = effective
    wrong = []
    for option in filter(_checked, example_options(EXAMPLE.read_text(encoding="utf-8"))):
        actual = _default(defaults, option)
        for stated in stated_defaults(option.comment)[0]:
            if actual is UNSET or not same(stated, actual):
                shown = "unset" if actual is UNSET else repr(actual)
                wrong.append(f"{option.where}: comment says default {stated!r}, code has {shown}")
    assert wrong == []


def test_an_example_value_that_is_not_the_default_says_so(
    effective: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """An option set to something other than its default has a comment saying the default."""
    example, defaults = effective
    silent = []
    for option in filter(_checked, example_options(EXAMPLE.read_text(encoding="utf-8"))):
        if option.commented_out or option.key.endswith(("_env", "_file")):
            continue  # shown unset: the default applies; a secret reference is never defaulted
        full = (*option.path, option.key)
        shown = lookup(example, full)
        if shown is UNSET:  # folded into other settings: the value as written
            shown = lookup(tomllib.loads(EXAMPLE.read_text(encoding="utf-8")), full)
        if shown is not UNSET and same(shown, _default(defaults, option)):
            continue
        if not stated_defaults(option.comment)[1]:
            silent.append(f"{option.where}: example value differs from the default, unsaid")
    assert silent == []


def test_the_checks_read_the_example_as_intended() -> None:
    """The parser finds options, array tables and stated defaults the way the checks assume."""
    options = example_options(EXAMPLE.read_text(encoding="utf-8"))
    paths = {(o.path, o.key) for o in options}
    assert ((), "max_concurrency") in paths
    assert (("repos", "web", "deploy", "probes", 1), "timeout_s") in paths
    assert (("http",), "public_url") in paths
    assert stated_defaults('"bwrap" (default) or "none"') == (["bwrap"], True)
    assert stated_defaults("Limit. Default: 30. More.") == ([30], True)
    assert stated_defaults("Default: [] (nothing).") == ([[]], True)
    assert stated_defaults("Default: the size of the volume.") == ([], True)
    assert stated_defaults("Seconds between polls.") == ([], False)
    assert ("repos", "web", "ci", "kind") not in REQUIRED
    assert ("agents", "aider", "command") in REQUIRED
