"""What a forge's error answer says: a rate limit, when to retry, its own message."""

from __future__ import annotations

import email.utils

import httpx


def looks_rate_limited(response: httpx.Response) -> bool:
    """A 403 that is a rate limit: GitHub's secondary limits say so in a header or the text."""
    headers = response.headers
    if "retry-after" in headers:
        return True
    if headers.get("x-ratelimit-remaining") == "0" or headers.get("ratelimit-remaining") == "0":
        return True
    return "rate limit" in response.text[:2000].lower()


def parse_retry_after(value: str, now: float) -> float | None:
    """``Retry-After`` in seconds from ``now`` (given as seconds or as an HTTP date)."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def error_message(response: httpx.Response) -> str:
    """The forge's own short error message, if the body has one."""
    try:
        data = response.json()
    except ValueError:
        return ""
    if isinstance(data, dict):
        for key in ("message", "error", "error_description"):
            if isinstance(data.get(key), str):
                return str(data[key])[:300]
    return ""
