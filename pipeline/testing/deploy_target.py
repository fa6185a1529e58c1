"""A local deploy target: a bare remote whose push deploys and restarts a small app.

``DeployTarget.create`` makes ``<tmp>/remote.git`` with a ``post-receive`` hook.
A push to ``main`` extracts the pushed tree into ``<tmp>/deploy/releases/<sha>``
and (re)starts ``app.py`` from it, detached in its own session with a pid file,
on a 127.0.0.1 port fixed at creation. The demo app answers ``GET /health``
with ``{"version": <sha>, "status": "ok"}``; a ``BROKEN`` file in the tree, or a
``lib.status()`` that raises, makes it answer 500, and an import error stops it
from starting at all. The hook waits briefly for the app to listen (or die),
so by the time ``git push`` returns the new version is serving.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.settings import ProbeSettings
from pipeline.testing.ports import free_port

DEMO_APP = '''"""Demo service deployed by the local deploy target."""
import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import lib

VERSION = os.environ.get("APP_VERSION", "unknown")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health":
            self.send_error(404)
            return
        try:
            if Path("BROKEN").exists():
                raise RuntimeError("BROKEN marker present")
            code, body = 200, {"version": VERSION, "status": lib.status()}
        except Exception as exc:
            code, body = 500, {"version": VERSION, "status": "error", "error": repr(exc)}
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

DEMO_LIB = """def status():
    return "ok"
"""

DEMO_FILES: dict[str, str] = {"app.py": DEMO_APP, "lib.py": DEMO_LIB}

_HOOK = r'''#!{python}
"""post-receive: deploy the pushed main to a release directory and restart the app."""
import io, json, os, signal, socket, subprocess, sys, tarfile, time
from pathlib import Path

CONFIG = json.loads(Path({config!r}).read_text())
DEPLOY = Path(CONFIG["deploy_dir"])
PID_FILE = DEPLOY / "app.pid"


def alive(pid):
    try:
        state = Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def listening(port):
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop_old():
    if not PID_FILE.exists():
        return
    pid = int(PID_FILE.read_text())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except OSError:
            break
        deadline = time.monotonic() + 3
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not alive(pid):
            break
    PID_FILE.unlink()


def deploy(sha):
    release = DEPLOY / "releases" / sha
    release.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "archive", "--format=tar", sha], check=True,
                         capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(release, filter="data")
    stop_old()
    env = {{"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(CONFIG["port"]),
           "APP_VERSION": sha, "PYTHONDONTWRITEBYTECODE": "1"}}
    with open(DEPLOY / "app.log", "ab") as log:
        app = subprocess.Popen([sys.executable, "app.py"], cwd=release, env=env,
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               start_new_session=True)
    PID_FILE.write_text(str(app.pid))
    (DEPLOY / "current").write_text(sha)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and app.poll() is None and not listening(CONFIG["port"]):
        time.sleep(0.02)
    print(f"deployed {{sha[:12]}}: " + ("up" if app.poll() is None else "app exited"))


for line in sys.stdin:
    old, new, ref = line.split()
    if ref == "refs/heads/" + CONFIG["branch"] and set(new) != {{"0"}}:
        deploy(new)
'''


def _git(cwd: Path, *args: str) -> str:
    identity = ["-c", "user.name=deploy target", "-c", "user.email=deploy@target.invalid"]
    done = subprocess.run(
        ["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class DeployTarget:
    root: Path
    port: int
    initial_sha: str
    branch: str = "main"

    @property
    def remote(self) -> Path:
        return self.root / "remote.git"

    @property
    def remote_url(self) -> str:
        return str(self.remote)

    @property
    def deploy_dir(self) -> Path:
        return self.root / "deploy"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        return f"{self.url}/health"

    def probe(self, timeout_s: float = 5.0) -> ProbeSettings:
        """An http probe of the health endpoint that wants the pushed SHA as ``version``."""
        return ProbeSettings(
            kind="http", url=self.health_url, json_field="version", timeout_s=timeout_s
        )

    @classmethod
    def create(
        cls, tmp: Path, files: Mapping[str, str] | None = None, branch: str = "main"
    ) -> DeployTarget:
        """Make the remote and hook, push ``files`` (default: the demo app) as the first commit."""
        tmp.mkdir(parents=True, exist_ok=True)
        port = free_port()
        deploy_dir = tmp / "deploy"
        deploy_dir.mkdir(exist_ok=True)
        config = tmp / "target.json"
        config.write_text(
            json.dumps({"port": port, "deploy_dir": str(deploy_dir), "branch": branch}),
            encoding="utf-8",
        )
        remote = tmp / "remote.git"
        _git(tmp, "init", "-q", "--bare", f"--initial-branch={branch}", str(remote))
        hook = remote / "hooks" / "post-receive"
        hook.write_text(_HOOK.format(python=sys.executable, config=str(config)), encoding="utf-8")
        hook.chmod(0o755)
        sha = cls._seed(tmp / "seed", remote, DEMO_FILES if files is None else files, branch)
        return cls(root=tmp, port=port, initial_sha=sha, branch=branch)

    @staticmethod
    def _seed(seed: Path, remote: Path, files: Mapping[str, str], branch: str) -> str:
        _git(seed.parent, "init", "-q", f"--initial-branch={branch}", str(seed))
        for name, text in files.items():
            path = seed / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        _git(seed, "add", "-A")
        _git(seed, "commit", "-q", "-m", "Initial deployable app")
        _git(seed, "push", "-q", str(remote), f"HEAD:refs/heads/{branch}")
        return _git(seed, "rev-parse", "HEAD")

    def app_pid(self) -> int | None:
        pid_file = self.deploy_dir / "app.pid"
        if not pid_file.exists():
            return None
        pid = int(pid_file.read_text(encoding="utf-8"))
        return pid if _alive(pid) else None

    def deployed_sha(self) -> str | None:
        current = self.deploy_dir / "current"
        return current.read_text(encoding="utf-8").strip() if current.exists() else None

    def health(self, timeout_s: float = 5.0) -> tuple[int, dict[str, object]] | None:
        """``(status, json)`` from the health endpoint; ``None`` when nothing answers."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=timeout_s) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return int(error.code), json.loads(error.read() or b"{}")
        except OSError:
            return None

    def app_log(self) -> str:
        log = self.deploy_dir / "app.log"
        return log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""

    def stop(self, timeout_s: float = 5.0) -> None:
        """Kill the app's process group; idempotent."""
        pid = self.app_pid()
        if pid is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except OSError:
                return
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if not _alive(pid):
                return
