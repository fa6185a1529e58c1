"""The [http] keys that make the server safe to expose: parsed, and refused when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.load import load_settings
from pipeline.config.settings import SecretRef
from pipeline.core.errors import ConfigError


def load(tmp_path: Path, body: str) -> object:
    path = tmp_path / "pipeline.toml"
    path.write_text(f"[http]\n{body}\n", encoding="utf-8")
    return load_settings(path, environ={"PIPELINE_DATA_DIR": str(tmp_path)})


def test_exposure_keys_are_read(tmp_path: Path) -> None:
    """read_token_env, public_url, allowed_hosts and webhook_listen reach HttpSettings."""
    settings = load(
        tmp_path,
        'read_token_env = "READ_TOKEN"\npublic_url = "https://afk.example.com/"\n'
        'allowed_hosts = ["Ops.Internal"]\nwebhook_listen = "0.0.0.0:8788"',
    )
    http = settings.http  # type: ignore[attr-defined]
    assert http.read_token == SecretRef(env="READ_TOKEN")
    assert http.public_url == "https://afk.example.com"
    assert http.allowed_hosts == ("ops.internal",)
    assert http.webhook_listen == ("0.0.0.0", 8788)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('webhook_listen = "nowhere"', "http.webhook_listen"),
        ('public_url = "ftp://x"', "http.public_url"),
        ('read_token = "inline-secret"', "http.read_token"),
    ],
)
def test_bad_exposure_keys_are_named(tmp_path: Path, body: str, named: str) -> None:
    """A malformed key is a config error naming it, never a traceback or a silent default."""
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load(tmp_path, body)
