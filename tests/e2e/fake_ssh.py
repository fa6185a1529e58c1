"""An ``ssh`` for tests: a loopback SSH remote that demands one key.

Installed as ``ssh`` first on the daemon's PATH. Git runs it as OpenSSH:
``ssh [options] host "git-upload-pack '/path'"``. It refuses, as sshd would
("Permission denied (publickey)", exit 255), unless ``-i`` names a file holding
exactly the key in ``FAKE_SSH_KEY_FILE``'s sibling ``expected`` file; then it runs
the command locally, as the remote's shell would. Every call is appended to
``FAKE_SSH_LOG`` (``ok`` or ``refused``, then the command), never the key.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

WITH_ARGUMENT = set("BbcDEeFIiJLlmOopQRSWw")


def parse(argv: list[str]) -> tuple[str | None, list[str]]:
    """``(identity file, remote command words)`` from an OpenSSH command line."""
    identity, index = None, 0
    while index < len(argv) and argv[index].startswith("-"):
        flag = argv[index]
        letter = flag[1:2]
        if letter in WITH_ARGUMENT:
            value = flag[2:] or argv[index + 1]
            index += 1 if flag[2:] else 2
            if letter == "i":
                identity = value
            continue
        index += 1
    return identity, argv[index + 1 :]  # skip the host


def main() -> int:
    expected = Path(os.environ["FAKE_SSH_EXPECTED"]).read_bytes()
    identity, command = parse(sys.argv[1:])
    try:
        allowed = identity is not None and Path(identity).read_bytes() == expected
    except OSError:
        allowed = False
    with open(os.environ["FAKE_SSH_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{'ok' if allowed else 'refused'} {' '.join(command)}\n")
    if not allowed:
        sys.stderr.write("git@afk-test.invalid: Permission denied (publickey).\n")
        return 255
    os.execvp("sh", ["sh", "-c", " ".join(command)])
    return 1


if __name__ == "__main__":
    sys.exit(main())
