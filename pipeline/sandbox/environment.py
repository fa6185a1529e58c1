"""The environment a sandboxed command starts with: an explicit list, nothing inherited.

The daemon's own environment holds its secrets (forge and push tokens, the
webhook secret, the API token). A sandboxed command gets only the host
variables named in ``DEFAULT_PASS_ENV`` plus the ones the operator adds with
``pass_env`` (secret-looking names are refused at config load), then what the
pipeline sets itself: ``HOME``, ``TMPDIR``, the package caches, the preset's
``env`` table, and an agent's own API key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

# Host variables passed through to every sandboxed command when the daemon has them.
DEFAULT_PASS_ENV: tuple[str, ...] = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TERM",
    "USER",
    "LOGNAME",
    "SHELL",
    # Trust stores, so HTTPS through the proxy verifies like on the host.
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    # Toolchains installed outside PATH's usual places.
    "JAVA_HOME",
    "GOROOT",
    "RUSTUP_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    # Git's identity for the agent's own commits, and no system config.
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
    "GIT_CONFIG_NOSYSTEM",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_TMP = "/tmp"


def sandbox_environment(
    host: Mapping[str, str],
    *,
    home: Path,
    extra_pass: Iterable[str] = (),
    settings: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The pass-through variables of ``host``, then ``HOME``/``TMPDIR`` and ``settings``."""
    names = (*DEFAULT_PASS_ENV, *extra_pass)
    env = {name: host[name] for name in names if name in host}
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = str(home)
    env["TMPDIR"] = SANDBOX_TMP
    env.update(settings or {})
    return env
