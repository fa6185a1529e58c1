"""Hidden content out of tracker text before it reaches an agent's prompt.

A rendered issue hides some of its source from the maintainer who reads it:
HTML comments, zero-width characters, bidirectional controls that reorder
what is displayed, Unicode tag characters (U+E0000 block, invisible ASCII
look-alikes that models still read) and other invisible formatting. A
maintainer labels what they saw, so only what they saw may reach the agent;
``strip_hidden`` removes the rest and counts what it removed. The other way,
``inert_comments`` keeps words the daemon quotes in its own comments from hiding
the rest of the comment or passing for one of its markers, and ``inert_quote`` keeps
them from acting through the daemon's token: mentioning people, linking other issues,
running GitLab quick actions (``docs/adr/0035-inert-quotes.md``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from pipeline.core.masking import mask

# An unterminated ``<!--`` hides everything after it when rendered.
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_KEPT_CONTROLS = frozenset("\n\t")
# Invisible but not category Cf: Hangul fillers, the braille blank, variation
# selectors (which can smuggle bytes behind an emoji) and the combining grapheme joiner.
_INVISIBLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
)


@dataclass(frozen=True)
class Stripped:
    """Text with its hidden content removed, and how much was removed."""

    text: str
    html_comments: int = 0
    invisible_chars: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.html_comments or self.invisible_chars)


def is_invisible(char: str) -> bool:
    """True for a character a rendered issue does not show (kept: newline, tab)."""
    if char in _KEPT_CONTROLS:
        return False
    category = unicodedata.category(char)
    if category in ("Cf", "Cc", "Cs", "Zl", "Zp"):  # format, control, surrogate, separators
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _INVISIBLE_RANGES)


def strip_hidden(text: str) -> Stripped:
    """``text`` without HTML comments and invisible characters (``\\r\\n`` becomes ``\\n``).

    Invisible characters go first, so none can hide an HTML comment's opening
    from the comment pattern (``<\\u200b!--`` renders as a comment's start).
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    visible = "".join(char for char in text if not is_invisible(char))
    removed = len(text) - len(visible)
    comments = 0
    while True:  # removing one comment can join the halves of another: repeat until none
        visible, found = _HTML_COMMENT.subn("", visible)
        if not found:
            return Stripped(visible, html_comments=comments, invisible_chars=removed)
        comments += found


def one_line(text: str) -> str:
    """``text`` as one line: each run of whitespace (line breaks, tabs) one space.

    An issue's title is a line wherever the daemon uses it: the subject of the commit it
    makes, a pull request's title. A title's line break would start the commit's body,
    where a line ``---`` or ``Afk-Run: 12`` changes what git reads as the trailers.
    """
    return " ".join(text.split())


def inert_comments(text: str) -> str:
    """``text`` to quote in a comment the daemon posts, each HTML comment opening shown as
    text (``&lt;!--``, invisible characters inside it too).

    The daemon quotes words it did not write (an agent's question, CI check names, an
    error): a ``<!--`` in them would hide the rest of the comment (the next step), and a
    look-alike of a marker (``<!-- afk-pipeline:run=13:ended -->``) on the daemon's own
    comment would pass for that run's, so its real comment would never be posted.
    """
    parts = text.split("<")
    shown = [parts[0]]
    for part in parts[1:]:
        visible = "".join(char for char in part[:16] if not is_invisible(char))
        shown.append(("&lt;" if visible.startswith("!--") else "<") + part)
    return "".join(shown)


# What the forges act on in a comment, a title or a description (ADR 35 cites their rules).
# A zero-width space after the trigger (or before a line's "/") leaves the text readable and
# matches none of them: each wants its name or number right after the sign.
BREAK = "\u200b"
# An HTML entity: named with its ";", numeric even without one, and "&amp" (HTML decodes
# "&#x40org" to "@org" and "&amp3" to "&3"; CommonMark wants the ";", a browser does not).
_ENTITY = re.compile(r"&(?=#[0-9]|#x[0-9a-f]|amp|[a-z][a-z0-9]*;)", re.IGNORECASE)
_MENTION = re.compile("@(?!\u200b)")
# GitLab also reads "GL-123" (its alternative issue prefix), "[work_item:123]", "[epic:123]"
# and incident URLs (``.../-/issues/incident/123``) as references (``app/models/issue.rb``).
_NUMBERED = re.compile(r"(?:[#!&]|\bGH-|GL-)(?=[0-9])", re.IGNORECASE)
_BRACKETED = re.compile(r"\[(?=(?:work_item|epic):)", re.IGNORECASE)
_ISSUE_URL = re.compile(
    r"/(?:issues(?:/incident)?|pulls?|merge_requests|work_items|epics|discussions)/(?=[0-9])",
    re.IGNORECASE,
)
_COMMAND_LINE = re.compile(r"^([ \t]*)/", re.MULTILINE)


def inert_quote(text: str) -> str:
    """``text`` someone else wrote (an agent's question, test output, a CI check's name),
    masked and made inert to quote where a forge acts on words under the daemon's token:
    no ``@name`` or ``@org/team`` mention, no ``#3``, ``!5``, ``&7``, ``GH-3``, ``GL-3``,
    ``[work_item:3]``, ``other/repo#3`` or issue URL reference (a back-link on that issue),
    no line starting with ``/`` (a GitLab quick action, run with the daemon's permissions),
    no HTML entity spelling one of those signs (``&#64;``). The text reads the same; the
    daemon's own words around it (a mention of the person it answers) keep working.

    Masked first: a secret with an ``@`` in it must still be found whole.
    """
    text = mask(text).replace("\r\n", "\n").replace("\r", "\n")
    text = _ENTITY.sub("&amp;", text)
    text = _MENTION.sub("@" + BREAK, text)
    text = _NUMBERED.sub(lambda found: found.group(0) + BREAK, text)
    text = _BRACKETED.sub("[" + BREAK, text)
    text = _ISSUE_URL.sub(lambda found: found.group(0) + BREAK, text)
    return _COMMAND_LINE.sub(lambda found: found.group(1) + BREAK + "/", text)


def shown_url(url: str, limit: int = 300) -> str:
    """An address someone else chose (a CI's log link), to show as text: one code span.

    No whitespace, backtick or invisible character survives, so it cannot end the span,
    start a line of markup or hide anything; bounded to ``limit`` characters.
    """
    kept = "".join(
        char
        for char in url
        if char.isprintable() and not char.isspace() and char != "`" and not is_invisible(char)
    )
    if len(kept) > limit:
        kept = kept[:limit] + "..."
    return f"`{kept}`" if kept else "(none)"
