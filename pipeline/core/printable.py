"""Text safe to print on a terminal: what agents and issue authors wrote, control characters shown.

Run text (titles, timeline events, errors) comes from agents and issue authors; a
terminal would obey an escape sequence in it rather than show it. The CLI and the
plain-text log of the API (``curl .../log``) print it through ``shown``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# What a terminal would obey rather than show: C0 controls but tab and newline (escape
# sequences: colours, cursor moves, a window title, a cleared screen; a carriage return
# that overwrites the line), DEL, C1 controls, and the bidi embeddings, overrides and
# isolates that reorder text. Run text is written by agents and issue authors.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Half a UTF-16 surrogate pair: JSON may escape one (``"\\ud83d"``, a JavaScript string
# cut mid-emoji), Python decodes it, and no UTF-8 encoder (a database, an HTTP body) takes it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# How much of one file name an agent chose a timeline event shows.
NAME_CHARS = 100


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: each control character as an escape (``\\x1b``)."""
    return UNSAFE.sub(_escape, text)


def shown_line(text: str) -> str:
    """``shown(text)`` on one line, each line break as ``\\n``: a title (anyone's text) in
    a header cannot start a line that passes for one of the header's own."""
    return shown(text).replace("\n", "\\n")


def well_formed(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD, so it encodes as UTF-8 wherever it goes."""
    return LONE_SURROGATE.sub("\ufffd", text)


def shown_names(names: Sequence[str], count: int = 5) -> str:
    """The first ``count`` of ``names`` (file names an agent chose) for a timeline event, and
    how many more there are: each cut to ``NAME_CHARS`` and quoted, its control characters
    escaped, so a name can neither flood the timeline nor steer a terminal."""
    listed = ", ".join(repr(well_formed(name[:NAME_CHARS])) for name in names[:count])
    return listed + (f" and {len(names) - count} more" if len(names) > count else "")


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def indented(text: str, column: int) -> str:
    """``shown(text)``, its later lines starting at ``column`` (under its first line)."""
    return ("\n" + " " * column).join(shown(text).split("\n"))
