"""Repository-owned settings: ``.afk.toml`` at the root of the repo's default branch.

A repository may say how it is tested and what its agent should know::

    test_command = "python -m pytest -q"
    setup_commands = ["uv sync"]
    prompt = "Public functions get docstrings."

    [[deploy_probes]]
    kind = "http"
    url = "https://app.example.com/health"

Only the keys the operator lists in ``repos.NAME.afk_toml`` are used (default:
``test_command`` and ``prompt``), and where the daemon's config sets the same
thing it wins. The file is written by whoever can push to the default branch,
the agent included (ADR 0026): its commands run in the sandbox like the
repository's own tests, its probes may only be ``http``, and every value is
bounded. Bad values are skipped and reported as ``.afk.toml:KEY: problem``.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from pipeline.config.settings import ProbeSettings, RepoSettings

REPO_FILE = ".afk.toml"
KEYS = ("test_command", "setup_commands", "prompt", "deploy_probes")
DEFAULT_KEYS = ("test_command", "prompt")
MAX_FILE_BYTES = 64 * 1024
MAX_COMMAND_CHARS = 2000
MAX_PROMPT_CHARS = 4000
MAX_LIST = 10
PROBE_KEYS = ("kind", "url", "expect_status", "json_field", "body_regex", "timeout_s")


@dataclass(frozen=True)
class RepoFileReport:
    """What ``.afk.toml`` changed for this run, what the daemon's config overrode, what was bad."""

    applied: tuple[str, ...] = ()
    overridden: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    unconfirmed_runs: tuple[str, ...] = ()  # runs whose changes to the file are not used

    @property
    def noteworthy(self) -> bool:
        return bool(self.applied or self.overridden or self.problems or self.unconfirmed_runs)

    @property
    def message(self) -> str:
        parts = [f"{REPO_FILE} on the default branch"]
        parts.append(f"applied: {', '.join(self.applied) or 'nothing'}")
        if self.overridden:
            parts.append(f"the daemon's config wins for: {', '.join(self.overridden)}")
        if self.problems:
            parts.append(f"{len(self.problems)} problem(s): " + "; ".join(self.problems))
        if self.unconfirmed_runs:
            runs = ", ".join(self.unconfirmed_runs)
            parts.append(f"changes pushed by run(s) {runs} are not used until a human commits them")
        return "; ".join(parts)


class _Bad(ValueError):
    """One value of the file that cannot be used; ``at`` is where inside the key."""

    def __init__(self, message: str, at: str = "") -> None:
        super().__init__(message)
        self.at = at


def apply_repo_file(repo: RepoSettings, raw: bytes | None) -> tuple[RepoSettings, RepoFileReport]:
    """``repo`` with what ``raw`` (the file's bytes, ``None``: no file) may set for it."""
    if raw is None:
        return repo, RepoFileReport()
    try:
        data = _document(raw)
    except _Bad as exc:
        return repo, RepoFileReport(problems=(f"{REPO_FILE}: {exc}",))
    changes: dict[str, Any] = {}
    applied, overridden, problems = [], [], []
    for key, value in data.items():
        try:
            change = _change(repo, key, value)
        except _Bad as exc:
            problems.append(f"{REPO_FILE}:{key}{exc.at}: {exc}")
            continue
        if change is None:
            overridden.append(key)
        else:
            changes.update(change)
            applied.append(key)
    report = RepoFileReport(tuple(applied), tuple(overridden), tuple(problems))
    return dataclasses.replace(repo, **changes), report


def _document(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_FILE_BYTES:
        raise _Bad(f"{len(raw)} bytes; at most {MAX_FILE_BYTES} are read")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Bad("not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise _Bad(f"not valid TOML: {exc}") from None


def _change(repo: RepoSettings, key: str, value: object) -> dict[str, Any] | None:
    """The settings ``key`` changes; ``None`` when the daemon's config already says it."""
    if key not in KEYS:
        raise _Bad(f"unknown key (known: {', '.join(KEYS)})")
    if key not in repo.afk_toml:
        allowed = ", ".join(repo.afk_toml) or "nothing"
        raise _Bad(f"not allowed by the operator (repos.{repo.name}.afk_toml allows: {allowed})")
    if key == "test_command":
        command = _text(value, MAX_COMMAND_CHARS)
        return None if repo.test_command else {"test_command": command}
    if key == "setup_commands":
        commands = tuple(_text(item, MAX_COMMAND_CHARS) for item in _items(value))
        return None if repo.setup_commands else {"setup_commands": commands}
    if key == "prompt":
        return {"repo_prompt": _text(value, MAX_PROMPT_CHARS)}
    probes = tuple(_probe(index, item) for index, item in enumerate(_items(value)))
    if repo.deploy.probes:
        return None
    return {"deploy": dataclasses.replace(repo.deploy, probes=probes)}


def _text(value: object, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad("must be a non-empty string")
    if len(value) > limit:
        raise _Bad(f"{len(value)} characters; at most {limit}")
    if "\0" in value:
        raise _Bad("must not contain NUL")
    return value


def _items(value: object) -> list[object]:
    if not isinstance(value, list) or not value:
        raise _Bad("must be a non-empty array")
    if len(value) > MAX_LIST:
        raise _Bad(f"{len(value)} entries; at most {MAX_LIST}")
    return value


def _probe(index: int, item: object) -> ProbeSettings:
    """An ``http`` probe (a repository never gets the daemon to run a command for it)."""
    where = f"[{index}]"
    if not isinstance(item, dict):
        raise _Bad("must be a table", where)
    if item.get("kind") != "http":
        raise _Bad('must be "http" (command probes come from the daemon only)', f"{where}.kind")
    unknown = sorted(set(item) - set(PROBE_KEYS))
    if unknown:
        raise _Bad(f"unknown key (known: {', '.join(PROBE_KEYS)})", f"{where}.{unknown[0]}")
    url = item.get("url")
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url) or len(url) > 2000:
        raise _Bad("must be an http(s) URL", f"{where}.url")
    status = item.get("expect_status", 200)
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise _Bad("must be a whole number from 100 to 599", f"{where}.expect_status")
    timeout = item.get("timeout_s", 10.0)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 60:
        raise _Bad("must be a number of seconds from 0 to 60", f"{where}.timeout_s")
    regex = item.get("body_regex")
    if regex is not None:
        regex = _text(regex, 500)
        try:
            re.compile(regex)
        except re.error as exc:
            raise _Bad(f"not a regular expression: {exc}", f"{where}.body_regex") from None
    field = item.get("json_field")
    return ProbeSettings(
        kind="http",
        url=url,
        expect_status=status,
        body_regex=regex,
        json_field=_text(field, 200) if field is not None else None,
        timeout_s=float(timeout),
    )
