"""Child processes the pipeline can always stop: setup, tests, agents, probes.

Every child runs in its own process group so that a stop (cancel, lost lease,
timeout) kills the whole tree: SIGTERM to the group, then SIGKILL after a
grace. Output is read line by line so callers can stream it and so an idle
child can be detected. Arguments are always an argv list; a string command
from configuration runs through ``/bin/sh -c`` only because the operator wrote
it as shell (never text that came from an issue or an agent).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

from pipeline.core.masking import mask

log = logging.getLogger(__name__)
# Each line of the kept tail is cut here, masked first (a cut inside a secret followed by
# the next line is no edge ``mask`` sees): the tail is for reading the end of an output,
# and ``tail_lines`` lines of ``max_line_bytes`` each would be hundreds of megabytes.
READ_CHUNK = 1 << 16
TAIL_LINE_CHARS = 8192


class StopToken:
    """Set by the worker when the run must stop: cancel, lease lost or timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self._event.set()

    @property
    def stopped(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True as soon as a stop was requested."""
        return self._event.wait(timeout_s)

    def ignoring(self, *reasons: str) -> StopToken:
        """This token as seen by work that must not be cut short for ``reasons``."""
        return _StopView(self, reasons)


class _StopView(StopToken):
    """A token that stops when its source does, unless for one of the ignored reasons."""

    def __init__(self, source: StopToken, ignored: tuple[str, ...]) -> None:
        super().__init__()
        self.source, self.ignored = source, ignored

    def stop(self, reason: str) -> None:
        self.source.stop(reason)

    @property
    def stopped(self) -> bool:
        self.reason = self.source.reason
        return self.source.stopped and self.reason not in self.ignored

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.05))
        return True


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None  # None when the process was killed before exiting
    output_tail: str  # the last lines of stdout+stderr, bounded
    duration_s: float
    timed_out: bool = False
    idle_timed_out: bool = False
    stopped: str | None = None  # the stop reason when a StopToken ended it
    lingered: bool = False  # killed because it outlived ``done`` by ``done_grace_s``

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.idle_timed_out or self.stopped)


def shell_argv(command: str | Sequence[str]) -> list[str]:
    """An operator-written command as argv: strings run through ``/bin/sh -c``."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    return list(command)


def kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the child's process group, then SIGKILL it after ``grace_s``."""
    if proc.poll() is not None:
        _kill_leftovers(proc.pid)
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _kill_leftovers(pgid: int) -> None:
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _LineReader(threading.Thread):
    """Reads a child's merged output, keeping a bounded tail and the last activity time."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        on_line: Callable[[str], None] | None,
        tail_lines: int,
        max_line_bytes: int,
    ) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.on_line = on_line
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.max_line_bytes = max_line_bytes
        self.last_activity = time.monotonic()
        self.handler_failed = False

    def run(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        rest, skipping = b"", False
        with stream:  # closed at EOF: an open pipe is a ResourceWarning later
            # whatever the child printed so far, a line or not: progress dots without a
            # newline are activity (readline would wait for the newline)
            while chunk := os.read(stream.fileno(), READ_CHUNK):
                self.last_activity = time.monotonic()
                rest, skipping = self._split(rest + chunk, skipping)
        if rest and not skipping:
            self._line(rest)

    def _split(self, data: bytes, skipping: bool) -> tuple[bytes, bool]:
        """Hand on each whole line of ``data``; return the unfinished rest, and whether the
        rest of an over-long line is being skipped. A line longer than ``max_line_bytes``
        is handed on cut and its rest read past without keeping it: a child printing
        gigabytes without a newline must not fill the daemon's memory."""
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            if not skipping:
                self._line(data[start : min(end, start + self.max_line_bytes)])
            skipping, start = False, end + 1
        rest = data[start:]
        if skipping:
            return b"", True
        if len(rest) >= self.max_line_bytes:
            self._line(rest[: self.max_line_bytes])
            return b"", True
        return rest, False

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace")
        self.tail.append(line if len(line) <= TAIL_LINE_CHARS else mask(line)[:TAIL_LINE_CHARS])
        if self.on_line is not None:
            self._tell(line)

    def _tell(self, line: str) -> None:
        """Hand ``line`` on; a receiver that fails loses that line, never the reading (a dead
        reader would close the pipe and kill the child with SIGPIPE). Logged once."""
        assert self.on_line is not None
        try:
            self.on_line(line)
        except Exception:
            if not self.handler_failed:
                log.exception("output of pid %s: a line handler failed", self.proc.pid)
            self.handler_failed = True


class CommandOptions(TypedDict, total=False):
    """How ``run_command`` bounds and feeds a child; every key is optional."""

    timeout_s: float | None
    idle_timeout_s: float | None
    stop: StopToken | None
    on_line: Callable[[str], None] | None
    stdin_data: bytes | None
    kill_grace_s: float
    tail_lines: int
    max_line_bytes: int
    done: threading.Event | None
    done_grace_s: float
    pass_fds: Sequence[int]


@dataclass(frozen=True)
class _Options:
    timeout_s: float | None = None
    idle_timeout_s: float | None = None
    stop: StopToken | None = None
    on_line: Callable[[str], None] | None = None
    stdin_data: bytes | None = None
    kill_grace_s: float = 5.0
    tail_lines: int = 200
    max_line_bytes: int = 1 << 20
    done: threading.Event | None = None
    done_grace_s: float = 10.0
    pass_fds: Sequence[int] = ()


def run_command(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], **options: Unpack[CommandOptions]
) -> CommandResult:
    """Run ``argv`` to completion or until a timeout or stop, whichever comes first.

    ``done`` is set by the caller (usually from ``on_line``) once the child has
    said all it will say; a child still alive ``done_grace_s`` later is killed
    and reported ``lingered`` rather than failed.
    """
    opts = _Options(**options)
    started = time.monotonic()
    proc = _spawn(argv, cwd, env, opts)
    reader = _LineReader(proc, opts.on_line, opts.tail_lines, opts.max_line_bytes)
    reader.start()
    limits = _Limits(
        started, opts.timeout_s, opts.idle_timeout_s, opts.stop, opts.done, opts.done_grace_s
    )
    outcome = _supervise(proc, reader, limits, opts.kill_grace_s)
    reader.join(timeout=opts.kill_grace_s)
    stop = opts.stop
    return CommandResult(
        returncode=None if outcome else proc.returncode,
        output_tail=mask("\n".join(reader.tail)),  # masked before callers cut it
        duration_s=time.monotonic() - started,
        timed_out=outcome == "timeout",
        idle_timed_out=outcome == "idle",
        stopped=stop.reason if outcome == "stop" and stop is not None else None,
        lingered=outcome == "lingered",
    )


