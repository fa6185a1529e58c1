"""One registry of secret values and one ``mask``, for every text stored or served.

Secrets live only in the daemon's memory. Every value a ``SecretRef`` resolves
to is registered here (``SecretRef.resolve`` does it, at start and whenever a
secret is read later), together with the forms it can take in text:
``pipeline.core.secret_forms`` derives them (each line, URL credentials, URL, JSON
and HTML encodings, base64 as in HTTP basic auth). ``mask`` replaces each with
``***``, also a secret cut short by a bounded summary: the part before or
after a ``…`` marker, or at the very start or end of a text cut without one.

What is masked is the union of every place any form occurs, so secrets that
overlap in the text (``abcdefgh-1234`` and ``1234-ijklmnop`` printed as
``abcdefgh-1234-ijklmnop``, as output glued on purpose can arrange) become one
``***``: masking the first one found must not leave the rest of the other
showing. Overlapping occurrences merge; occurrences that only touch stay two
masks, as do two secrets printed one after the other.

Values shorter than ``MIN_SECRET_LEN`` are not registered: masking a short
value would mask ordinary words everywhere. The daemon warns about such
secrets at start.

The store masks at write (and read), the HTTP layer at serve time (a streamed
body as one text, ``pipeline.core.stream_mask``), the log through its
formatter, notifications and comments before they are sent.

Both ``mask`` and ``redact_url`` run over whole git listings and diffs, so each
looks first where it can match: ``mask`` keeps the forms the text contains (a
substring test each; most texts contain none) and, when one form is found that
cannot overlap itself and no cut piece is, replaces it as a plain string;
otherwise it collects the spans of every occurrence; ``redact_url`` visits
each ``://`` and reads the scheme back from it, instead of trying the URL
expression at every letter (quadratic on a long word).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.secret_forms import (
    MIN_CUT_LEN,
    MIN_SECRET_LEN,
    SecretForms,
    bytes_forms,
    text_forms,
    url_password,
)

if TYPE_CHECKING:  # settings import this module to register what they resolve
    from pipeline.config.settings import SecretRef, Settings

MASK = "***"
ELLIPSIS = "…"
# A secret cut short at a "…" marker is masked when MIN_CUT_LEN of it shows; cut at
# the text's edge with no marker, a longer piece, so plain words never match.
MIN_EDGE_CUT_LEN = 8
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^/@\s]+)@")
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_LETTER = re.compile(r"[A-Za-z]")
# Schemes where a user without a password is a login name, not a token in the user field.
_NAMED_USER_SCHEMES = frozenset({"postgresql", "postgres", "postgresql+psycopg", "ssh", "git+ssh"})

__all__ = [
    "MASK",
    "MIN_SECRET_LEN",
    "clear_secrets",
    "mask",
    "mask_data",
    "redact_url",
    "register_secret",
    "register_secret_bytes",
    "register_settings_secrets",
]


@dataclass(frozen=True)
class _Cuts:
    """By their last/first two characters, the (secret, length) pieces a cut-off secret
    could end/start with (every piece is at least ``MIN_CUT_LEN`` long)."""

    prefixes: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    suffixes: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def prefix_at_end(self, text: str, minimum: int) -> int:
        """Length of the longest secret prefix (>= ``minimum``) ``text`` ends with; 0 if none."""
        best = 0
        for secret, size in self.prefixes.get(text[-2:], ()):
            if best < size <= len(text) and size >= minimum and text.endswith(secret[:size]):
                best = size
        return best

    def suffix_at_start(self, text: str, minimum: int) -> int:
        """Length of the longest secret suffix (>= ``minimum``) ``text`` starts with; 0 if none."""
        best = 0
        for secret, size in self.suffixes.get(text[:2], ()):
            if best < size <= len(text) and size >= minimum and text.startswith(secret[-size:]):
                best = size
        return best


def _index_cuts(cuttable: Mapping[str, int]) -> _Cuts:
    prefixes: dict[str, list[tuple[str, int]]] = {}
    suffixes: dict[str, list[tuple[str, int]]] = {}
    for secret, shortest in cuttable.items():
        for size in range(shortest, len(secret)):
            prefixes.setdefault(secret[size - 2 : size], []).append((secret, size))
            start = len(secret) - size
            suffixes.setdefault(secret[start : start + 2], []).append((secret, size))
    return _Cuts(
        {k: tuple(v) for k, v in prefixes.items()}, {k: tuple(v) for k, v in suffixes.items()}
    )


@dataclass(frozen=True)
class _Snapshot:
    """What ``mask`` reads: replaced as a whole on registration, so reads need no lock."""

    forms: tuple[str, ...] = ()  # longest first
    cuts: _Cuts = field(default_factory=_Cuts)
    self_overlapping: frozenset[str] = frozenset()  # forms two occurrences of can overlap


class SecretRegistry:
    """The secret values of one process and every form of them that ``mask`` hides."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str | bytes] = set()
        self._forms: set[str] = set()
        self._cuttable: dict[str, int] = {}
        self._self_overlapping: set[str] = set()
        self._snapshot = _Snapshot()

    def register(self, value: str | None) -> bool:
        """Register ``value`` and its derived forms; False when it is too short to mask."""
        if not value:
            return False
        if value in self._seen:
            return True
        return self._add(value, text_forms(value))

    def register_bytes(self, data: bytes) -> bool:
        """Register a binary secret (a key file): its text, base64 and hex forms."""
        if not data:
            return False
        if data in self._seen:
            return True
        return self._add(data, bytes_forms(data))

    def _add(self, key: str | bytes, forms: SecretForms) -> bool:
        if not forms.forms:
            return False
        with self._lock:
            self._seen.add(key)
            self._forms |= forms.forms
            self._cuttable.update(forms.cuttable)
            self._self_overlapping |= {f for f in forms.forms if _overlaps_itself(f)}
            ordered = tuple(sorted(self._forms, key=lambda f: (-len(f), f)))
            cuts = _index_cuts(self._cuttable)
            self._snapshot = _Snapshot(ordered, cuts, frozenset(self._self_overlapping))
        return True

    @property
    def active(self) -> bool:
        return bool(self._snapshot.forms)

    def clear(self) -> None:
        """Forget every secret (tests)."""
        with self._lock:
            self._seen.clear()
            self._forms.clear()
            self._cuttable.clear()
            self._self_overlapping.clear()
            self._snapshot = _Snapshot()

    def mask(self, text: str) -> str:
        """``text`` with every registered form, whole or cut short, replaced by ``***``."""
        snapshot = self._snapshot
        if not snapshot.forms or not text:
            return text
        # A form the text does not contain occurs nowhere in it; most texts contain none.
        present = [f for f in snapshot.forms if f in text]
        cuts = _cut_spans(text, snapshot.cuts)
        if not cuts and len(present) == 1 and present[0] not in snapshot.self_overlapping:
            return text.replace(present[0], MASK)  # no two occurrences can overlap
        spans = _form_spans(text, present) + cuts
        return _replaced(text, spans) if spans else text


def _overlaps_itself(form: str) -> bool:
    """True when ``form`` starts with one of its own tails (``abab-abab``)."""
    return any(form.startswith(form[k:]) for k in range(1, len(form)))


def _form_spans(text: str, forms: list[str]) -> list[tuple[int, int]]:
    """Where each of ``forms`` occurs in ``text``: every occurrence, overlapping ones too."""
    spans = []
    for form in forms:
        at = text.find(form)
        while at != -1:
            spans.append((at, at + len(form)))
            at = text.find(form, at + 1)
    return spans


def _cut_spans(text: str, cuts: _Cuts) -> list[tuple[int, int]]:
    """A secret's tail at the start and a secret's head at the end of each ``…``-part."""
    spans = []
    parts = text.split(ELLIPSIS)
    last, start = len(parts) - 1, 0
    for n, part in enumerate(parts):
        end = start + len(part)
        size = cuts.suffix_at_start(part, MIN_CUT_LEN if n > 0 else MIN_EDGE_CUT_LEN)
        if size:
            spans.append((start, start + size))
        size = cuts.prefix_at_end(part, MIN_CUT_LEN if n < last else MIN_EDGE_CUT_LEN)
        if size:
            spans.append((end - size, end))
        start = end + len(ELLIPSIS)
    return spans


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each run of overlapping ``spans`` replaced by one ``***``.

    Spans that only touch stay apart: two secrets printed one after the other show
    as ``******``.
    """
    spans.sort()
    pieces: list[str] = []
    done = 0
    run_start, run_end = spans[0]
    for start, end in spans[1:]:
        if start < run_end:
            run_end = max(run_end, end)
            continue
        pieces += (text[done:run_start], MASK)
        done, run_start, run_end = run_end, start, end
    pieces += (text[done:run_start], MASK, text[run_end:])
    return "".join(pieces)


_REGISTRY = SecretRegistry()


def register_secret(value: str | None) -> bool:
    """Register a secret value with the process's registry (see ``SecretRegistry.register``)."""
    return _REGISTRY.register(value)


def register_secret_bytes(data: bytes) -> bool:
    """Register a binary secret with the process's registry."""
    return _REGISTRY.register_bytes(data)


def clear_secrets() -> None:
    """Forget every registered secret (for tests)."""
    _REGISTRY.clear()


