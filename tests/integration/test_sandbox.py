"""The bubblewrap sandbox on this host: what a command inside can see, write and reach.

Each test plays the agent: it runs a real command in a real jail built from a
prepared worktree, and checks the outcome from outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.config.settings import (
    RepoSettings,
    SandboxSettings,
    SecretRef,
    Settings,
    WorkspaceSettings,
)
from pipeline.sandbox import NetworkPolicy, SandboxUnavailable, build_sandbox
from pipeline.sandbox.bwrap import Layout, find_bwrap, probe
from pipeline.sandbox.jail import BwrapSandbox, Jail, Jailer
from pipeline.testing.gitrepos import git, make_remote
from pipeline.testing.receiver import Receiver
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

SENTINEL = "sandbox-sentinel-7f3a91"


@pytest.fixture
def settings(host_dir: Path) -> Settings:
    """A daemon's settings whose config, database, secret file and volume live on the
    host's disk (``host_dir``), where only the daemon's hiding keeps them out of sight."""
    config = host_dir / "etc" / "pipeline.toml"
    config.parent.mkdir()
    config.write_text("# config\n")
    secret = host_dir / "etc" / "token"
    secret.write_text(SENTINEL)
    (host_dir / "volume").mkdir()
    return Settings(
        database_url=f"sqlite:///{host_dir / 'db' / 'history.db'}",
        volume=host_dir / "volume",
        source=config,
        sandbox=SandboxSettings(allow_hosts=()),
    )


@pytest.fixture
def sandbox(settings: Settings, host_dir: Path) -> BwrapSandbox:
    """The real bwrap sandbox built the way the daemon builds it."""
    (host_dir / "db").mkdir()
    (host_dir / "db" / "history.db").write_text(SENTINEL)
    built = build_sandbox(settings, [SecretRef(file=host_dir / "etc" / "token")])
    assert isinstance(built, BwrapSandbox)
    return built


@pytest.fixture
def prepared(tmp_path: Path, settings: Settings, sandbox: BwrapSandbox) -> PreparedWorkspace:
    """A prepared worktree slot of repo ``app`` with a jail, and a second repo's checkout."""
    jailer = Jailer(
        sandbox,
        host_env={**os.environ, "GITHUB_TOKEN": SENTINEL},
        homes_root=settings.volume / "homes",
    )
    spaces = Workspaces(settings.volume, WorkspaceSettings(), jailer=jailer)
    other = RepoSettings(
        name="other",
        tracker="gh",
        slug="acme/other",
        remote_url=make_remote(tmp_path, {"b.txt": "b\n"}, name="other"),
    )
    spaces.ensure_checkout(other)
    repo = RepoSettings(
        name="app",
        tracker="gh",
        slug="acme/app",
        remote_url=make_remote(tmp_path, {"a.txt": "a\n"}, name="app"),
    )
    return spaces.prepare(
        repo, run_id=1, issue_ref="#1", base_env=dict(os.environ), events=RecordingSink()
    )


def jail_of(ws: PreparedWorkspace) -> Jail:
    assert ws.jail is not None
    return ws.jail


def run_inside(ws: PreparedWorkspace, script: str, **options: object) -> str:
    """Run a Python script in the jail; its output."""
    jail = jail_of(ws)
    result = jail.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ws.path,
        env=jail.environment(),
        timeout_s=120,
        **options,
    )  # type: ignore[arg-type]
    assert result.returncode == 0, result.output_tail
    return result.output_tail


def test_sees_only_its_own_processes(prepared: PreparedWorkspace) -> None:
    """No daemon, no other process: /proc inside lists the sandbox's own few."""
    out = run_inside(
        prepared,
        """
        import os
        for pid in sorted(int(p) for p in os.listdir('/proc') if p.isdigit()):
            print(pid, open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\\0', b' ')[:60])
    """,
    )
    assert "pytest" not in out
    assert len(out.splitlines()) <= 4, out


