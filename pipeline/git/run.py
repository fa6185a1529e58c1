"""The one way the daemon runs git: pinned, hardened, bounded and scrubbed.

Every git (and git-crypt) command of the daemon goes through ``GitRunner``
(ADR 0010). It

- pins the repository: ``GIT_DIR``, ``GIT_COMMON_DIR`` and ``GIT_WORK_TREE``
  are paths the daemon computed, never read from a ``.git`` file, a
  ``commondir`` file or ``core.worktree`` the agent could have rewritten;
- restores, before each command, the daemon's own copy of the config of a
  repository the agent can write, and drops alternates (``GitRepo.reclaim``);
- switches off what could run code from a repository (hooks, fsmonitor,
  credential helpers, signing, submodule recursion, auto maintenance) on the
  command line, and allows only the ``file`` transport outside the mirror;
- builds the environment from an allowlist, so none of the daemon's secrets
  reaches git or anything git starts; only a network command in the daemon's
  mirror gets the one credential it needs;
- bounds every command by a wall clock, HTTP low-speed limits, SSH keepalives
  and the run's ``StopToken``, killing git's whole process group;
- classifies failures: a full disk is ``DiskFull``, a hang names the operation
  and the remote, and no message carries a credential.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.settings import PushSettings, WorkspaceSettings
from pipeline.core.errors import (
    CancelRequested,
    FatalError,
    LeaseLost,
    PipelineError,
    RetryableError,
)
from pipeline.core.masking import redact_url
from pipeline.core.proc import StopToken, feed_stdin, kill_group
from pipeline.git.cred import credential_env, scrub, with_config
from pipeline.git.repo import GitRepo
from pipeline.git.util import DiskFull, is_disk_full, is_enospc

FALLBACK_NAME = "afk-pipeline"
FALLBACK_EMAIL = "afk-pipeline@localhost"
FALLBACK_IDENTITY = ("-c", f"user.name={FALLBACK_NAME}", "-c", f"user.email={FALLBACK_EMAIL}")

# On every command: nothing a repository's files say may run a program.
HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("maintenance.auto", "false"),
    ("protocol.version", "2"),
)
# Only where the agent can write: its objects directory is not to be believed.
UNTRUSTED: tuple[tuple[str, str], ...] = (("core.commitGraph", "false"),)
LOCAL_PROTOCOLS = "file"
NETWORK_PROTOCOLS = "file:git:http:https:ssh"
_PASSED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TZ",
    "TMPDIR",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
)
_NETWORK_ENV = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
)
_FIXED_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_NO_REPLACE_OBJECTS": "1",
}
_STALLED = re.compile(r"Operation too slow|Operation timed out|Timeout, server .* not responding")
_NETWORK_KIND = {"push": "git_push"}
_POLL_S = 0.05


@dataclass(frozen=True)
class GitLimits:
    """How long a daemon git command may take."""

    local_s: float = 600.0  # wall clock of a command on the volume
    network_s: float = 1800.0  # wall clock of a clone, fetch or push
    stall_s: int = 60  # no data this long ends an HTTP transfer or an SSH session
    stall_bytes_per_s: int = 1000  # "no data" is under this rate (http.lowSpeedLimit)
    kill_grace_s: float = 5.0

    @classmethod
    def configured(cls, settings: WorkspaceSettings) -> GitLimits:
        """The limits ``[workspace] git_timeout_s`` and ``git_stall_s`` set."""
        return cls(network_s=settings.git_timeout_s, stall_s=max(1, round(settings.git_stall_s)))


DEFAULT_LIMITS = GitLimits()


@dataclass(frozen=True)
class GitResult:
    """A git command that ran to its end, output scrubbed of credentials."""

    command: str
    returncode: int
    stdout: str
    stderr: str
    operation: str = ""  # for network commands: "git fetch from <url>"

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 20) -> str:
        text = "\n".join(f"{self.stdout}\n{self.stderr}".strip().splitlines()[-lines:])
        return text or f"exit {self.returncode}"


@dataclass(frozen=True)
class _Remote:
    """The network side of a command, for messages: what it does, where, with what."""

    op: str
    url: str
    credentials: PushSettings | None

    def describe(self) -> str:
        preposition = "to" if self.op == "push" else "from"
        return f"git {self.op} {preposition} {redact_url(self.url)}"

    @property
    def kind(self) -> str:
        return _NETWORK_KIND.get(self.op, "git_fetch")


@dataclass(frozen=True)
class GitRunner:
    """Runs git in one repository (or, with ``repo=None``, outside any, in ``cwd``)."""

    repo: GitRepo | None
    stop: StopToken | None = None
    limits: GitLimits = DEFAULT_LIMITS
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # e.g. HOME; never a secret

    def run(self, *args: str, input_data: bytes | None = None) -> GitResult:
        """Run ``git args``; any exit status is returned, a hang, stop or full disk raises."""
        env = self._env(LOCAL_PROTOCOLS, _PASSED_ENV)
        call = _Call(["git", *self._flags(), *args], args, env, self.limits.local_s)
        return self._run(call, input_data)

    def ok(self, *args: str, input_data: bytes | None = None) -> str:
        """Stdout of ``git args``; a failure is fatal for the run."""
        result = self.run(*args, input_data=input_data)
        if not result.ok:
            raise FatalError("git", self.failure(result))
        return result.stdout

    def failure(self, result: GitResult) -> str:
        return f"{result.command} in {self.where} exited {result.returncode}: {result.tail()}"

    def network(self, *args: str, url: str, credentials: PushSettings | None) -> GitResult:
        """``git args`` talking to ``url``, with the credentials; only in the daemon's mirror."""
        if self.repo is not None and not self.repo.owned:
            raise FatalError(
                "git",
                f"refusing network git in {self.where}: the agent can "
                "write it; only the daemon's mirror talks to the remote",
            )
        # ``-c`` settings travel (through the environment) to the receive-pack of a remote
        # on a local path: hooksPath would switch off that remote's own hooks (a deploy
        # hook, say). The mirror runs no hooks of its own anyway: nobody else writes it.
        own = [(k, v) for k, v in self._config() if k != "core.hooksPath"]
        flags = [
            *(arg for key, value in own for arg in ("-c", f"{key}={value}")),
            "-c",
            f"http.lowSpeedLimit={self.limits.stall_bytes_per_s}",
            "-c",
            f"http.lowSpeedTime={self.limits.stall_s}",
        ]
        base = self._env(NETWORK_PROTOCOLS, _PASSED_ENV + _NETWORK_ENV)
        with credential_env(credentials, base, stall_s=self.limits.stall_s) as env:
            call = _Call(
                ["git", *flags, *args],
                args,
                env,
                self.limits.network_s,
                _Remote(args[0], url, credentials),
            )
            return self._run(call, None)

    def tool(self, *argv: str) -> GitResult:
        """A git-family tool (git-crypt) with the same pins, hardening and bounds."""
        env = self._env(LOCAL_PROTOCOLS, _PASSED_ENV)
        for key, value in self._config():
            with_config(env, key, value)
        return self._run(_Call(list(argv), argv[1:], env, self.limits.local_s, tool=True), None)

    @property
    def where(self) -> Path:
        if self.repo is not None:
            return self.repo.where
        return self.cwd or Path.cwd()

    def _config(self) -> list[tuple[str, str]]:
        untrusted = self.repo is not None and not self.repo.owned
        return [*HARDENING, *(UNTRUSTED if untrusted else ())]

    def _flags(self) -> list[str]:
        return [arg for key, value in self._config() for arg in ("-c", f"{key}={value}")]

    def _env(self, protocols: str, passed: Sequence[str]) -> dict[str, str]:
        env = {name: os.environ[name] for name in passed if name in os.environ}
        env.update(_FIXED_ENV)
        env.update(self.env)
        env["GIT_ALLOW_PROTOCOL"] = protocols
        if self.repo is not None:
            env.update(self.repo.pins())
        else:
            env["GIT_CEILING_DIRECTORIES"] = str(self.where)
        return env

    def _run(self, call: _Call, input_data: bytes | None) -> GitResult:
        credentials = call.remote.credentials if call.remote is not None else None
        shown = call.shown(credentials)
        if self.stop is not None and self.stop.stopped:
            raise self._ended("stop", shown, call)
        if self.repo is not None:
            self.repo.reclaim()
        outcome = _execute(call, self.where, self.stop, input_data, self.limits.kill_grace_s)
        if outcome.ended_by is not None:
            raise self._ended(outcome.ended_by, shown, call)
        stdout = _clean(outcome.stdout, credentials)
        stderr = _clean(outcome.stderr, credentials).strip()
        if is_disk_full(stderr):
            raise DiskFull(f"disk full: {shown} in {self.where}: {stderr[-500:]}")
        if call.remote is not None and outcome.returncode and _STALLED.search(stderr):
            raise RetryableError(
                call.remote.kind,
                f"{call.remote.describe()} gave no data "
                f"for {self.limits.stall_s}s; gave up ({stderr[-300:]})",
            )
        operation = call.remote.describe() if call.remote is not None else shown
        return GitResult(shown, outcome.returncode or 0, stdout, stderr, operation)

    def _ended(self, reason: str, shown: str, call: _Call) -> PipelineError:
        if reason == "stop":
            stop_reason = self.stop.reason if self.stop is not None else None
            message = f"{shown} in {self.where} stopped: {stop_reason}"
            if "lease" in (stop_reason or ""):
                return LeaseLost(message)
            return CancelRequested(message)
        if call.remote is not None:
            return RetryableError(
                call.remote.kind,
                f"{call.remote.describe()} did not finish within {call.timeout_s:g}s; killed",
            )
        return RetryableError(
            "git_timeout",
            f"{shown} in {self.where} did not finish within {call.timeout_s:g}s; killed",
        )