def has_secrets() -> bool:
    """True once any secret is registered (a fast path for callers that parse first)."""
    return _REGISTRY.active


def registered_forms() -> tuple[str, ...]:
    """Every form ``mask`` replaces, longest first (``pipeline.core.stream_mask`` reads them)."""
    return _REGISTRY._snapshot.forms


def mask_spans(text: str) -> list[tuple[int, int]]:
    """Where ``mask`` replaces in ``text``: each form's occurrences and each cut piece."""
    snapshot = _REGISTRY._snapshot
    present = [f for f in snapshot.forms if f in text]
    return _form_spans(text, present) + _cut_spans(text, snapshot.cuts)


def mask(text: str) -> str:
    """``text`` with every registered secret masked (see the module docstring)."""
    return _REGISTRY.mask(text)


def mask_data(value: Any) -> Any:
    """``value`` with every string in it masked, keys included, through dicts and lists."""
    if isinstance(value, str):
        return _REGISTRY.mask(value)
    if isinstance(value, Mapping):
        return {mask_data(k): mask_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_data(v) for v in value]
    return value


def redact_url(text: str) -> str:
    """Credentials in every URL in ``text`` hidden: ``user:***@`` or ``***@``, then masked.

    The one URL redaction of the code base: git messages, database URLs, remotes.
    """
    return mask(_redact_userinfo(text))


def _redact_userinfo(text: str) -> str:
    """``_URL_USERINFO.sub(_redacted_userinfo, text)``, looking only where a ``://`` is.

    A match holds exactly one ``://``, the first colon after its start: its scheme
    is the run of scheme characters before it, from the run's first letter on.
    """
    parts: list[str] = []
    done = 0
    at = text.find("://")
    while at != -1:
        start = at
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        letter = _LETTER.search(text, start, at)
        match = _URL_USERINFO.match(text, letter.start()) if letter else None
        if match is None:
            at = text.find("://", at + 1)
            continue
        parts += (text[done : match.start()], _redacted_userinfo(match))
        done = match.end()
        at = text.find("://", done)
    return "".join(parts) + text[done:] if parts else text


def _redacted_userinfo(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    user, colon, _ = match.group("userinfo").partition(":")
    if colon:
        shown = f"{user}:{MASK}" if user else MASK
    else:
        shown = user if scheme.lower() in _NAMED_USER_SCHEMES else MASK
    return f"{scheme}://{shown}@"


# The settings' secrets --------------------------------------------------------


def settings_secret_refs(settings: Settings) -> Iterator[tuple[str, SecretRef]]:
    """Every text secret the settings reference, with its key path for messages."""
    yield "http.api_token", settings.http.api_token
    yield "http.read_token", settings.http.read_token
    yield "notify.urls", settings.notify.urls
    for tracker in settings.trackers:
        yield f"trackers.{tracker.name}.token", tracker.token
        yield f"trackers.{tracker.name}.webhook_secret", tracker.webhook_secret
    for agent in settings.agents:
        yield f"agents.{agent.name}.api_key", agent.api_key
    for repo in settings.repos:
        yield f"repos.{repo.name}.push.token", repo.push.token
        yield f"repos.{repo.name}.ci.token", repo.ci.token


def settings_urls(settings: Settings) -> Iterator[str]:
    """URLs in the settings that may carry a password (``https://user:token@host``)."""
    yield settings.database_url
    for tracker in settings.trackers:
        yield tracker.base_url or ""
    for repo in settings.repos:
        yield repo.remote_url
        yield repo.ci.base_url or ""
        yield from (probe.url or "" for probe in repo.deploy.probes)


def register_settings_secrets(settings: Settings) -> list[str]:
    """Register every secret the settings reference; warnings for those that cannot be masked."""
    warnings = []
    for where, ref in settings_secret_refs(settings):
        value = ref.resolve()
        if value is not None and not register_secret(value):
            warnings.append(
                f"{where} ({ref.describe()}) is shorter than {MIN_SECRET_LEN} characters: "
                "it cannot be masked in logs, run events and pages; use a longer secret"
            )
    for url in settings_urls(settings):
        register_secret(url_password(url))
    for repo in settings.repos:
        key = _key_file(repo.git_crypt_key)
        if key is not None:
            register_secret_bytes(key)
    return warnings


def _key_file(ref: SecretRef) -> bytes | None:
    """A git-crypt key's bytes: the file itself, or the file whose path the variable holds."""
    path = ref.file
    if path is None and ref.env is not None and os.environ.get(ref.env):
        path = Path(os.environ[ref.env])
    try:
        return path.read_bytes() if path is not None else None
    except OSError:
        return None  # reported when the repo's clone is unlocked
