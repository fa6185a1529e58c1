"""``mask`` and ``redact_url`` on large texts and at their edges: nothing a shortcut may skip.

A differential check pins both to their plain definitions: one regular expression
of every registered form (longest first) after the URL userinfo expression, on
any text a generator builds from URL pieces, separators and secret fragments.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.masking import MASK, mask, redact_url, register_secret
from pipeline.core.secret_forms import text_forms

TOKEN = "sntl-token-7Qx9vLp2"
LISTING = "".join(f"src/pkg{n // 100:03d}/module_{n:05d}.py\n" for n in range(30_000))
# The definition of URL redaction: ``scheme://userinfo@`` with the credentials hidden.
URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^/@\s]+)@")
NAMED_USERS = {"postgresql", "postgres", "postgresql+psycopg", "ssh", "git+ssh"}
SECRETS = ("alpha-secret-11", "secret-11-omega", "alpha-secret-11-omega-22", "p/ss@wd 9x")


def reference_redact(text: str, forms: list[str]) -> str:
    """URL userinfo redaction, then one alternation of ``forms``, longest first."""

    def userinfo(match: re.Match[str]) -> str:
        scheme, (user, colon, _) = match["scheme"], match["userinfo"].partition(":")
        if colon:
            shown = f"{user}:{MASK}" if user else MASK
        else:
            shown = user if scheme.lower() in NAMED_USERS else MASK
        return f"{scheme}://{shown}@"

    text = URL_USERINFO.sub(userinfo, text)
    ordered = sorted(set(forms), key=lambda f: (-len(f), f))
    return re.compile("|".join(re.escape(f) for f in ordered)).sub(MASK, text)


PIECES = st.sampled_from(
    [
        *SECRETS,
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
