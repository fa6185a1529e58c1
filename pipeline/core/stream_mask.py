"""Masking a text that arrives in pieces: a secret split across two pieces is masked too.

``mask`` masks one whole text. A stream (a streamed HTTP body) arrives in pieces
cut wherever its writer flushed or a buffer filled, and an agent can print its
key in two flushes a second apart, or exactly across a known chunk size:
masked piece by piece, both halves would show. ``StreamMasker`` shows each
piece's text only up to a safe cut and holds the rest back until the next piece
(or the end, ``close``):

- the longest tail that is the start of a registered form (at most the longest
  form's length - 1 characters; usually nothing), since the next piece may
  complete the secret;
- a ``…`` whose rest could be the start of a cut secret's tail, with that rest
  (and likewise the stream's start, while all of it could be such a tail);
- and, moved back until none is cut, every place ``mask`` replaces that the cut
  would split (overlapping secrets, a secret's head cut short before a ``…``).

What is shown is masked where ``mask`` masks the whole text: the places are
found in the held text and the new piece read after the end of what was shown
(kept unmasked in memory, never shown again), so a cut is no text edge to
``mask``. Ordinary text passes without delay: nothing is held that cannot start
a secret, and a held tail is never shown unmasked. A run of overlapping secrets
longer than ``HOLD_LIMIT`` characters is cut at its open end anyway, so memory
stays bounded.
"""

from __future__ import annotations

from pipeline.core.masking import ELLIPSIS, MASK, has_secrets, mask_spans, registered_forms

HOLD_LIMIT = 1 << 20
Spans = list[tuple[int, int]]


class StreamMasker:
    """Masks one stream of text given in pieces (see the module docstring)."""

    def __init__(self) -> None:
        self._shown = ""  # the end of what was shown, unmasked: the next text's context
        self._held = ""
        self._begun = False  # shown anything yet: before, the text's start is the stream's

    @property
    def holding(self) -> str:
        """The text held back, unmasked: never to be shown as it is."""
        return self._held

    def feed(self, piece: str) -> str:
        """The masked text that can be shown now; the rest is held for the next piece."""
        return self._emit(piece, final=False)

    def close(self) -> str:
        """The end of the stream: what is still held, masked."""
        return self._emit("", final=True)

    def _emit(self, piece: str, *, final: bool) -> str:
        if not has_secrets():
            text, self._held, self._shown = self._held + piece, "", ""
            return text
        forms = registered_forms()
        base = len(self._shown)
        text = self._shown + self._held + piece
        spans = [span for span in mask_spans(text) if span[0] >= base]
        cut = len(text) if final else safe_cut(text, forms, spans, base)
        if not self._begun and not final and any(text in form for form in forms):
            cut = 0  # it could begin a secret's tail, which ``mask`` masks at a text's start
        self._begun = self._begun or cut > 0
        self._held = text[cut:]
        self._shown = text[max(0, cut - len(forms[0])) : cut]
        return masked_part(text, [s for s in spans if s[1] <= cut], base, cut)


def safe_cut(text: str, forms: tuple[str, ...], spans: Spans, base: int = 0) -> int:
    """How much of ``text`` can be shown, masked at ``spans``, whatever follows it."""
    open_cut = max(base, len(text) - open_end(text, forms))
    cut = _before_open_ellipsis(text, open_cut, forms, base)
    moved = True
    while moved and cut > base:
        moved = False
        for start, end in spans:
            if start < cut < end or (start < cut == end and text.startswith(ELLIPSIS, cut)):
                cut, moved = start, True
    return open_cut if cut == base and len(text) - base > HOLD_LIMIT else cut


def open_end(text: str, forms: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is the start (not the whole) of a form."""
    best = 0
    for form in forms:
        if len(form) - 1 <= best:
            continue
        at = text.find(form[0], max(0, len(text) - len(form) + 1), len(text) - best)
        while at != -1:
            if form.startswith(text[at:]):
                best = len(text) - at  # the first such start makes the longest tail
                break
            at = text.find(form[0], at + 1, len(text) - best)
    return best


def _before_open_ellipsis(text: str, cut: int, forms: tuple[str, ...], base: int) -> int:
    """``cut``, or the last ``…`` before it when what follows that could begin a secret's
    tail that the next piece continues (``mask`` masks a shorter tail after a ``…``)."""
    at = text.rfind(ELLIPSIS, max(base, cut - len(forms[0])), cut)
    if at == -1:
        return cut
    rest = text[at + len(ELLIPSIS) :]
    return at if any(rest in form for form in forms) else cut


def masked_part(text: str, spans: Spans, start: int, end: int) -> str:
    """``text[start:end]`` with each run of overlapping ``spans`` (all inside it) masked."""
    pieces: list[str] = []
    done = start
    run_end = -1
    for span_start, span_end in sorted(spans):
        if span_start < run_end:
            run_end = max(run_end, span_end)
            continue
        if run_end != -1:
            pieces.append(MASK)
            done = run_end
        pieces.append(text[done:span_start])
        run_end = span_end
    if run_end != -1:
        pieces.append(MASK)
        done = run_end
    pieces.append(text[done:end])
    return "".join(pieces)
