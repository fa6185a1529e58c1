"""Points in time as a user writes them in a filter: ``since``/``until`` of a runs listing.

One parser for the API, the dashboard and the CLI, so ``24h`` means the same
everywhere: an ISO 8601 time (``2026-01-31T08:00:00Z``; without an offset it
is UTC; a bare date is its midnight UTC), an age before now (``30m``, ``24h``,
``7d``, ``2w``) or ``today`` (midnight UTC). Times come back as naive UTC, like
every time in the store.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

VALID_FORMS = (
    "an ISO time like 2026-01-31T08:00:00Z or 2026-01-31 (UTC), "
    "an age like 30m, 24h, 7d or 2w, or today"
)
# At most five digits: 99999 weeks back is still a date (no overflow, no 422 for a valid form).
AGE = re.compile(r"([0-9]{1,5})([smhdw])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ISO_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"([Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?)?"
)


class BadTime(ValueError):
    """A time filter that is none of the valid forms; the message lists them."""


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def parse_when(raw: str, now: datetime | None = None) -> datetime:
    """``raw`` as a naive-UTC time; ``now`` (naive UTC) anchors ages and ``today``."""
    value = raw.strip()
    anchor = now or utc_now()
    if value.lower() == "today":
        return anchor.replace(hour=0, minute=0, second=0, microsecond=0)
    problem = f"expected {VALID_FORMS}; got {raw[:40]!r}"
    age = AGE.fullmatch(value)
    try:
        if age is not None:
            return anchor - timedelta(seconds=int(age.group(1)) * UNIT_S[age.group(2)])
        if not ISO_TIME.fullmatch(value):
            raise BadTime(problem)
        parsed = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            return parsed
        return parsed.astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):  # no such date, or out of range once in UTC
        raise BadTime(problem) from None
