"""Package caches under ``pipeline run``: one repository's agent cannot plant in another's.

Two repositories on one daemon. The agent on ``calc`` uses its shell to plant a
marker in every package cache it is given (``$PIP_CACHE_DIR``, an extracted crate
under ``$CARGO_HOME/registry/src``, a Go module under ``$GOMODCACHE``, ...) and to
write straight into where ``other``'s caches live on the volume (and where the
shared caches of older daemons lived). The agent on ``other`` runs after it and
commits a list of every marker its own caches hold. Read from outside: the
remotes. The same repository's next run, in turn, still finds its caches warm.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import ENDED, Cli, local_config, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(240)
HANG_GUARD_S = 120  # not a speed limit: how long to wait before calling the daemon hung
MARK = "planted-by-calc"
TOOLS = ("pip", "uv", "npm", "pnpm-store", "yarn", "cargo", "go-mod", "go-build", "gradle")

PLANT = r"""
for var in PIP_CACHE_DIR UV_CACHE_DIR npm_config_cache PNPM_STORE_DIR YARN_CACHE_FOLDER \
           CARGO_HOME GOMODCACHE GOCACHE GRADLE_USER_HOME; do
  dir=$(printenv "$var") && echo "$var: $dir" >> "$WD/planted.txt" && echo evil > "$dir/$MARK"
done
crate="$CARGO_HOME/registry/src/index.crates.io-0/serde-1.0.0/src"
mkdir -p "$crate" && echo 'compile_error!("pwned");' > "$crate/$MARK"
module="$GOMODCACHE/example.com/lib@v1.0.0"
mkdir -p "$module" && echo evil > "$module/$MARK"
for tool in $TOOLS; do
  for target in "$VOLUME/cache/repos/other/$tool" "$VOLUME/cache/$tool"; do
    if mkdir -p "$target" 2>/dev/null && echo evil > "$target/$MARK" 2>/dev/null; then
      echo "wrote $target" >> "$WD/planted.txt"
    fi
  done
done
true
"""

AGENT = """
import os, pathlib, subprocess, sys
wd = pathlib.Path(sys.argv[2])
role = os.environ["CACHE_ROLE"]
names = ("PIP_CACHE_DIR", "UV_CACHE_DIR", "npm_config_cache", "PNPM_STORE_DIR",
         "YARN_CACHE_FOLDER", "CARGO_HOME", "GOMODCACHE", "GOCACHE", "GRADLE_USER_HOME")
caches = [pathlib.Path(os.environ[name]) for name in names]
if role == "plant":
    env = {**os.environ, "WD": str(wd), "MARK": os.environ["MARK"]}
    subprocess.run(["sh", "-c", os.environ["PLANT"]], env=env, check=True)
elif role == "look":
    found = sorted({str(p) for c in caches if c.is_dir() for p in c.rglob(os.environ["MARK"])})
    (wd / "seen.txt").write_text("\\n".join(found) or "nothing")
else:  # warm: the first run fills its pip cache, the next one reports finding it
    marker = caches[0] / "warm-entry"
    (wd / "warm.txt").write_text("warm" if marker.exists() else "cold")
    marker.write_text("cached")
print("done")
"""


def _config(tmp_path: Path, role_of_calc: str, scope: str = "repo") -> tuple[Path, str, str]:
    calc = make_remote(tmp_path, PROJECT, name="calc")
    other = make_remote(tmp_path, PROJECT, name="other")
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    common = {
        "MARK": MARK,
        "PLANT": PLANT,
        "TOOLS": " ".join(TOOLS),
        "VOLUME": str((tmp_path / "volume").resolve()),
    }
    path = local_config(tmp_path, calc, argv, {**common, "CACHE_ROLE": role_of_calc})
    document: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    looker = {"kind": "command", "command": argv, "env": {**common, "CACHE_ROLE": "look"}}
    other_repo = {**document["repos"]["calc"], "slug": "demo/other", "remote_url": other}
    changes = {
        "agents": {"looker": looker},
        "repos": {"other": {**other_repo, "agent": "looker"}},
        "workspace": {"cache_scope": scope},
    }
    return write_config(path, merged(document, changes)), calc, other


def _issues_in_turn(cli: Cli, tmp_path: Path, repos: tuple[str, ...]) -> list[dict[str, Any]]:
    """One issue per entry of ``repos``, each added once the run before it ended."""
    cli("db", "upgrade")
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        runs: list[dict[str, Any]] = []
        for count, repo in enumerate(repos, start=1):
            cli(
                "issue",
                "add",
                "--repo",
                repo,
                "--title",
                f"Task {count}",
                "--label",
                "ready-for-agent",
            )

            def ended(rs: list[dict[str, Any]], n: int = count) -> bool:
                return len(rs) == n and all(r["state"] in ENDED for r in rs)

            runs = cli.wait_for(ended, HANG_GUARD_S, daemon, log)
    finally:
        stop_daemon(daemon)
    return runs


def test_an_agent_cannot_plant_in_another_repositorys_package_caches(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """What ``calc``'s agent writes into its caches, or straight at ``other``'s, never
    reaches ``other``'s sandbox: ``other``'s agent finds no marker, and commits so.
    (Before, every repository shared ``<volume>/cache``: ``other`` found every one.)
    Shared caches an older daemon left on the volume are not used either."""
    config, calc, other = _config(tmp_path, "plant")
    legacy = tmp_path / "volume" / "cache" / "pip"
    legacy.mkdir(parents=True)
    (legacy / MARK).write_text("left by an older daemon's shared cache")
    runs = _issues_in_turn(Cli(config, cli_env), tmp_path, ("calc", "other"))
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    assert git(Path(other), "show", "main:seen.txt") == "nothing"
    planted = git(Path(calc), "show", "main:planted.txt")
    assert "PIP_CACHE_DIR: " in planted and "CARGO_HOME: " in planted, planted
    assert "wrote" not in planted, planted  # the volume outside its own caches is read-only


def test_the_same_repositorys_next_run_finds_its_caches_warm(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A cache entry one run of ``calc`` wrote is there for its next run."""
    config, calc, _ = _config(tmp_path, "warm")
    runs = _issues_in_turn(Cli(config, cli_env), tmp_path, ("calc", "calc"))
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    first = git(Path(calc), "log", "--format=%H", "main", "--", "warm.txt").split()[-1]
    assert git(Path(calc), "show", f"{first}:warm.txt") == "cold"
    assert git(Path(calc), "show", "main:warm.txt") == "warm"


def test_shared_cache_scope_opts_back_into_one_set_of_caches(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """``[workspace] cache_scope = "shared"`` (trusted setups): every repository uses
    ``<volume>/cache/<tool>``, so ``other`` finds what ``calc`` left in its caches."""
    config, _, other = _config(tmp_path, "plant", scope="shared")
    runs = _issues_in_turn(Cli(config, cli_env), tmp_path, ("calc", "other"))
    assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
    seen = git(Path(other), "show", "main:seen.txt").splitlines()
    shared = (tmp_path / "volume" / "cache").resolve()
    assert str(shared / "pip" / MARK) in seen and str(shared / "cargo" / MARK) in seen, seen