@dataclass(frozen=True)
class _Call:
    """One command line: what runs, what a message shows of it, and its bounds."""

    argv: list[str]
    args: Sequence[str]  # as shown: without the hardening flags
    env: dict[str, str]
    timeout_s: float
    remote: _Remote | None = None
    tool: bool = False

    def shown(self, credentials: PushSettings | None) -> str:
        words = [self.argv[0] if self.tool else "git", *self.args]
        return _scrubbed(" ".join(words), credentials)


def _clean(raw: bytes, credentials: PushSettings | None) -> str:
    return _scrubbed(raw.decode("utf-8", errors="replace"), credentials)


def _scrubbed(text: str, credentials: PushSettings | None) -> str:
    """``text`` scrubbed twice: a masked secret can join a URL's userinfo that it split.

    A text the first pass leaves as it is (most output) the second would too.
    """
    once = scrub(text, credentials)
    return once if once == text else scrub(once, credentials)


@dataclass(frozen=True)
class _Outcome:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    ended_by: str | None  # "stop" or "timeout" when the daemon killed it


def _execute(
    call: _Call, cwd: Path, stop: StopToken | None, input_data: bytes | None, grace_s: float
) -> _Outcome:
    """Run the command in its own process group; kill the group on a stop or the timeout."""
    try:
        proc = subprocess.Popen(
            call.argv,
            cwd=cwd,
            env=call.env,
            start_new_session=True,
            stdin=subprocess.PIPE if input_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        if is_enospc(exc):
            raise DiskFull(f"no space left on device starting {call.argv[0]} in {cwd}") from exc
        raise
    deadline = time.monotonic() + call.timeout_s
    feeder = feed_stdin(proc, input_data) if input_data is not None else None
    try:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=_POLL_S)
                _kill_group_leftovers(proc.pid)
                return _Outcome(proc.returncode, stdout, stderr, None)
            except subprocess.TimeoutExpired:
                pass
            reason = _must_end(stop, deadline)
            if reason is not None:
                kill_group(proc, grace_s)
                stdout, stderr = _drain(proc, grace_s)
                return _Outcome(None, stdout, stderr, reason)
    finally:
        if feeder is not None:
            feeder.join(timeout=grace_s)


def _must_end(stop: StopToken | None, deadline: float) -> str | None:
    if stop is not None and stop.stopped:
        return "stop"
    if time.monotonic() > deadline:
        return "timeout"
    return None


def _drain(proc: subprocess.Popen[bytes], grace_s: float) -> tuple[bytes, bytes]:
    """What a killed child wrote; nothing when an escaped grandchild keeps the pipes open."""
    try:
        return proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return b"", b""


def _kill_group_leftovers(pgid: int) -> None:
    """Whatever git left running in its process group goes with it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
