"""Git plumbing for workspaces: running git, classifying its failures, safe names.

Every git call goes through ``git()`` so that a full disk is always recognised
(``disk_full``, retryable), credentials embedded in URLs never reach a message,
and an interactive prompt can never hang a run.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.errors import FatalError, RetryableError
from pipeline.masking import redact_url

DISK_FULL_MARKERS = ("No space left on device", "Disk quota exceeded")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_COMPONENT = 80


class DiskFull(RetryableError):
    """The volume ran out of space; eviction should run before the retry."""

    def __init__(self, message: str) -> None:
        super().__init__("disk_full", message)


def is_disk_full(text: str) -> bool:
    """True when a tool's output says the disk (or quota) is full."""
    return any(marker in text for marker in DISK_FULL_MARKERS)


def is_enospc(exc: BaseException) -> bool:
    """True for an OSError that means the disk (or quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git: ours, never prompting, plus ``extra``."""
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("GIT_ASKPASS", "/bin/true")
    if extra:
        env.update(extra)
    return env


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    kind: str = "git",
    retryable: bool = False,
    timeout_s: float = 600.0,
    input_data: bytes | None = None,
) -> str:
    """Run ``git args`` in ``cwd`` and return stdout; raise a classified error on failure.

    ``retryable`` marks network operations (clone, fetch) whose failure is
    worth a retry; anything else that fails is fatal for the run.
    """
    return run_tool(["git", *args], cwd=cwd, env=env, kind=kind, retryable=retryable,
                    timeout_s=timeout_s, input_data=input_data)


def run_tool(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    kind: str = "git",
    retryable: bool = False,
    timeout_s: float = 600.0,
    input_data: bytes | None = None,
) -> str:
    """Run a short git-family tool (git, git-crypt) and classify its failure."""
    shown = _show(argv)
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=git_env(env),
            input=input_data if input_data is not None else b"",
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RetryableError(kind, f"{shown} in {cwd} took over {timeout_s:.0f}s") from exc
    except OSError as exc:
        if is_enospc(exc):
            raise DiskFull(f"no space left on device running {shown} in {cwd}") from exc
        raise
    out = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode == 0:
        return out
    err = proc.stderr.decode("utf-8", errors="replace").strip()
    message = redact_url(f"{shown} in {cwd} exited {proc.returncode}: {err[-2000:]}")
    if is_disk_full(err):
        raise DiskFull(message)
    if retryable:
        raise RetryableError(kind, message)
    raise FatalError(kind, message)


def _show(args: Sequence[str]) -> str:
    return redact_url(" ".join(args))


def safe_component(raw: str, *, fallback: str = "_") -> str:
    """One path component or ref segment that cannot escape or break a ref.

    Keeps ``[A-Za-z0-9._-]``, folds runs of anything else (and of dots) to
    one character, strips leading/trailing dots and dashes, and drops a
    ``.lock`` suffix. When the result differs from ``raw`` a short hash of
    ``raw`` is appended so two different names never share a directory.
    """
    cleaned = _UNSAFE.sub("-", raw)
    cleaned = re.sub(r"\.{2,}", ".", cleaned)
    cleaned = re.sub(r"-{2,}", "-", cleaned).strip(".-")
    while cleaned.endswith(".lock"):
        cleaned = cleaned[: -len(".lock")].rstrip(".-")
    cleaned = cleaned[:_MAX_COMPONENT].rstrip(".-")
    if cleaned == raw and cleaned:
        return cleaned
    digest = hashlib.sha1(raw.encode("utf-8", errors="surrogatepass")).hexdigest()[:6]
    return f"{cleaned or fallback}-{digest}"


def branch_name(issue_ref: str, run_id: int) -> str:
    """``afk/<issue>-<run>``: a valid branch name whatever the issue reference holds."""
    issue = _UNSAFE.sub("-", issue_ref.lstrip("#"))
    issue = re.sub(r"\.{2,}", ".", issue)
    issue = re.sub(r"-{2,}", "-", issue).strip(".-")[:60].rstrip(".-")
    return f"afk/{issue or 'issue'}-{int(run_id)}"


def relative_inside(root: Path, relative: str, *, what: str) -> Path:
    """``root / relative`` after checking it stays inside ``root``."""
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise FatalError("config", f"{what} {relative!r} must be a relative path inside the repo")
    resolved = (root / candidate).resolve()
    if resolved != root.resolve() and root.resolve() not in resolved.parents:
        raise FatalError("config", f"{what} {relative!r} resolves outside the repo ({resolved})")
    return root / candidate
