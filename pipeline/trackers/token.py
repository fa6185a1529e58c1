"""The header that carries a forge token, and reading the token again when it is rotated.

A token written to a file by something that rotates it (a GitHub App's installation
token lasts an hour; an operator replaces a revoked one) changes under a running
daemon. After a 401 the client reads the token's source again and, when it holds
another token, retries once with it (``ForgeHttp``), so rotation needs no restart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config.settings import SecretRef


@dataclass(frozen=True)
class TokenHeader:
    """``name: template`` with the token in place of ``{}``; ``source`` holds the newest."""

    name: str
    template: str
    token: str
    source: SecretRef | None = None

    def __repr__(self) -> str:
        return f"TokenHeader(name={self.name!r}, source={self.source!r})"

    def headers(self) -> dict[str, str]:
        return {self.name: self.template.replace("{}", self.token)}

    def renewed(self) -> TokenHeader | None:
        """The header with the token its source holds now; None when that is no other."""
        fresh = self.source.resolve() if self.source is not None else None
        return replace(self, token=fresh) if fresh and fresh != self.token else None
