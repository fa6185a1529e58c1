"""The poll benchmark's fake GitHub, served from a process of its own.

A real forge is remote: its work does not share the poller's interpreter (and
its GIL). ``python -m benchmarks._forge_process --size N --token T`` serves
``bench/r0000`` ... on 127.0.0.1, every tenth repo holding a trusted ready
issue, prints its URL on one line and serves until its standard input closes.
``RemoteForge`` starts it and stands for it where a served fake is expected.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from types import TracebackType

from pipeline.testing.forges import FakeGitHub

READY = "ready-for-agent"


def slugs(size: int) -> list[str]:
    return [f"bench/r{n:04d}" for n in range(size)]


def populated(size: int, token: str) -> FakeGitHub:
    """``size`` repos; every tenth holds a ready issue labelled by a writer."""
    fake = FakeGitHub(token=token)
    for n, slug in enumerate(slugs(size)):
        fake.add_repo(slug)
        if n % 10 == 0:
            fake.add_issue(slug, "ready", labels=[READY])
            fake.set_permission(slug, "alice", "write")
    return fake


class RemoteForge(FakeGitHub):
    """A handle on the fake GitHub served by a child process (see the module doc)."""

    def __init__(self, size: int, token: str = "bench") -> None:
        super().__init__(token=token)
        self.size = size
        self._proc: subprocess.Popen[str] | None = None
        self._url = ""

    @property
    def url(self) -> str:
        return self._url

    def __enter__(self) -> RemoteForge:
        command = [sys.executable, "-m", "benchmarks._forge_process"]
        command += ["--size", str(self.size), "--token", self.token]
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self._url = self._proc.stdout.readline().strip()
        if not self._url.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError(f"the fake forge process did not start (said {self._url!r})")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        while self._on_stop:  # clients made for this forge close first
            self._on_stop.pop()()
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._forge_process")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--token", default="bench")
    args = parser.parse_args(argv)
    fake = populated(args.size, args.token)
    with fake:
        print(fake.url, flush=True)
        sys.stdin.read()  # until the parent closes it (or dies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
