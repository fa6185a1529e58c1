"""The forms a secret value can take in text, for ``pipeline.core.masking`` to hide.

A secret rarely shows up only as itself. From a value this derives:

- each line of a multi-line secret (a file of apprise URLs, a key);
- the credentials inside URLs: the password of ``scheme://user:password@host``
  (as written and decoded), and for apprise schemes whose user, host and path
  are themselves tokens (``slack://TokenA/TokenB/TokenC``) those parts, plus
  query values (``?token=...``);
- URL-encoded forms (``%40`` for ``@``, ``+`` for a space);
- JSON- and HTML-escaped forms (what a JSON body or a rendered page holds);
- base64 as in HTTP basic auth: ``base64("user:" + secret)`` has the secret at
  any byte offset, so the part of its encoding that depends only on the secret
  is registered for each of the three alignments, in both alphabets.

Every form shorter than ``MIN_SECRET_LEN`` is dropped.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

MIN_SECRET_LEN = 8
MIN_CUT_LEN = 4
# Apprise schemes whose host part is a real server name, not a credential. Elsewhere
# (slack://TokenA/..., discord://webhook_id/..., tgram://bot_token/...) the
# "host" and path are credentials.
HOST_SCHEMES = frozenset(
    {
        "json",
        "jsons",
        "xml",
        "xmls",
        "form",
        "forms",
        "ntfy",
        "ntfys",
        "matrix",
        "matrixs",
        "mailto",
        "mailtos",
        "gotify",
        "gotifys",
        "mmost",
        "mmosts",
        "rocket",
        "rockets",
        "apprise",
        "apprises",
        "http",
        "https",
    }
)
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://\S+$")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"}


@dataclass(frozen=True)
class SecretForms:
    """Strings to mask, and those (with the shortest piece shown) to mask when cut short."""

    forms: frozenset[str] = frozenset()
    cuttable: dict[str, int] = field(default_factory=dict)


def text_forms(value: str) -> SecretForms:
    """Every form of a text secret worth masking (see the module docstring)."""
    pieces = _pieces(value)
    raw = {p for p in pieces if len(p) >= MIN_SECRET_LEN}
    forms: set[str] = set()
    for piece in raw:
        forms |= encoded_forms(piece)
        forms |= base64_forms(piece.encode("utf-8"))
    forms = {f for f in forms if len(f) >= MIN_SECRET_LEN}
    cuttable = {p: _shortest_cut(p) for p in raw if "\n" not in p}
    return SecretForms(frozenset(forms), cuttable)


def bytes_forms(data: bytes) -> SecretForms:
    """A binary secret: its text (if any), base64 and hex."""
    text = text_forms(data.decode("utf-8", errors="replace"))
    extra = base64_forms(data) | {data.hex(), data.hex().upper()}
    forms = text.forms | {f for f in extra if len(f) >= MIN_SECRET_LEN}
    return SecretForms(frozenset(forms), text.cuttable)


def _pieces(value: str) -> set[str]:
    """The value, each of its lines, and the credentials of every URL among them."""
    pieces = {value.strip()} | {line.strip() for line in value.splitlines()}
    for piece in list(pieces):
        pieces |= url_credentials(piece)
    return {p for p in pieces if p}


def url_credentials(text: str) -> set[str]:
    """The parts of a URL that are secrets: password, and token-like parts of apprise URLs."""
    match = _URL.match(text)
    if match is None:
        return set()
    try:
        parts = urlsplit(text)
        password, username = parts.password, parts.username
    except ValueError:
        return set()
    found = {password, unquote(password)} if password else set()
    candidates = [v for _, v in parse_qsl(parts.query, keep_blank_values=False)]
    if match.group("scheme").lower() not in HOST_SCHEMES:
        host = parts.netloc.rpartition("@")[2]  # as written: hostname would lowercase it
        candidates += [username or "", host, *parts.path.split("/")]
    return found | {unquote(p) for p in candidates if looks_like_token(unquote(p))}


def looks_like_token(text: str) -> bool:
    """A URL part that is a credential, not a word: letters and digits mixed, or long.

    ``?format=markdown`` or ``#general`` must not make every "markdown" a secret.
    """
    if len(text) < MIN_SECRET_LEN:
        return False
    mixed = any(c.isdigit() for c in text) and any(c.isalpha() for c in text)
    return mixed or len(text) >= 20


def url_password(url: str) -> str | None:
    """The password of ``scheme://user:password@host/...``, decoded; None when there is none."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def encoded_forms(value: str) -> set[str]:
    """``value`` as written, URL-encoded, JSON-escaped and HTML-escaped (and combinations)."""
    forms = {value, quote(value, safe=""), quote_plus(value, safe=""), quote(value)}
    for form in list(forms):
        forms.add(json.dumps(form)[1:-1])
        forms.add(json.dumps(form, ensure_ascii=False)[1:-1])
    for form in list(forms):
        forms.add("".join(_HTML.get(c, c) for c in form))  # as Jinja (markupsafe) escapes
        forms.add(html.escape(form))
    return forms


def base64_forms(data: bytes) -> set[str]:
    """The secret-only part of ``data``'s base64 at each of the three byte alignments."""
    forms: set[str] = set()
    for shift in range(3):
        padded = b"\0" * shift + data
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(padded).decode("ascii")
            start = 4 if shift else 0
            end = len(encoded) - (4 if len(padded) % 3 else 0)
            if end - start >= MIN_SECRET_LEN:
                forms.add(encoded[start:end])
    return forms


def _shortest_cut(value: str) -> int:
    """The shortest piece of ``value`` masked when it is cut off: past its public part.

    A URL's scheme is public, and so is the host of a channel that names a real
    server (``json://127.0.0.1:8080`` is what notify events show) unless
    credentials come before it; the secret starts after that.
    """
    return min(len(value), len(_public_prefix(value)) + MIN_CUT_LEN)


def _public_prefix(value: str) -> str:
    match = _URL.match(value)
    if match is None:
        return ""
    scheme = match.group("scheme")
    netloc = value[len(scheme) + 3 :].split("/", 1)[0]
    if "@" in netloc or scheme.lower() not in HOST_SCHEMES:
        return f"{scheme}://"
    return f"{scheme}://{netloc}"