def _spawn(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], opts: _Options
) -> subprocess.Popen[bytes]:
    """Start the child in its own session (so a stop kills its whole group), fed its stdin."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE if opts.stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=tuple(opts.pass_fds),
    )
    if opts.stdin_data is not None:
        feed_stdin(proc, opts.stdin_data)
    return proc


def feed_stdin(proc: subprocess.Popen[bytes], data: bytes) -> threading.Thread:
    """Write ``data`` to the child's stdin from a thread of its own, then close it.

    Written inline, input larger than the pipe's buffer blocks the writer until the
    child reads it: a child that does not (yet) read held the daemon there, before any
    timeout or stop was watched. ``communicate(data, timeout=...)`` is no answer either:
    it stops writing at its first timeout. ``proc.stdin`` is handed to the thread.
    """
    stdin = proc.stdin
    assert stdin is not None
    proc.stdin = None  # the thread's now; communicate() reads the output only

    def write() -> None:
        try:
            stdin.write(data)
        except OSError:  # the child is gone (BrokenPipeError) or closed its end
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    thread = threading.Thread(target=write, name=f"stdin-{proc.pid}", daemon=True)
    thread.start()
    return thread


@dataclass
class _Limits:
    """What ends a child early, and when ``done`` was first seen set."""

    started: float
    timeout_s: float | None
    idle_timeout_s: float | None
    stop: StopToken | None
    done: threading.Event | None
    done_grace_s: float
    done_at: float | None = None

    def reason(self, now: float, last_activity: float) -> str | None:
        if self.stop is not None and self.stop.stopped:
            return "stop"
        if self.timeout_s is not None and now - self.started > self.timeout_s:
            return "timeout"
        if self.done is not None and self.done.is_set():
            if self.done_at is None:
                self.done_at = now
            if now - self.done_at > self.done_grace_s:
                return "lingered"
            return None
        if self.idle_timeout_s is not None and now - last_activity > self.idle_timeout_s:
            return "idle"
        return None


def _supervise(
    proc: subprocess.Popen[bytes],
    reader: _LineReader,
    limits: _Limits,
    kill_grace_s: float,
) -> str | None:
    """Wait for the child; kill its group and say why when it must not go on."""
    while True:
        try:
            proc.wait(timeout=0.05)
            _kill_leftovers(proc.pid)
            return None
        except subprocess.TimeoutExpired:
            pass
        reason = limits.reason(time.monotonic(), reader.last_activity)
        if reason is not None:
            kill_group(proc, kill_grace_s)
            return reason


def processes_under(root: Path) -> list[int]:
    """Pids of processes without a terminal whose working directory is inside ``root``.

    A daemon killed with SIGKILL cannot stop its agent: the agent's process
    group lives on in the run's worktree. Before a tree is reused, these
    stragglers are found by their working directory (Linux ``/proc``; elsewhere
    nothing is found). Processes with a controlling terminal — a human
    inspecting the tree — are left alone.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    target = root.resolve()
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = (entry / "cwd").resolve(strict=True)
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        tty_nr = int(fields[4]) if len(fields) > 4 else 0
        if tty_nr == 0 and (cwd == target or target in cwd.parents):
            found.append(int(entry.name))
    return found


def kill_stragglers(root: Path) -> list[int]:
    """SIGKILL every straggler working inside ``root``, with its group when it leads one.

    An agent leads its own process group (``run_command`` starts a session), so
    its whole tree goes. A straggler that does not lead its group is killed
    alone: its group is some other process's — another daemon on this host
    whose git command sits in the tree — and that daemon must live on.
    """
    pids = processes_under(root)
    for pid in pids:
        try:
            if os.getpgid(pid) == pid and pid != os.getpgrp():
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids
