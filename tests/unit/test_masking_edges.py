"""``mask`` and ``redact_url`` on large texts and at their edges: nothing a shortcut may skip.

A differential check pins both to their plain definitions: after the URL
userinfo expression, every place any registered form occurs (overlapping ones
included) merged into runs, each run one ``***``, on any text a generator
builds from URL pieces, separators and secret fragments.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.agents.streams import RedactingSink
from pipeline.config.settings import AgentPreset
from pipeline.core.logs import JsonFormatter, MaskingFilter, MaskingFormatter
from pipeline.core.masking import MASK, mask, redact_url, register_secret
from pipeline.core.secret_forms import text_forms
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.store.masked import mask_json
from pipeline.testing.gitrepos import git
from pipeline.testing.sinks import RecordingSink
from tests.unit.test_stream_masking import streamed_body

TOKEN = "sntl-token-7Qx9vLp2"
LISTING = "".join(f"src/pkg{n // 100:03d}/module_{n:05d}.py\n" for n in range(30_000))
# The definition of URL redaction: ``scheme://userinfo@`` with the credentials hidden.
URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^/@\s]+)@")
NAMED_USERS = {"postgresql", "postgres", "postgresql+psycopg", "ssh", "git+ssh"}
SECRETS = ("alpha-secret-11", "secret-11-omega", "alpha-secret-11-omega-22", "p/ss@wd 9x")


def reference_redact(text: str, forms: list[str]) -> str:
    """URL userinfo redaction, then each run of overlapping occurrences of ``forms`` masked."""

    def userinfo(match: re.Match[str]) -> str:
        scheme, (user, colon, _) = match["scheme"], match["userinfo"].partition(":")
        if colon:
            shown = f"{user}:{MASK}" if user else MASK
        else:
            shown = user if scheme.lower() in NAMED_USERS else MASK
        return f"{scheme}://{shown}@"

    text = URL_USERINFO.sub(userinfo, text)
    found = sorted(
        (m.start(), m.start() + len(form))
        for form in set(forms)
        for m in re.finditer(f"(?={re.escape(form)})", text)
    )
    runs: list[list[int]] = []
    for start, end in found:
        if runs and start < runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    for start, end in reversed(runs):
        text = text[:start] + MASK + text[end:]
    return text


PIECES = st.sampled_from(
    [
        *SECRETS,
        "alpha-",  # then "secret-11-omega": two secrets overlapping
        "-omega",
        "https",
        "ssh",
        "x1",
        "://",
        ":",
        "/",
        "@",
        " ",
        "\n",
        "-",
        "+",
        ".",
        "9",
        "a",
        "%",
        "p%2Fss%40wd+9x",
    ]
)


@settings(max_examples=300)
@given(st.lists(PIECES, max_size=40))
def test_redaction_equals_its_plain_definition(pieces: list[str]) -> None:
    """Overlapping and nested secrets, URLs split anywhere: the same text as the definition."""
    for secret in SECRETS:
        register_secret(secret)
    text = "<" + "".join(pieces) + ">"  # edges that no secret's head or tail can be cut at
    forms = [form for secret in SECRETS for form in text_forms(secret).forms]
    assert redact_url(text) == reference_redact(text, forms)


def test_a_secret_at_the_very_start_and_end_of_a_long_listing_is_masked() -> None:
    """Shortcuts that look at the middle, or stop early, would miss these."""
    register_secret(TOKEN)
    text = f"{TOKEN}/first.py\n{LISTING}last/{TOKEN}"
    masked = redact_url(text)
    assert TOKEN not in masked
    assert masked == f"***/first.py\n{LISTING}last/***"


def test_a_lone_secret_deep_in_a_text_without_url_signs_is_masked() -> None:
    """No ``://`` and no ``@`` anywhere: the secret is masked all the same."""
    register_secret(TOKEN)
    middle = len(LISTING) // 2
    text = LISTING[:middle] + TOKEN + LISTING[middle:]
    assert "://" not in text and "@" not in text
    assert redact_url(text) == LISTING[:middle] + MASK + LISTING[middle:]
    assert mask(text) == LISTING[:middle] + MASK + LISTING[middle:]


def test_only_an_encoded_form_present_is_still_masked() -> None:
    """A text holding the secret only URL-encoded (not as written) is masked too."""
    register_secret("p@ss w0rd/with-99")
    text = LISTING + "url=p%40ss%20w0rd%2Fwith-99\n"
    assert redact_url(text) == LISTING + "url=***\n"