def test_environment_holds_no_daemon_secret(prepared: PreparedWorkspace) -> None:
    """Neither the command's environment nor any visible process's holds a daemon secret."""
    out = run_inside(
        prepared,
        """
        import os
        print(dict(os.environ))
        for pid in (p for p in os.listdir('/proc') if p.isdigit()):
            for name in ('environ', 'cmdline'):
                try:
                    print(open(f'/proc/{pid}/{name}', 'rb').read())
                except OSError as exc:
                    print('unreadable', exc)
    """,
    )
    assert SENTINEL not in out
    assert "'PATH':" in out and "'HOME':" in out


def test_daemon_places_are_hidden(prepared: PreparedWorkspace, settings: Settings) -> None:
    """Config, database, secret file, other repos and the volume root are out of sight."""
    volume = settings.volume.resolve()
    assert settings.source is not None
    paths = [settings.source, settings.source.parent / "token", volume.parent / "db" / "history.db"]
    listed = [str(path) for path in paths]
    acme = str(volume / "repos" / "gh" / "acme")
    out = run_inside(
        prepared,
        f"""
        import os
        paths = {listed!r}
        for path in paths:
            try:
                print(path, repr(open(path).read()))
            except OSError as exc:
                print(path, 'unreadable:', exc.strerror)
        print('volume:', sorted(os.listdir({str(volume)!r})))
        print('repos:', sorted(os.listdir({acme!r})))
    """,
    )
    assert SENTINEL not in out
    assert "volume: ['cache', 'homes', 'repos']" in out
    assert "repos: ['app']" in out


def test_writes_outside_the_tree_fail(prepared: PreparedWorkspace, settings: Settings) -> None:
    """The volume root, another repo's checkout and the system stay unwritten."""
    volume = settings.volume.resolve()
    targets = [
        volume / "planted",
        volume / "repos" / "gh" / "acme" / "other" / "checkout" / "x",
        Path("/etc/afk-planted"),
    ]
    out = run_inside(
        prepared,
        f"""
        {_try_writes(targets)}
        open('inside.txt', 'w').write('fine')
    """,
    )
    assert "wrote" not in out and out.count("refused ") == len(targets), out
    assert not any(t.exists() for t in targets)
    assert (prepared.path / "inside.txt").read_text() == "fine"


def _try_writes(targets: list[Path]) -> str:
    """One line of code that tries to write each of ``targets``, printing wrote or refused."""
    code = (
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try: open(path, 'w').write('x'); print('wrote', path)\n"
        "    except OSError as exc: print('refused', path, exc.strerror)\n"
    )
    return f"exec({code!r})"


def test_only_the_repos_own_caches_are_there(
    prepared: PreparedWorkspace, settings: Settings
) -> None:
    """The run's caches are writable; another repo's and the shared layout are not there."""
    cache = settings.volume.resolve() / "cache"
    other = cache / "repos" / "other" / "pip"
    other.mkdir(parents=True)
    shared = cache / "pip"
    shared.mkdir()
    targets = [other / "planted", shared / "planted"]
    out = run_inside(
        prepared,
        f"""
        import os
        print('cache:', sorted(os.listdir({str(cache)!r})))
        print('repos:', sorted(os.listdir({str(cache / "repos")!r})))
        open(os.path.join(os.environ['PIP_CACHE_DIR'], 'own'), 'w').write('x')
        {_try_writes(targets)}
    """,
    )
    assert "cache: ['repos']" in out and "repos: ['app']" in out, out
    assert "wrote" not in out and out.count("refused ") == len(targets), out
    assert not any(t.exists() for t in targets)
    assert (cache / "repos" / "app" / "pip" / "own").read_text() == "x"


