"""The secret registry and ``mask``: every form a secret can take in text is hidden."""

from __future__ import annotations

import base64
import html
import io
import json
import logging
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config.settings import (
    HttpSettings,
    NotifySettings,
    PushSettings,
    RepoSettings,
    SecretRef,
    Settings,
    TrackerSettings,
)
from pipeline.core.logs import JsonFormatter, MaskingFilter, MaskingFormatter
from pipeline.core.masking import (
    MIN_SECRET_LEN,
    mask,
    mask_data,
    redact_url,
    register_secret,
    register_secret_bytes,
    register_settings_secrets,
)
from pipeline.store.masked import mask_json
from pipeline.workspace.evidence import write_manifest

TOKEN = "sntl-token-7Qx9vLp2"


def test_a_registered_secret_is_masked_wherever_it_appears() -> None:
    """The value itself is replaced by *** anywhere in a text, as often as it occurs."""
    register_secret(TOKEN)
    assert mask(f"a {TOKEN} b {TOKEN}") == "a *** b ***"
    assert mask("nothing secret here") == "nothing secret here"


def test_values_shorter_than_the_minimum_are_not_registered() -> None:
    """A tiny value would mask ordinary words, so it is refused (and said so)."""
    assert not register_secret("x" * (MIN_SECRET_LEN - 1))
    assert mask("x" * 20) == "x" * 20
    assert register_secret("y" * MIN_SECRET_LEN)


def test_each_line_of_a_multi_line_secret_is_masked() -> None:
    """A file of several secrets (apprise URLs, a key) hides each line on its own."""
    register_secret("first-line-secret\n  second-line-secret  \n")
    assert mask("x first-line-secret y second-line-secret") == "x *** y ***"


def test_url_passwords_are_masked_written_and_decoded() -> None:
    """json://user:p%40ss@host hides the password as written and as decoded."""
    register_secret("json://alice:p%40ssw0rd-Zq@127.0.0.1:9999/notify")
    assert mask("password p@ssw0rd-Zq") == "password ***"
    assert mask("encoded p%40ssw0rd-Zq") == "encoded ***"
    assert mask("sent to json://127.0.0.1") == "sent to json://127.0.0.1"


def test_token_parts_of_apprise_urls_are_masked() -> None:
    """slack://TokenA/TokenB/TokenC: host and path are credentials, each is masked."""
    register_secret("slack://T0KENAAAAA/B0KENBBBBB/C0KENCCCCCC")
    assert mask("T0KENAAAAA B0KENBBBBB C0KENCCCCCC") == "*** *** ***"


def test_https_url_tokens_and_query_tokens_are_masked() -> None:
    """https://user:token@host and ?token=... hide the token."""
    register_secret("https://bot:ghp_abcdef123456@example.test/hook?token=qwerty-98765")
    assert mask("ghp_abcdef123456 and qwerty-98765") == "*** and ***"


@pytest.mark.parametrize(
    "secret", ["p@ss w0rd/with&stuff<x>", 'quote"and\\slash-99', "ünïcödé-sêcret"]
)
def test_encoded_forms_are_masked(secret: str) -> None:
    """URL-encoded, JSON-escaped and HTML-escaped forms of a secret are masked too."""
    register_secret(secret)
    for form in (
        quote(secret, safe=""),
        quote_plus(secret),
        json.dumps(secret),
        json.dumps(secret, ensure_ascii=False),
        html.escape(secret),
    ):
        assert secret not in mask(form)
        assert "***" in mask(form), form
    assert mask(json.dumps({"k": secret})) == json.dumps({"k": "***"})


