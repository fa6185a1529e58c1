"""Git helpers for workspaces: classifying failures, hiding credentials, safe names.

Git itself runs only through ``pipeline.git.run``, which uses these to
recognise a full disk (``disk_full``, retryable) and to keep credentials
embedded in URLs out of every message.
"""

from __future__ import annotations

import errno
import hashlib
import re
from pathlib import Path

from pipeline.core.errors import FatalError, RetryableError

DISK_FULL_MARKERS = ("No space left on device", "Disk quota exceeded")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_COMPONENT = 80
# One escape in a path git printed in double quotes (``quote_c_style``): octal or a letter.
_QUOTED = re.compile(rb"\\([0-7]{3}|.)", re.DOTALL)
_LETTERS = {
    b"a": b"\a",
    b"b": b"\b",
    b"t": b"\t",
    b"n": b"\n",
    b"v": b"\v",
    b"f": b"\f",
    b"r": b"\r",
}


class DiskFull(RetryableError):
    """The volume ran out of space; eviction should run before the retry."""

    def __init__(self, message: str) -> None:
        super().__init__("disk_full", message)


def public_url(url: str) -> str:
    """``url`` without a password in it (``https://user:pw@host`` -> ``https://user@host``)."""
    return _URL_PASSWORD.sub(r"\g<scheme>\g<user>@", url)


def is_disk_full(text: str) -> bool:
    """True when a tool's output says the disk (or quota) is full."""
    return any(marker in text for marker in DISK_FULL_MARKERS)


def is_enospc(exc: BaseException) -> bool:
    """True for an OSError that means the disk (or quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


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


def unquoted(path: str) -> str:
    """A path as git prints it (in double quotes, C-style escaped, when it holds a control
    character, a quote, a backslash or a non-ASCII byte) as the name it is."""
    if len(path) < 2 or not path.startswith('"') or not path.endswith('"'):
        return path
    raw = _QUOTED.sub(_unescaped, path[1:-1].encode("utf-8", errors="surrogateescape"))
    return raw.decode("utf-8", errors="replace")


def _unescaped(found: re.Match[bytes]) -> bytes:
    code = found.group(1)
    return bytes([int(code, 8) & 0xFF]) if len(code) == 3 else _LETTERS.get(code, code)


RUN_BRANCH_PREFIX = "afk/"


def branch_name(issue_ref: str, run_id: int) -> str:
    """``afk/<issue>-<run>``: a valid branch name whatever the issue reference holds."""
    issue = _UNSAFE.sub("-", issue_ref.lstrip("#"))
    issue = re.sub(r"\.{2,}", ".", issue)
    issue = re.sub(r"-{2,}", "-", issue).strip(".-")[:60].rstrip(".-")
    return f"{RUN_BRANCH_PREFIX}{issue or 'issue'}-{int(run_id)}"


def relative_inside(root: Path, relative: str, *, what: str) -> Path:
    """``root / relative`` after checking it stays inside ``root``."""
    candidate = Path(relative)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise FatalError("config", f"{what} {relative!r} must be a relative path inside the repo")
    resolved = (root / candidate).resolve()
    if resolved != root.resolve() and root.resolve() not in resolved.parents:
        raise FatalError("config", f"{what} {relative!r} resolves outside the repo ({resolved})")
    return root / candidate