def test_agent_commits_but_cannot_touch_what_steers_git(prepared: PreparedWorkspace) -> None:
    """A commit works; the checkout's config, hooks, gitfile and alternates are read-only."""
    common = prepared.path.parent.parent / "checkout" / ".git"
    jail = jail_of(prepared)
    script = f"""
        set -u
        echo change > a.txt && git add a.txt && git -c user.name=a -c user.email=a@b \\
            commit -qm change && echo committed
        for target in {common}/config {common}/hooks/pre-push \\
                      {common}/objects/info/alternates .git {common}/info/attributes; do
            if (echo planted >> "$target") 2>/dev/null; then echo "wrote $target"; fi
        done
        git config core.fsmonitor 'touch /tmp/x' 2>/dev/null && echo "configured"
        true
    """
    result = jail.run(
        ["/bin/sh", "-c", textwrap.dedent(script)],
        cwd=prepared.path,
        env=jail.environment(),
        timeout_s=120,
    )
    assert "committed" in result.output_tail, result.output_tail
    assert "wrote" not in result.output_tail and "configured" not in result.output_tail
    assert "planted" not in (common / "config").read_text()
    assert not (common / "objects" / "info" / "alternates").exists()
    assert git(prepared.path, "log", "-1", "--format=%s").strip() == "change"


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_detached_child_ends_with_the_sandbox(prepared: PreparedWorkspace) -> None:
    """A child in its own session, left running, is gone once the command returns."""
    marker = f"afk-detached-{os.getpid()}"
    out = run_inside(
        prepared,
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)',
                                  {marker!r}], start_new_session=True)
        for _ in range(600):  # until it has exec'd: its command line names the marker
            cmdline = open(f'/proc/{{child.pid}}/cmdline', 'rb').read()
            if {marker!r}.encode() in cmdline:
                break
            time.sleep(0.05)
        print('started', cmdline)
    """,
    )
    assert marker in out
    deadline = time.monotonic() + 30
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def test_the_sandbox_dies_with_the_daemon(tmp_path: Path, sandbox: BwrapSandbox) -> None:
    """SIGKILL of the process that started the sandbox ends everything inside it."""
    marker = f"afk-orphan-{os.getpid()}"
    tree = tmp_path / "tree"
    tree.mkdir()
    starter = tmp_path / "starter.py"
    starter.write_text(
        textwrap.dedent(f"""
        import subprocess, sys
        from pathlib import Path
        from pipeline.config.settings import SandboxSettings
        from pipeline.sandbox import BwrapSandbox, Layout, NetworkPolicy, runtime_paths
        # The interpreter and the package, shown even when a hidden directory (/tmp) holds them.
        sandbox = BwrapSandbox(bwrap=Path({str(sandbox.bwrap)!r}), version="test",
                               read_only=runtime_paths(SandboxSettings()))
        layout = Layout(workdir=Path({str(tree)!r}), writable=(Path({str(tree)!r}),),
                        network=NetworkPolicy("open"))
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)", {marker!r}]
        with sandbox.command(sleeper, layout, None) as prepared:
            subprocess.Popen(prepared.argv, pass_fds=prepared.pass_fds).wait()
    """)
    )
    parent = subprocess.Popen([sys.executable, str(starter)])
    try:
        deadline = time.monotonic() + 60
        while not _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_with(marker), "the sandboxed command never started"
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    while _processes_with(marker) and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    assert _processes_with(marker) == []


@pytest.fixture
def servers() -> Iterator[tuple[Receiver, Receiver]]:
    """Two loopback HTTP servers: one the policy allows, one it does not."""
    with Receiver() as allowed, Receiver() as forbidden:
        allowed.route("GET", "/x", b"reached")
        yield allowed, forbidden


def test_allowlist_lets_through_only_listed_hosts(
    prepared: PreparedWorkspace, servers: tuple[Receiver, Receiver]
) -> None:
    """The allowed port answers through the proxy; the other receives nothing, by any route."""
    allowed, forbidden = (s.port for s in servers)
    policy = NetworkPolicy("allowlist", (f"127.0.0.1:{allowed}",))
    sink = RecordingSink()
    out = run_inside(
        prepared,
        f"""
        import socket, urllib.request
        for port in ({allowed}, {forbidden}):
            try:
                print(port, urllib.request.urlopen(f'http://127.0.0.1:{{port}}/x').read())
            except Exception as exc:
                print(port, 'failed', exc)
        try:
            socket.create_connection(('127.0.0.1', {forbidden}), timeout=5)
            print('direct connection made')
        except OSError as exc:
            print('direct refused', exc)
    """,
        network=policy,
        events=sink,
    )
    assert f"{allowed} b'reached'" in out
    assert "direct refused" in out and "direct connection made" not in out
    assert [r.path for r in servers[0].received] == ["/x"]
    assert servers[1].received == []
    assert any(f"127.0.0.1:{forbidden}" in message for _, message, _ in sink.of_kind("network"))


def test_an_unusable_bwrap_is_refused_with_what_to_install(tmp_path: Path) -> None:
    """A bwrap that cannot build a sandbox stops start-up with an install hint."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailable, match=r"Permission denied.*install bubblewrap"):
        probe(find_bwrap(fake))


