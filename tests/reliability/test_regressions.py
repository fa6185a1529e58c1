"""Regression tests for what the reliability campaign found, one per fix."""

from __future__ import annotations

import sys
import uuid

from pipeline.logs import register_secret
from pipeline.settings import ProbeSettings
from pipeline.watch.deploy import command_probe


def test_command_probe_never_sees_nor_prints_a_daemon_secret() -> None:
    """A deploy probe gets no variable holding a pipeline secret, under any name."""
    secret = f"sntl-{uuid.uuid4().hex}"
    register_secret(secret)
    script = "import os; print(sorted(os.environ.items())); print('echo', os.sys.argv[1:])"
    probe = ProbeSettings(kind="command", command=(sys.executable, "-c", script, secret))
    result = command_probe(probe, "a" * 40, env={"PLAIN_NAME": secret, "KEEP": "visible"})
    assert secret not in result.output
    assert "PLAIN_NAME" not in result.output
    assert "'KEEP', 'visible'" in result.output