def test_url_credentials_inside_a_very_long_line_are_redacted() -> None:
    """One URL with a password and one with a token, in the middle of a long line."""
    filler = "x" * 5_000
    text = f"{filler} https://bot:ghp_unregistered99@git.test/a.git {filler}"
    text += f" https://ghp_tokenonly77@git.test/b {filler}\n" + LISTING
    masked = redact_url(text)
    assert "ghp_unregistered99" not in masked and "ghp_tokenonly77" not in masked
    assert "https://bot:***@git.test/a.git" in masked and "https://***@git.test/b" in masked


def test_a_scheme_glued_to_a_long_word_is_redacted_like_any_other() -> None:
    """The scheme is the letters-and-digits run just before ``://``, however long."""
    word = "a1" * 50_000
    assert redact_url(f"{word}://u:pw-secret@h") == f"{word}://u:***@h"
    assert redact_url(f"9-{word}://tok-secret@h x://a@b") == f"9-{word}://***@h x://***@b"
    assert redact_url("-://u:p@h 1://u:p@h") == "-://u:p@h 1://u:p@h"


def test_many_registered_secrets_are_each_masked_once_present() -> None:
    """Three hundred secrets registered, each in the text: every one is masked."""
    secrets = [f"many-secret-{n:04d}-Zq" for n in range(300)]
    for secret in secrets:
        register_secret(secret)
    text = "\n".join(f"line {n} {secret} end" for n, secret in enumerate(secrets))
    masked = mask(LISTING + text)
    assert masked.endswith("\n".join(f"line {n} *** end" for n in range(300)))
    assert not any(secret in masked for secret in secrets)


def test_a_secret_nested_in_a_longer_one_masks_the_longer_whole() -> None:
    """Longest first: the outer secret is masked whole, not left around the inner one."""
    register_secret("INNER-TOKEN-1234")
    register_secret("outer-INNER-TOKEN-1234-suffix")
    assert mask("a outer-INNER-TOKEN-1234-suffix b INNER-TOKEN-1234") == "a *** b ***"


def test_a_secret_registered_after_a_masking_is_masked_from_then_on() -> None:
    """Whatever a shortcut keeps between calls follows the registry."""
    text = LISTING + TOKEN
    assert mask(text) == text
    register_secret(TOKEN)
    assert mask(text) == LISTING + MASK


# Two different secrets overlapping in the text ------------------------------------
# An agent can print a secret it knows (its own key) or a guessable prefix of one
# glued to another: masking the first found must not leave the rest of the second.

LEFT, RIGHT = "abcdefgh-1234", "1234-ijklmnopqrst"  # RIGHT starts with LEFT's tail
GLUED = "abcdefgh-1234-ijklmnopqrst"
CHAIN = ("alpha-0001-bravo", "bravo-0002-charlie", "charlie-0003-delta")


@pytest.mark.parametrize("order", [(LEFT, RIGHT), (RIGHT, LEFT)])
@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"x {GLUED} y", "x *** y"),  # the shorter first in the text
        (GLUED, MASK),  # the whole text
        (f"{GLUED}\n{GLUED}", "***\n***"),
        ("x 9999-abcdefgh-1234-ijklmnopqrst-7777 y", "x 9999-***-7777 y"),
    ],
)
def test_two_overlapping_secrets_are_masked_as_one_span(
    order: tuple[str, str], text: str, masked: str
) -> None:
    for secret in order:
        register_secret(secret)
    assert mask(text) == masked
    assert redact_url(text) == masked


def test_a_longer_secret_overlapping_a_shorter_one_on_its_left_is_masked_whole() -> None:
    """The longer one found first at its position: the shorter one's tail must not show."""
    register_secret("head-secret-LONGER-9876")
    register_secret("9876-tail-abc")
    assert mask("<head-secret-LONGER-9876-tail-abc>") == "<***>"
    assert mask("<9876-tail-abc head-secret-LONGER-9876-tail-abc>") == "<*** ***>"


def test_a_chain_of_three_overlapping_secrets_is_masked_as_one_span() -> None:
    for secret in CHAIN:
        register_secret(secret)
    text = "alpha-0001-bravo-0002-charlie-0003-delta"
    assert mask(f"[{text}]") == "[***]"
    assert mask(f"[{text}] [{CHAIN[1]}] [{CHAIN[0]}{CHAIN[2]}]") == "[***] [***] [******]"