def test_coverage_of_the_daemon_does_not_reach_into_the_sandbox(
    tmp_path: Path, settings: Settings, sandbox: BwrapSandbox
) -> None:
    """A daemon measured by ``scripts/test --cov`` passes no coverage setting to a jail."""
    data = tmp_path / "coverage-data"
    data.mkdir()
    measured = {"COVERAGE_PROCESS_CONFIG": "{}", "COVERAGE_FILE": str(data / ".coverage")}
    jailer = Jailer(sandbox, host_env={**os.environ, **measured}, homes_root=tmp_path / "homes")
    spaces = Workspaces(settings.volume, WorkspaceSettings(), jailer=jailer)
    repo = RepoSettings(
        name="app",
        tracker="gh",
        slug="acme/app",
        remote_url=make_remote(tmp_path, {"a.txt": "a\n"}, name="app"),
    )
    ws = spaces.prepare(repo, run_id=1, issue_ref="#1", base_env={}, events=RecordingSink())
    out = run_inside(ws, "import os; print(sorted(k for k in os.environ if 'COVERAGE' in k))")
    assert out.strip().splitlines()[-1] == "[]"
    assert list(data.iterdir()) == []


def _read_in_sandbox(tmp_path: Path, settings: Settings, paths: list[Path], then: str = "") -> str:
    """What an agent in a sandbox of ``settings`` prints reading each of ``paths`` (its text,
    or why not), then running ``then``; the command must succeed."""
    work = tmp_path / "work"
    work.mkdir()
    jail = Jail(build_sandbox(settings), Layout(workdir=work, writable=(work,)), home=work)
    script = (
        "import pathlib\n"
        f"for path in {[str(path) for path in paths]!r}:\n"
        "    try: print(pathlib.Path(path).read_text())\n"
        "    except OSError as exc: print(path, exc.strerror)\n"
    ) + then
    result = jail.run(
        [sys.executable, "-c", script], cwd=work, env=jail.environment(), timeout_s=60
    )
    assert result.returncode == 0, result.output_tail
    return result.output_tail


def _lone_settings(tmp_path: Path, **fields: Any) -> Settings:
    """A daemon with nothing but ``fields`` set, no host allowed, its places under ``tmp_path``."""
    (tmp_path / "volume").mkdir()
    fields.setdefault("database_url", f"sqlite:///{tmp_path / 'db' / 'history.db'}")
    fields.setdefault("sandbox", SandboxSettings(allow_hosts=()))
    return Settings(volume=tmp_path / "volume", **fields)


