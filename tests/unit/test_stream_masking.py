"""A secret split across the pieces of a stream is masked as in the whole text.

The HTTP layer masks a streamed body (the event stream); a writer, or an agent
whose output it carries, decides where the pieces are cut: at a flush, a pause,
or a known chunk size. Whatever the cuts, what is sent is what ``mask`` makes
of the whole text, and a held tail is never sent unmasked.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.masking import mask, register_secret
from pipeline.core.stream_mask import StreamMasker
from pipeline.http.masking import MaskingMiddleware

KEY = "sntl-agent-key-7Qx9é-vLp2"  # a two-byte character: a chunk can split it too
SECRETS = ("alpha-secret-11", "secret-11-omega", "abab-abab-abab", "p/ss@wd 9x-zz")
WORDS = (
    *SECRETS,
    *("…", " ", "x", "\n", "é", "alpha-", "-omega", "ab", "secret-11", "11-omega", "cret-1"),
    *("YWxwaGEtc2VjcmV0LTEx", "p%2Fss", "1…", "…s"),
)


def streamed(pieces: list[str]) -> str:
    masker = StreamMasker()
    return "".join(masker.feed(piece) for piece in pieces) + masker.close()


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c for c in cuts if c <= len(text)})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def test_a_key_split_at_any_point_of_two_pieces_is_masked() -> None:
    register_secret(KEY)
    text = f'data: {{"message": "echo {KEY} done"}}\n\n'
    for at in range(len(text) + 1):
        assert streamed([text[:at], text[at:]]) == mask(text) == text.replace(KEY, "***"), at


def test_a_key_split_into_three_pieces_anywhere_is_masked() -> None:
    register_secret(KEY)
    text = f"a{KEY}b"
    for first in range(len(text) + 1):
        for second in range(first, len(text) + 1):
            pieces = [text[:first], text[first:second], text[second:]]
            assert streamed(pieces) == "a***b", pieces


def test_the_start_of_a_key_is_held_back_never_shown() -> None:
    """Flushed half of the key, then a pause: nothing of it is shown until it is masked."""
    register_secret(KEY)
    for size in range(1, len(KEY)):
        masker = StreamMasker()
        assert masker.feed(f"line: {KEY[:size]}") == "line: "
        assert masker.holding == KEY[:size]
        assert masker.feed(f"{KEY[size:]}\n") == "***\n"
        assert masker.close() == ""


def test_ordinary_text_passes_at_once() -> None:
    register_secret(KEY)
    masker = StreamMasker()
    for piece in ("data: hello\n\n", "tool call sntl\n", "plain text."):
        assert masker.feed(piece) == piece
    assert masker.holding == ""


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=16), st.lists(st.integers(0, 200), max_size=4))
def test_any_cuts_show_what_mask_makes_of_the_whole(words: list[str], cuts: list[int]) -> None:
    """Overlapping, self-overlapping, encoded and ``…``-cut secrets: cuts change nothing."""
    for secret in SECRETS:
        register_secret(secret)
    text = "".join(words)
    assert streamed(_cut(text, cuts)) == mask(text)


def test_the_middleware_masks_a_key_split_at_any_byte_of_astreamed_body() -> None:
    register_secret(KEY)
    body = f"data: echo {KEY} done\n\n".encode()
    for at in range(len(body) + 1):
        sent = streamed_body([body[:at], body[at:]])
        assert b"".join(sent) == b"data: echo *** done\n\n", at


def test_the_middleware_masks_a_body_that_is_not_utf8() -> None:
    """A stray byte that is not UTF-8 is passed as it is; it does not turn masking off."""
    register_secret(KEY)
    assert b"".join(streamed_body([b"\xff " + KEY.encode() + b" \xfe"])) == b"\xff *** \xfe"
    assert b"".join(streamed_body([b"\xff ", KEY.encode(), b" \xfe"])) == b"\xff *** \xfe"


def streamed_body(chunks: list[bytes]) -> list[bytes]:
    """The bodies the masking middleware sends for an event stream of ``chunks``."""
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(dict(message))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    asyncio.run(MaskingMiddleware(app)({"type": "http"}, receive, send))
    return [m["body"] for m in sent if m["type"] == "http.response.body"]
