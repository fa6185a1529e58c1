"""Push credentials for git, given to one git command at a time.

The daemon's token or SSH key reaches git only through the environment of the
fetch/push subprocess that needs it: never on a command line (``ps`` shows
those), never in a repository's ``.git/config``, never in the agent's
environment. An HTTPS token is handed over by a ``GIT_ASKPASS`` script living
in a private 0700 directory; the script itself holds no secret, it prints a
variable set only on that one git process. Any credential helper a user
configured is switched off for the command (``credential.helper=`` through
``GIT_CONFIG_COUNT``), so a stale cached credential cannot win over the token,
and hooks are switched off for it, so no script from the checkout sees the token.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import FatalError
from pipeline.masking import redact_url
from pipeline.settings import PushSettings

TOKEN_VAR = "AFK_GIT_PUSH_TOKEN"
USERNAME_VAR = "AFK_GIT_PUSH_USERNAME"
# GitHub wants this name for app tokens and accepts it for personal tokens;
# Gitea and GitLab accept any name with a token as the password. A username
# written in the remote URL (https://name@host/...) takes precedence.
DEFAULT_USERNAME = "x-access-token"

_ASKPASS_SCRIPT = """#!/bin/sh
case "$1" in
  Username*|username*) printf '%s\\n' "${AFK_GIT_PUSH_USERNAME}" ;;
  *) printf '%s\\n' "${AFK_GIT_PUSH_TOKEN}" ;;
esac
"""


def _with_config(env: dict[str, str], key: str, value: str) -> None:
    """Append one ``-c key=value`` to ``env`` the way git reads it from the environment."""
    count = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
    env[f"GIT_CONFIG_KEY_{count}"] = key
    env[f"GIT_CONFIG_VALUE_{count}"] = value
    env["GIT_CONFIG_COUNT"] = str(count + 1)


def ssh_command(key_file: Path) -> str:
    """The ``GIT_SSH_COMMAND`` that uses exactly this key and never prompts."""
    return (
        f"ssh -i {shlex.quote(str(key_file))} -o IdentitiesOnly=yes"
        " -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
    )


@contextmanager
def credential_env(push: PushSettings, base_env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """An environment for one authenticated git command; its secrets vanish on exit.

    The token is resolved now (not at config load); the askpass directory is
    removed when the block ends.
    """
    env = dict(base_env)
    env["GIT_TERMINAL_PROMPT"] = "0"
    # Hooks in the checkout are files the agent could have written; none may run
    # with the credentials in its environment (this also skips git-lfs' pre-push).
    _with_config(env, "core.hooksPath", os.devnull)
    if push.ssh_key_file is not None:
        if not push.ssh_key_file.is_file():
            raise FatalError(
                "push_credentials",
                f"push.ssh_key_file {push.ssh_key_file} does not exist or is not a file",
            )
        env["GIT_SSH_COMMAND"] = ssh_command(push.ssh_key_file)
    token = push.token.resolve() if push.token.configured else None
    if push.token.configured and token is None:
        raise FatalError(
            "push_credentials",
            f"push.token {push.token.describe()} is configured but empty or missing",
        )
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
        _with_config(env, "credential.helper", "")
        yield env
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)


def scrub(text: str, push: PushSettings) -> str:
    """``text`` for messages and events: URL credentials and every secret masked.

    The push token is resolved first, which registers it for masking.
    """
    if push.token.configured:
        push.token.resolve()
    return redact_url(text)
