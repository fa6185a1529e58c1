"""Logging: human-readable by default, JSON lines with a flag, secrets masked.

Every secret the daemon resolves is registered with ``pipeline.core.masking``; a
filter masks each record's message and the formatters mask what they add
(tracebacks), whichever module logged it: a belt to the braces of never
formatting a secret in the first place.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from pipeline.core.masking import mask


class MaskingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class MaskingFormatter(logging.Formatter):
    """The standard text format, masked as a whole (tracebacks and stack included)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask(record.getMessage()),
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
            MaskingFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
        )
    handler.addFilter(MaskingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "apscheduler", "uvicorn.access", "git"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
