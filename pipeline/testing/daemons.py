"""Start and stop ``pipeline.testing.dummy_daemon`` processes for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class DaemonProcess:
    owner: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait for the daemon's ``ready`` line; raise with its log if it died first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if f"ready {self.owner}" in self.log():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"daemon {self.owner} exited {self.proc.returncode}:\n" + self.log()[-3000:]
                )
            time.sleep(0.05)
        raise TimeoutError(f"daemon {self.owner} not ready in {timeout_s} s:\n{self.log()[-3000:]}")

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in ``timeout_s``."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_daemon(
    database_url: str,
    owner: str,
    log_dir: Path,
    *,
    lease_s: float,
    agent_s: float = 0.0,
    extra: list[str] | None = None,
) -> DaemonProcess:
    """Start a dummy daemon, ready to claim; its stdout and stderr go to ``log_dir/<owner>.log``."""
    log_path = log_dir / f"{owner}.log"
    argv = [
        sys.executable,
        "-m",
        "pipeline.testing.dummy_daemon",
        "--database-url",
        database_url,
        "--owner",
        owner,
        "--lease-s",
        str(lease_s),
        "--agent-s",
        str(agent_s),
        *(extra or []),
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    daemon = DaemonProcess(owner, proc, log_path)
    daemon.wait_ready()
    return daemon


def kill_pid_group(pid: int) -> None:
    """Kill an orphaned agent's process group (left behind by a kill -9 of its daemon)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
