"""What scrubbing adds to a daemon git command with a large output: scrubbed vs not, paired.

``python -m benchmarks scrub --json [--rounds 20] [--files 26000]`` builds, in a
temporary directory, a repository whose index lists ``--files`` paths (about
1 MB of ``git ls-files`` output at the default) and registers the secrets of a
daemon with one tracker, one agent and one repository: tokens, a webhook
secret, a database password, a notify URL and a git-crypt key, which mask as
about a hundred forms. Every round runs, in turn (A B A B ...):

* ``scrubbed``: ``GitRunner.run("ls-files")``, as the daemon runs it: the
  command, then its output decoded, URL credentials redacted and every
  registered secret masked;
* ``unscrubbed``: the same runner and command with the scrub replaced by the
  decoding alone (the alternative: what the command costs anyway).

``scrub_only_s`` times the scrub alone on the same output, and
``scrub_mb_per_s`` is its throughput. ``ratio_scrubbed_vs_unscrubbed`` is the
median of the per-round ratios. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks._paired import machine, show_round, sized_parser, spread
from pipeline.core.masking import register_secret, register_secret_bytes
from pipeline.core.secret_forms import bytes_forms, text_forms
from pipeline.git import run as git_run
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.testing.gitrepos import git

SECRETS = (
    "ghp_TrackerToken0123456789abcdefABCDEF",  # tracker token
    "ghp_PushToken9876543210zyxwvuZYXWVU",  # push token
    "sk-ant-api03-AgentKey_abcdefghijklmnopqrstuvwxyz0123456789",  # agent API key
    "whsec-webhook-secret-5f2a9c81",  # webhook secret
    "api-token-for-the-http-api-77c1",  # HTTP API token
    "postgresql://afk:db-password-3e9d1@db.internal/afk",  # database URL
    "slack://T0AAAAAAA1/B0BBBBBBB2/C0CCCCCCCCCCCCCC3",  # notify URL
)
GIT_CRYPT_KEY = b"\x00GITCRYPTKEY" + bytes(range(148))


def register() -> int:
    """Register the daemon's secrets; returns how many forms mask them."""
    forms: set[str] = set()
    for secret in SECRETS:
        register_secret(secret)
        forms |= text_forms(secret).forms
    register_secret_bytes(GIT_CRYPT_KEY)
    return len(forms | bytes_forms(GIT_CRYPT_KEY).forms)


def listed_repo(root: Path, files: int) -> GitRunner:
    """A repository whose index lists ``files`` paths (one blob), and its runner."""
    git(root, "init", "-q", "--initial-branch=main", "repo")
    runner = GitRunner(GitRepo.plain(root / "repo"))
    blob = runner.ok("hash-object", "-w", "--stdin", input_data=b"VALUE = 1\n").strip()
    index = "".join(
        f"100644 {blob}\tsrc/benchproj/pkg{n // 100:03d}/module_{n:05d}_handlers.py\n"
        for n in range(files)
    )
    runner.ok("update-index", "--index-info", input_data=index.encode())
    return runner


@contextmanager
def unscrubbed() -> Iterator[None]:
    """The runner with its scrub replaced by the decoding it starts with."""
    clean = git_run._clean
    git_run._clean = lambda raw, credentials: raw.decode("utf-8", errors="replace")
    try:
        yield
    finally:
        git_run._clean = clean


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def measure(runner: GitRunner, rounds: int) -> dict[str, list[float]]:
    def scrubbed() -> str:
        return runner.ok("ls-files")

    def plain() -> str:
        with unscrubbed():
            return runner.ok("ls-files")

    if scrubbed() != plain():  # warm-up, not counted; nothing to mask in the listing
        raise SystemExit("the scrub changed a listing that holds no secret")
    raw = plain().encode()
    samples: dict[str, list[float]] = {"scrubbed": [], "unscrubbed": [], "scrub_only": []}
    for n in range(rounds):
        samples["scrubbed"].append(timed(scrubbed))
        samples["unscrubbed"].append(timed(plain))
        samples["scrub_only"].append(timed(lambda: git_run._clean(raw, None)))
        show_round(n, samples, 4)
    return samples


def main(argv: list[str]) -> int:
    args = sized_parser("scrub", 26000, 20).parse_args(argv)
    forms = register()
    with tempfile.TemporaryDirectory(prefix="afk-bench-scrub-") as tmp:
        runner = listed_repo(Path(tmp), args.files)
        output_bytes = len(runner.ok("ls-files").encode())
        samples = measure(runner, args.rounds)
    ratios = [a / b for a, b in zip(samples["scrubbed"], samples["unscrubbed"], strict=True)]
    summary = {
        "benchmark": "scrub",
        "command": "git ls-files",
        "files": args.files,
        "output_bytes": output_bytes,
        "secrets": len(SECRETS) + 1,
        "forms": forms,
        "rounds": args.rounds,
        **{f"{name}_s": spread(values, 4) for name, values in samples.items()},
        "ratio_scrubbed_vs_unscrubbed": round(statistics.median(ratios), 4),
        "ratio_spread": spread(ratios, 4),
        "scrub_mb_per_s": round(output_bytes / 1e6 / statistics.median(samples["scrub_only"]), 1),
        "machine": machine(),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
