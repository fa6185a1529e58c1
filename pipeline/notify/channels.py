"""Apprise channels by name: a URL's secrets never leave the config.

Apprise URLs carry their secrets in the user, password, path and sometimes
the host, so a channel is shown as ``scheme://host`` (or ``scheme://`` for
schemes whose host is itself a token) and stored as a digest of its URL.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from pipeline.core.secret_forms import HOST_SCHEMES


def describe_channel(url: str) -> str:
    """A channel's name without its secrets: ``scheme://host`` or just ``scheme://``."""
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
    except ValueError:
        return "<unparseable url>"
    if not scheme:
        return "<no scheme>"
    return f"{scheme}://{host}" if scheme in HOST_SCHEMES else f"{scheme}://"


def parse_urls(text: str | None) -> list[str]:
    """Apprise URLs from the secret: one per line; blank lines and ``#`` comments skipped."""
    lines = (line.strip() for line in (text or "").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def channel_key(url: str) -> str:
    """A digest that finds the URL again in the config without storing its secrets."""
    return hashlib.sha256(url.strip().encode("utf-8")).hexdigest()[:40]
