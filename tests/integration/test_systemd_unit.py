"""The shipped systemd unit: hardened to an exposure of at most 5.0, and still able to
sandbox agents with bubblewrap."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "afk-pipeline.service"
REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
# Settings that would stop bwrap: it creates these namespaces, and mounts a fresh
# /proc, which the kernel refuses when the service's /proc is covered by mounts.
BREAK_BWRAP = {
    "RestrictNamespaces": "bwrap creates user, mount, PID, IPC, UTS, cgroup, net namespaces",
    "PrivateUsers": "bwrap maps the daemon's user into its own user namespace",
    "ProtectKernelTunables": "covers /proc/sys: bwrap's --proc is refused",
    "ProtectKernelLogs": "covers /proc/kmsg: bwrap's --proc is refused",
    "ProtectProc": "remounts /proc with hidepid: bwrap's --proc is refused",
    "ProcSubset": "remounts /proc with subset=pid: bwrap's --proc is refused",
    "MemoryDenyWriteExecute": "Node.js (the Claude CLI) compiles JavaScript to machine code",
    "PrivateNetwork": "agents reach their model API and the package registries",
}


def service_settings() -> dict[str, list[str]]:
    """The [Service] section's settings, each with every value it was given."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        message = "systemd-analyze not installed: the unit's exposure cannot be scored here"
        if REQUIRE_TOOLS:
            pytest.fail(message + "; PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure")
        pytest.skip(message)
    return found


def test_the_units_exposure_is_at_most_5(tmp_path: Path) -> None:
    """`systemd-analyze security` rates the shipped unit 5.0 or less."""
    analyze = _systemd_analyze()
    unit = tmp_path / UNIT.name
    shutil.copyfile(UNIT, unit)
    scored = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", scored.stdout + scored.stderr)
    assert found, scored.stdout + scored.stderr
    assert float(found.group(1)) <= 5.0, scored.stdout


def test_the_unit_sets_nothing_that_stops_bubblewrap() -> None:
    """No setting that would keep bwrap from building a sandbox; only a deny-list syscall
    filter without @mount or @process; the socket families bwrap and agents use allowed."""
    settings = service_settings()
    assert {key: why for key, why in BREAK_BWRAP.items() if key in settings} == {}
    for value in settings.get("SystemCallFilter", []):
        assert value.startswith("~"), f"an allow list: {value}"
        assert not {"@mount", "@process", "@privileged"} & set(value[1:].split())
    (families,) = settings["RestrictAddressFamilies"]
    assert {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"} <= set(families.split())
    assert settings["NoNewPrivileges"] == ["yes"] and settings["CapabilityBoundingSet"] == [""]


def test_bwrap_builds_a_sandbox_with_the_units_privileges() -> None:
    """As an unprivileged user with no new privileges and an empty capability bounding set
    (what the unit gives the daemon), the daemon's bwrap probe builds a sandbox."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        message = "needs setpriv and root to drop to an unprivileged user"
        if REQUIRE_TOOLS:
            pytest.fail(message + "; PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure")
        pytest.skip(message)
    probe = "from pipeline.sandbox.bwrap import find_bwrap, probe; print(probe(find_bwrap(None)))"
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs"]
    drop += ["--bounding-set=-all", "--inh-caps=-all", "--"]
    ran = subprocess.run(
        [*drop, sys.executable, "-c", probe],
        cwd="/",  # somewhere the unprivileged user may enter
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "bubblewrap" in ran.stdout