def test_a_git_crypt_key_named_by_environment_is_hidden(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repo's git-crypt key given as a path in an environment variable is as hidden as
    one given as ``git_crypt_key_file``: another repo's agent cannot decrypt that repo."""
    key = host_dir / "vault.key"
    key.write_text(SENTINEL)
    monkeypatch.setenv("VAULT_GIT_CRYPT_KEY", str(key))
    vault = RepoSettings(
        name="vault",
        tracker="gh",
        slug="acme/vault",
        remote_url="https://example.invalid/acme/vault.git",
        workspace="clone",
        git_crypt_key=SecretRef(env="VAULT_GIT_CRYPT_KEY"),
    )
    settings = _lone_settings(tmp_path, repos=(vault,))
    assert SENTINEL not in _read_in_sandbox(tmp_path, settings, [key])


def test_a_repo_whose_slug_differs_only_in_nesting_sees_nothing_of_the_other(
    tmp_path: Path, settings: Settings, sandbox: BwrapSandbox
) -> None:
    """GitLab's ``acme/x/app`` and ``acme-x/app`` are two repositories: the agent of one
    finds no object of the other in the git directory it is given."""
    jailer = Jailer(sandbox, host_env=dict(os.environ), homes_root=settings.volume / "homes")
    spaces = Workspaces(settings.volume, WorkspaceSettings(), jailer=jailer)
    private = RepoSettings(
        name="private",
        tracker="gl",
        slug="acme/x/app",
        remote_url=make_remote(tmp_path, {"secret.txt": SENTINEL + "\n"}, name="private"),
    )
    spaces.ensure_checkout(private)
    public = RepoSettings(
        name="public",
        tracker="gl",
        slug="acme-x/app",
        remote_url=make_remote(tmp_path, {"a.txt": "a\n"}, name="public"),
    )
    ws = spaces.prepare(
        public, run_id=1, issue_ref="#1", base_env=dict(os.environ), events=RecordingSink()
    )
    out = run_inside(
        ws,
        """
        import subprocess
        found = subprocess.run(
            ['git', 'cat-file', '--batch-all-objects', '--batch'], capture_output=True
        )
        print(found.stdout.decode('utf-8', 'replace'))
        """,
    )
    assert "a\n" in out
    assert SENTINEL not in out


def test_a_file_named_in_hidden_paths_is_hidden(tmp_path: Path, host_dir: Path) -> None:
    """``[sandbox] hidden_paths`` hides a file the operator names (an environment file
    of secrets beside other things), not only directories."""
    secrets = host_dir / "secrets.env"
    secrets.write_text(f"GITHUB_TOKEN={SENTINEL}\n")
    (host_dir / "visible.txt").write_text("visible\n")
    settings = _lone_settings(
        tmp_path, sandbox=SandboxSettings(allow_hosts=(), hidden_paths=(secrets,))
    )
    out = _read_in_sandbox(tmp_path, settings, [secrets, host_dir / "visible.txt"])
    assert "visible" in out  # the rest of its directory stays
    assert SENTINEL not in out


def test_the_postgresql_password_and_key_files_are_hidden(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq's password file and client key, named in the database URL or in the daemon's
    environment, are hidden like a SQLite database: they open the history to whoever
    holds them."""
    files = {name: host_dir / name / "secret" for name in ("passfile", "sslkey", "env")}
    for path in files.values():
        path.parent.mkdir()
        path.write_text(f"db.example:5432:afk:afk:{SENTINEL}\n")
    monkeypatch.setenv("PGPASSFILE", str(files["env"]))
    url = (
        f"postgresql://afk@db.example/afk?passfile={files['passfile']}"
        f"&sslmode=verify-full&sslkey={files['sslkey']}"
    )
    settings = _lone_settings(tmp_path, database_url=url)
    assert SENTINEL not in _read_in_sandbox(tmp_path, settings, list(files.values()))


def test_the_keys_of_the_operators_own_ssh_command_are_hidden(
    tmp_path: Path, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's own ``GIT_SSH_COMMAND`` (kept for the daemon's git when no
    ``push.ssh_key_file`` is set) names its key and config: hidden like that key."""
    named = {flag: host_dir / flag / "file" for flag in ("i", "o", "F")}
    for path in named.values():
        path.parent.mkdir()
        path.write_text(SENTINEL)
    monkeypatch.setenv(
        "GIT_SSH_COMMAND",
        f"ssh -i '{named['i']}' -o IdentityFile={named['o']} -F{named['F']} -o BatchMode=yes "
        "-F /dev/null",  # not a key: /dev stays the sandbox's own
    )
    then = "open('/dev/null', 'w').write('fine')\n"
    out = _read_in_sandbox(tmp_path, _lone_settings(tmp_path), list(named.values()), then)
    assert SENTINEL not in out
