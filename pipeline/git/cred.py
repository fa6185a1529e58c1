"""Git credentials, given to one network git command in the daemon's mirror at a time.

The repo's ``push.token`` / ``push.ssh_key_file`` are the daemon's git
credentials: they serve clone, fetch and push alike (the keys kept their
historical name). They reach git only through the environment of the one
command that needs it, and that command only ever runs in the daemon-owned
mirror (ADR 0010): never on a command line (``ps`` shows those), never in a
repository's config, never in the agent's environment. An HTTPS token is handed
over by a ``GIT_ASKPASS`` script living in a private 0700 directory; the script
itself holds no secret, it prints a variable set only on that one git process.
Any credential helper a user configured is switched off for the command
(``credential.helper=``), so a stale cached credential cannot win over the
token.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pipeline.config.settings import PushSettings
from pipeline.core.errors import FatalError
from pipeline.core.masking import redact_url

TOKEN_VAR = "AFK_GIT_PUSH_TOKEN"
USERNAME_VAR = "AFK_GIT_PUSH_USERNAME"
# GitHub wants this name for app tokens and accepts it for personal tokens;
# Gitea and GitLab accept any name with a token as the password. A username
# written in the remote URL (https://name@host/...) takes precedence.
DEFAULT_USERNAME = "x-access-token"
_KEEPALIVE_PROBES = 4

_ASKPASS_SCRIPT = """#!/bin/sh
case "$1" in
  Username*|username*) printf '%s\\n' "${AFK_GIT_PUSH_USERNAME}" ;;
  *) printf '%s\\n' "${AFK_GIT_PUSH_TOKEN}" ;;
esac
"""


def with_config(env: dict[str, str], key: str, value: str) -> None:
    """Append one ``-c key=value`` to ``env`` the way git reads it from the environment."""
    count = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
    env[f"GIT_CONFIG_KEY_{count}"] = key
    env[f"GIT_CONFIG_VALUE_{count}"] = value
    env["GIT_CONFIG_COUNT"] = str(count + 1)


def ssh_command(key_file: Path | None, stall_s: int = 60) -> str:
    """The ``GIT_SSH_COMMAND``: never prompts, and gives up on a server silent for ``stall_s``."""
    interval = max(1, stall_s // _KEEPALIVE_PROBES)
    identity = f" -i {shlex.quote(str(key_file))} -o IdentitiesOnly=yes" if key_file else ""
    return (
        f"ssh{identity} -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
        f" -o ConnectTimeout={stall_s} -o ServerAliveInterval={interval}"
        f" -o ServerAliveCountMax={_KEEPALIVE_PROBES}"
    )


@contextmanager
def credential_env(
    push: PushSettings | None, base_env: Mapping[str, str], *, stall_s: int = 60
) -> Iterator[dict[str, str]]:
    """An environment for one network git command; its secrets vanish on exit.

    The token is resolved now (not at config load); the askpass directory is
    removed when the block ends. Without a configured key, an operator's own
    ``GIT_SSH_COMMAND`` is kept; otherwise SSH gets keepalives too.
    """
    env = dict(base_env)
    env["GIT_TERMINAL_PROMPT"] = "0"
    key_file = _key_file(push)
    if key_file is not None or not ({"GIT_SSH_COMMAND", "GIT_SSH"} & set(env)):
        env["GIT_SSH_COMMAND"] = ssh_command(key_file, stall_s)
    token = _token(push)
    if token is None:
        yield env
        return
    private_dir = Path(tempfile.mkdtemp(prefix="afk-askpass-"))
    try:
        os.chmod(private_dir, 0o700)
        script = private_dir / "askpass.sh"
        script.write_text(_ASKPASS_SCRIPT, encoding="utf-8")
        os.chmod(script, 0o700)
        env["GIT_ASKPASS"] = str(script)
        env[TOKEN_VAR] = token
        env.setdefault(USERNAME_VAR, DEFAULT_USERNAME)
        with_config(env, "credential.helper", "")
        yield env
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)


def _key_file(push: PushSettings | None) -> Path | None:
    if push is None or push.ssh_key_file is None:
        return None
    if not push.ssh_key_file.is_file():
        raise FatalError(
            "push_credentials",
            f"push.ssh_key_file {push.ssh_key_file} does not exist or is not a file",
        )
    return push.ssh_key_file


def _token(push: PushSettings | None) -> str | None:
    if push is None or not push.token.configured:
        return None
    token = push.token.resolve()
    if token is None:
        raise FatalError(
            "push_credentials",
            f"push.token {push.token.describe()} is configured but empty or missing",
        )
    return token


def scrub(text: str, push: PushSettings | None) -> str:
    """``text`` for messages and events: URL credentials and every secret masked.

    The push token is resolved first, which registers it for masking.
    """
    if push is not None and push.token.configured:
        push.token.resolve()
    return redact_url(text)
