"""Time filters as users write them: ISO times, ages and ``today``, one parser for all."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from pipeline.core.when import VALID_FORMS, BadTime, parse_when

NOW = datetime(2026, 3, 10, 15, 30, 45, 123456)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("30m", datetime(2026, 3, 10, 15, 0, 45, 123456)),
        ("24h", datetime(2026, 3, 9, 15, 30, 45, 123456)),
        ("7d", datetime(2026, 3, 3, 15, 30, 45, 123456)),
        ("2w", datetime(2026, 2, 24, 15, 30, 45, 123456)),
        ("90s", datetime(2026, 3, 10, 15, 29, 15, 123456)),
        ("today", datetime(2026, 3, 10)),
        (" TODAY ", datetime(2026, 3, 10)),
        ("2026-01-31T08:00:00Z", datetime(2026, 1, 31, 8)),
        ("2026-01-31t08:00:00z", datetime(2026, 1, 31, 8)),
        ("2026-01-31T10:00:00+02:00", datetime(2026, 1, 31, 8)),
        ("2026-01-31 08:00", datetime(2026, 1, 31, 8)),
        ("2026-01-31", datetime(2026, 1, 31)),
        ("2026-01-31T08:00:00.5Z", datetime(2026, 1, 31, 8, 0, 0, 500000)),
        ("2026-01-31T08:00:00.123456789Z", datetime(2026, 1, 31, 8, 0, 0, 123456)),
        ("99999w", NOW - timedelta(weeks=99999)),  # the longest age still a date
    ],
)
def test_valid_forms_become_naive_utc(raw: str, expected: datetime) -> None:
    """Ages count back from now, today is midnight UTC, offsets are converted to UTC."""
    assert parse_when(raw, NOW) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "yesterday",
        "5x",
        "-1d",
        "1.5h",
        "h",
        "2026-02-30",
        "2026-13-01T00:00:00Z",
        "31/01/2026",
        "0001-01-01T00:00:00+05:00",
        "999999w",
        "2026-01-31T08:00:00.1234567890Z",
    ],
)
def test_anything_else_is_refused_listing_the_valid_forms(raw: str) -> None:
    """A bad value is a BadTime whose message lists every valid form and echoes the value."""
    with pytest.raises(BadTime) as caught:
        parse_when(raw, NOW)
    assert VALID_FORMS in str(caught.value) and repr(raw[:40]) in str(caught.value)
