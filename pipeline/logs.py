"""Logging: human-readable by default, JSON lines with a flag, secrets masked.

Every secret the daemon resolves is registered here, and a filter replaces it
with ``***`` in every record, whichever module logged it: a belt to the braces
of never formatting a secret in the first place.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterable
from datetime import UTC, datetime

from pipeline.settings import SecretRef, Settings

_SECRETS: set[str] = set()
_LOCK = threading.Lock()
MIN_SECRET_LEN = 4


def register_secret(value: str | None) -> None:
    if value and len(value) >= MIN_SECRET_LEN:
        with _LOCK:
            _SECRETS.add(value)


def mask(text: str) -> str:
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def secret_refs(settings: Settings) -> Iterable[SecretRef]:
    """Every secret reference in the settings."""
    yield settings.http.api_token
    yield settings.notify.urls
    for tracker in settings.trackers:
        yield tracker.token
        yield tracker.webhook_secret
    for agent in settings.agents:
        yield agent.api_key
    for repo in settings.repos:
        yield repo.push.token
        yield repo.ci.token
        yield repo.git_crypt_key


def register_settings_secrets(settings: Settings) -> None:
    for ref in secret_refs(settings):
        value = ref.resolve()
        if value:
            register_secret(value)
            for line in value.splitlines():
                register_secret(line.strip())


class MaskingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            payload["exception"] = mask(self.formatException(record.exc_info))
        return json.dumps(payload)


def configure(level: str = "info", fmt: str = "text", stream: object = None) -> None:
    """Set up the root logger once for the daemon."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    handler.addFilter(MaskingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "apscheduler", "uvicorn.access", "git"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