@given(user=st.text(max_size=12), tail=st.binary(max_size=6))
def test_base64_basic_auth_of_any_user_is_masked(user: str, tail: bytes) -> None:
    """base64("user:" + secret) loses every character that depends on the secret alone."""
    register_secret(TOKEN)
    raw = user.encode("utf-8") + b":" + TOKEN.encode() + tail
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        masked = mask("Authorization: Basic " + encode(raw).decode("ascii"))
        assert "***" in masked
        # What survives is at most the 4-character groups shared with the user and tail.
        longest = max(
            len(piece) for piece in masked.removeprefix("Authorization: Basic ").split("***")
        )
        assert longest <= 4 * ((len(user.encode()) + 1) // 3 + 1) + 4 * (len(tail) // 3 + 2)


def test_a_secret_cut_short_at_an_ellipsis_is_masked() -> None:
    """The part before or after a "…" marker is masked once 4 characters of it show."""
    register_secret(TOKEN)
    assert mask("Bash echo sntl-tok…") == "Bash echo ***…"
    assert mask("…ken-7Qx9vLp2 done") == "…*** done"
    assert mask("a sntl-…b") == "a ***…b"
    assert mask("a snt…") == "a snt…"


def test_a_secret_cut_at_the_edge_without_marker_is_masked_when_long() -> None:
    """A tail cut off with [-N:] or a head cut with [:N] is masked from 8 characters on."""
    register_secret(TOKEN)
    assert mask("output: sntl-token") == "output: ***"
    assert mask("en-7Qx9vLp2 and more") == "*** and more"
    assert mask("ends with sntl-to") == "ends with sntl-to"


def test_a_cut_url_secret_shows_past_its_scheme_before_it_is_masked() -> None:
    """Summaries ending in "json://…" are not masked for every json:// URL configured."""
    register_secret("json://alice:p%40ssw0rd-Zq@127.0.0.1:9999/notify")
    assert mask("see json://…") == "see json://…"
    assert mask("see json://alice:p…") == "see ***…"


def test_a_channel_url_without_credentials_shows_its_host_when_cut() -> None:
    """A notify URL's scheme and host are public (events name the channel by them)."""
    register_secret("json://127.0.0.1:9999/notify-path-x1")
    assert mask("escalation sent to json://127.0.0.1") == "escalation sent to json://127.0.0.1"
    assert mask("sent to json://127.0.0.1:9999") == "sent to json://127.0.0.1:9999"
    assert mask("see json://127.0.0.1:9999/noti…") == "see ***…"
    assert mask("json://127.0.0.1:9999/notify-path-x1") == "***"


def test_mask_data_masks_every_string_keys_included() -> None:
    """Nested dicts and lists are masked all the way down; other values kept."""
    register_secret(TOKEN)
    data = {"a": [TOKEN, {"b": f"x{TOKEN}"}], TOKEN: 3, "n": None, "f": 1.5}
    assert mask_data(data) == {"a": ["***", {"b": "x***"}], "***": 3, "n": None, "f": 1.5}


def test_masked_json_stays_valid_json() -> None:
    """JSON text is masked inside its strings, also for secrets JSON escapes."""
    secret = 'json"quote\\secret-1'
    register_secret(secret)
    text = json.dumps({"cmd": f"echo {secret}", "n": 1}, sort_keys=True)
    assert json.loads(mask_json(text)) == {"cmd": "echo ***", "n": 1}
    assert mask_json("not json " + secret) == "not json ***"


def test_binary_key_forms_are_masked() -> None:
    """A binary key file hides as base64 and hex, at any offset."""
    key = bytes(range(256))[::-1] * 2
    register_secret_bytes(key)
    assert "***" in mask(base64.b64encode(key).decode())
    assert mask(key.hex()) == "***"
    assert "***" in mask(base64.b64encode(b"xy" + key).decode())


def test_redact_url_is_the_one_url_redaction() -> None:
    """Passwords and token-only userinfo are hidden; login names of databases and ssh kept."""
    assert redact_url("git https://x:tok@h/a.git") == "git https://x:***@h/a.git"
    assert redact_url("https://tok@github.com/a") == "https://***@github.com/a"
    assert redact_url("postgresql://pg:pw@db/x") == "postgresql://pg:***@db/x"
    assert redact_url("postgresql://pg@db/x") == "postgresql://pg@db/x"
    assert redact_url("ssh://git@host/x git@host:a.git") == "ssh://git@host/x git@host:a.git"


def test_a_secret_resolved_later_is_masked_from_then_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotated secret is registered the moment it is resolved again."""
    ref = SecretRef(env="AFK_TEST_ROTATING")
    monkeypatch.setenv("AFK_TEST_ROTATING", "first-rotating-secret")
    ref.resolve()
    monkeypatch.setenv("AFK_TEST_ROTATING", "second-rotating-secret")
    assert mask("second-rotating-secret") == "second-rotating-secret"
    ref.resolve()
    assert mask("first-rotating-secret second-rotating-secret") == "*** ***"


def test_settings_secrets_are_registered_with_a_warning_for_short_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SecretRef, URL passwords and the git-crypt key file; short secrets are named."""
    monkeypatch.setenv("AFK_T_TOKEN", "tracker-token-1234")
    monkeypatch.setenv("AFK_T_HOOK", "tiny7")
    key = tmp_path / "key"
    key.write_bytes(b"\x00GITCRYPTKEY" + bytes(range(64)))
    settings = Settings(
        database_url="postgresql://pg:db-password-77@db/x",
        volume=tmp_path,
        http=HttpSettings(api_token=SecretRef(env="AFK_T_MISSING")),
        trackers=(
            TrackerSettings(
                name="gh",
                kind="github",
                token=SecretRef(env="AFK_T_TOKEN"),
                webhook_secret=SecretRef(env="AFK_T_HOOK"),
            ),
        ),
        repos=(
            RepoSettings(
                name="app",
                tracker="gh",
                slug="a/b",
                remote_url="https://u:remote-token-55@git.test/a/b.git",
                workspace="clone",
                git_crypt_key=SecretRef(file=key),
                push=PushSettings(),
            ),
        ),
        notify=NotifySettings(),
    )
    warnings = register_settings_secrets(settings)
    assert len(warnings) == 1 and "trackers.gh.webhook_secret (<env AFK_T_HOOK>)" in warnings[0]
    assert "tiny7" not in warnings[0]
    text = "tracker-token-1234 db-password-77 remote-token-55 " + key.read_bytes().hex()
    assert mask(text) == "*** *** *** ***"


def test_log_output_is_masked_tracebacks_included() -> None:
    """Text and JSON log lines hide secrets in the message and in exception text."""
    register_secret(TOKEN)
    for formatter in (MaskingFormatter("%(message)s"), JsonFormatter()):
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(formatter)
        handler.addFilter(MaskingFilter())
        logger = logging.getLogger(f"test-masking-{type(formatter).__name__}")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            raise RuntimeError(f"failed with {TOKEN}")
        except RuntimeError:
            logger.exception("token %s", TOKEN)
        logger.removeHandler(handler)
        assert TOKEN not in stream.getvalue() and "***" in stream.getvalue()


def test_plain_words_in_apprise_urls_are_not_secrets() -> None:
    """Options and channel names (?format=markdown, /general) stay readable; tokens do not."""
    register_secret("slack://T0KENAAAAA/B0KENBBBBB/C0KENCCCCCC/announcements?format=markdown")
    assert mask("markdown announcements T0KENAAAAA") == "markdown announcements ***"


def test_evidence_manifest_is_written_masked(tmp_path: Path) -> None:
    """The frozen evidence's manifest.json holds no secret, however deep in its fields."""
    register_secret(TOKEN)
    write_manifest(tmp_path, {"reason": f"blocked: {TOKEN}", "extra": {"tail": [TOKEN]}})
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["reason"] == "blocked: ***" and manifest["extra"] == {"tail": ["***"]}
