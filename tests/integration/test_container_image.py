"""The container image as docs/deploy/Containerfile builds it: a pinned agent CLI, a
HEALTHCHECK that asks liveness, and a runtime wheel without the test fakes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from pipeline.http.app import create_app, serve
from pipeline.store import Store
from pipeline.testing.ports import free_port
from tests.integration.api_harness import make_settings

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "docs" / "deploy" / "Containerfile"
STRIPPED = ("pipeline/testing/", "pipeline/demo/")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_claude_cli_is_installed_at_a_pinned_version() -> None:
    """The image installs @anthropic-ai/claude-code at an exact version from an ARG."""
    args = dict(rest.split("=", 1) for word, rest in instructions() if word == "ARG")
    assert re.fullmatch(r"\d+\.\d+\.\d+", args.get("CLAUDE_CODE_VERSION", "")), args
    installs = [rest for word, rest in instructions() if word == "RUN" and "claude-code" in rest]
    assert installs and all(
        "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" in r for r in installs
    )


def _healthcheck_argv() -> list[str]:
    (check,) = [rest for word, rest in instructions() if word == "HEALTHCHECK"]
    assert "/health/live" in check
    return list(json.loads(check[check.index("CMD") + 3 :].strip()))


def test_healthcheck_asks_liveness_and_fails_when_nothing_listens(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The HEALTHCHECK command exits 0 against a serving daemon (its database down or not)
    on PIPELINE_HTTP_LISTEN's port, and non-zero when nothing listens there."""
    argv = _healthcheck_argv()
    assert argv[0] == "python"
    command = [sys.executable, *argv[1:]]
    down_url = "postgresql://nobody@127.0.0.1:1/none"  # liveness must not care
    store = Store(down_url)
    handle = serve(create_app(store, make_settings(down_url, tmp_path)))
    try:
        env = {**os.environ, "PIPELINE_HTTP_LISTEN": f"0.0.0.0:{handle.port}"}
        healthy = subprocess.run(command, env=env, capture_output=True, check=False)
    finally:
        handle.stop()
        store.close()
    env = {**os.environ, "PIPELINE_HTTP_LISTEN": f"0.0.0.0:{free_port()}"}
    dead = subprocess.run(command, env=env, capture_output=True, check=False)
    assert healthy.returncode == 0, healthy.stderr
    assert dead.returncode != 0


def test_the_image_installs_the_stripped_wheel() -> None:
    """The runtime stage installs only the wheel the first stage stripped of the fakes,
    and copies no source of its own."""
    stages: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            stages.append([])
        stages[-1].append((word, rest))
    build, runtime = stages
    assert any(w == "RUN" and "scripts/runtime-wheel /wheels/" in r for w, r in build)
    copies = [r for w, r in runtime if w == "COPY"]
    assert copies == ["--from=wheel /wheels /tmp/wheels"]
    assert any(w == "RUN" and "pip install" in r and "/tmp/wheels/*.whl" in r for w, r in runtime)


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as the image's first stage builds it, then stripped."""
    out = tmp_path_factory.mktemp("wheels")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=600)
    (wheel,) = out.glob("afk_pipeline-*.whl")
    script = ROOT / "scripts" / "runtime-wheel"
    stripped = subprocess.run(
        [sys.executable, str(script), str(wheel)], capture_output=True, text=True, check=False
    )
    assert stripped.returncode == 0, stripped.stderr
    return wheel


def test_the_runtime_wheel_has_no_test_fakes_and_a_true_record(runtime_wheel: Path) -> None:
    """The stripped wheel lists no pipeline/testing or pipeline/demo file, keeps the rest
    (templates, migrations), and its RECORD names exactly the files it holds."""
    with zipfile.ZipFile(runtime_wheel) as wheel:
        names = set(wheel.namelist())
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        recorded = {line.split(",")[0] for line in wheel.read(record).decode().splitlines()}
    assert not [n for n in names if n.startswith(STRIPPED)]
    assert any(n.startswith("pipeline/http/templates/") for n in names)
    assert any(n.startswith("pipeline/migrations/versions/") for n in names)
    assert recorded == names


def test_the_runtime_install_runs_without_the_fakes(runtime_wheel: Path, tmp_path: Path) -> None:
    """Installed from the stripped wheel, the daemon's modules import and `pipeline demo`
    says it is not in this installation (exit 2) instead of a traceback."""
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target)]
    subprocess.run([*install, str(runtime_wheel)], check=True, capture_output=True, timeout=300)
    probe = (
        "import sys, pipeline, pipeline.daemon, pipeline.cli.main as m;"
        f"assert pipeline.__file__.startswith({str(target)!r}), pipeline.__file__;"
        "sys.exit(m.main(['demo']))"
    )
    # -S: no .pth files, so this checkout's editable install cannot supply what the
    # wheel lacks; the dependencies come from site-packages on PYTHONPATH instead.
    path = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    env = {**os.environ, "PYTHONPATH": path}
    demo = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env=env,
        cwd=tmp_path,  # not the checkout, whose pipeline/ would be imported instead
        capture_output=True,
        text=True,
        check=False,
    )
    assert demo.returncode == 2, shlex.join(["python", "-c", probe]) + "\n" + demo.stderr
    assert "not in this installation" in demo.stderr