def test_a_secret_overlapping_itself_is_masked_whole() -> None:
    """A periodic secret repeated with overlap: each occurrence, hence the whole run."""
    register_secret("abab-abab-abab")
    assert mask("<abab-abab-abab-abab>") == "<***>"


def test_an_encoded_form_overlapping_another_secret_is_masked_as_one_span() -> None:
    """The URL-encoded form of one secret glued to the other as written."""
    register_secret("p@ss w0rd/with-99")
    register_secret("with-99-tail-secret")
    assert mask("url=p%40ss%20w0rd%2Fwith-99-tail-secret&x") == "url=***&x"
    assert mask('{"k": "p@ss w0rd/with-99-tail-secret"}') == '{"k": "***"}'


@pytest.mark.parametrize("user", ["bot:", "bo:", "b:", ""])
def test_basic_auth_of_two_overlapping_secrets_shows_no_more_than_alignment(user: str) -> None:
    """base64 of ``user:`` and two glued secrets: both encodings, merged, hide the middle."""
    register_secret(LEFT)
    register_secret(RIGHT)
    encoded = base64.b64encode(f"{user}{GLUED}".encode()).decode()
    head, star, tail = mask(encoded).partition(MASK)
    assert star
    assert len(head) <= len(user) * 4 // 3 + 4  # the user, and one group of 3 bytes
    assert len(tail.replace(MASK, "")) <= 4  # one group of 3 bytes (and padding)


def test_a_cut_inside_the_second_of_two_overlapping_secrets_is_masked() -> None:
    """A summary cut short at ``…`` within the second secret: its head is masked too."""
    register_secret(LEFT)
    register_secret(RIGHT)
    assert mask(f"Bash echo {GLUED[:18]}… more") == "Bash echo ***… more"
    assert mask(f"{GLUED[5:]} end") == "*** end"  # cut at the text's start, no marker
    assert mask(f"…{GLUED[6:]} end") == "…*** end"


def test_overlapping_secrets_in_a_url_userinfo_are_hidden_by_the_git_runner(
    tmp_path: Path,
) -> None:
    """A ``/`` in the glued secrets keeps the userinfo from being redacted: masking must do it."""
    register_secret("tok/en-AAAA-1234")
    register_secret("1234-BB/BB-cccc")
    git(tmp_path, "init", "-q", "--initial-branch=main", "repo")
    runner = GitRunner(GitRepo.plain(tmp_path / "repo"))
    line = "https://tok/en-AAAA-1234-BB/BB-cccc@git.test/r.git\n"
    blob = runner.ok("hash-object", "-w", "--stdin", input_data=line.encode()).strip()
    assert runner.ok("cat-file", "-p", blob) == "https://***@git.test/r.git\n"
    assert runner.run("cat-file", "-p", blob).stdout == "https://***@git.test/r.git\n"


def test_overlapping_secrets_are_masked_in_every_place_text_is_shown() -> None:
    """Log lines, agent events, a streamed HTTP chunk and stored JSON all go through ``mask``."""
    register_secret(LEFT)
    register_secret(RIGHT)
    line = f"printed {GLUED} done"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(MaskingFormatter("%(message)s"))
    handler.addFilter(MaskingFilter())
    logger = logging.getLogger("test-masking-overlap")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("agent said %s", line)
    logger.removeHandler(handler)
    assert stream.getvalue() == "agent said printed *** done\n"
    assert json.loads(JsonFormatter().format(_record(line)))["message"] == "printed *** done"

    sink = RecordingSink()
    RedactingSink(sink, AgentPreset(name="c", kind="command", command=("true",)))(
        "tool", line, {"input": {"command": f"echo {GLUED}"}}
    )
    assert sink.events == [("tool", "printed *** done", {"input": {"command": "echo ***"}})]
    assert mask_json(json.dumps({"m": line})) == json.dumps({"m": "printed *** done"})
    assert _streamed_chunks([f"data: {line}\n\n", f"data: {GLUED}\n\n"]) == [
        b"data: printed *** done\n\n",
        b"data: ***\n\n",
    ]


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("x", logging.WARNING, __file__, 1, message, None, None)


def _streamed_chunks(chunks: list[str]) -> list[bytes]:
    """The non-empty bodies the masking middleware sends for an event stream of ``chunks``."""
    return [body for body in streamed_body([chunk.encode() for chunk in chunks]) if body]
