"""Where a secret lives: an environment variable or a file, never the config file itself.

A ``SecretRef`` is resolved only when the secret is used; every value it resolves
to is registered for masking (``pipeline.core.masking``). In the file, a field
``NAME`` holding one is written ``NAME_env`` and/or ``NAME_file``.
"""

from __future__ import annotations

import os

from pipeline.config import values as v
from pipeline.core.masking import register_secret


@v.table
class SecretRef:
    """Where a secret lives: an environment variable or a file, never inline."""

    env: v.EnvName | None = None
    file: v.FilePath | None = None

    @property
    def configured(self) -> bool:
        return self.env is not None or self.file is not None

    def resolve(self) -> str | None:
        """Read the secret now (and register it for masking); ``None`` when absent."""
        value = self._read()
        register_secret(value)
        return value

    def _read(self) -> str | None:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value:
                return value
        if self.file is not None and self.file.is_file():
            return self.file.read_text(encoding="utf-8").strip() or None
        return None

    def describe(self) -> str:
        """A redacted description safe for logs and ``config show``."""
        if self.env is not None:
            return f"<env {self.env}>"
        if self.file is not None:
            return f"<file {self.file}>"
        return "<unset>"
