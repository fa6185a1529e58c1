"""The scripted agent of the ship-and-watch e2e tests (run as a script by the command agent).

Usage: ``python ship_agent.py PROMPT_FILE WORKDIR``. It reads the world
description (a JSON file named by ``$AGENT_WORLD``: ``log``, ``fix_mode``,
``remote``), appends one JSON line per invocation to the log, and acts on the
prompt, making real edits the pipeline then tests, commits and ships:

- a rebase conflict handed over -> ``BLOCKED`` (it cannot choose between two wordings)
- ``Fix-forward:`` in the prompt -> heals ``lib.status`` (``fix_mode`` ``heal``)
  or makes a change that leaves it broken (``fail``; ``fail-when-released`` first waits
  for the ``release`` file described below), or changes nothing (``nothing-when-released``,
  after that wait: it finds nothing wrong)
- ``afk-task: feature NAME`` -> ``NAME.py`` and ``test_NAME.py``
- ``afk-task: break`` -> ``lib.status()`` raises; the tests stay green
- ``afk-task: race-clean NAME`` -> a feature, while a commit on another file
  is pushed to the remote
- ``afk-task: race-conflict`` -> edits ``GREETING``, while a commit changing the
  same line is pushed to the remote
- ``afk-task: red`` -> breaks ``greeting`` so its test fails, every time it is asked
- ``afk-task: big-file NAME`` -> a feature, plus a 51 MiB ``assets/NAME.bin``
- ``afk-task: crash`` -> exits 3 without a word (a crashing agent)
- ``afk-task: sleep`` -> sleeps far longer than any run's time limit
- ``afk-task: block-when-released`` -> waits for a ``release`` file beside the world
  description, then stops ``BLOCKED`` (an ending that races a cancel)
- ``afk-task: feature-when-released NAME`` -> waits for that ``release`` file, then
  writes the feature (an agent still at work when a human closes the issue)
- ``afk-task: reviewed NAME`` -> a feature without a docstring; asked by a
  reviewer's changes, adds the docstring
- as the reviewer (``afk-review:`` in the prompt) -> tries to write in the
  tree (logged: refused or written), then requests a docstring in ``NAME.py``
  until there is one (``reviewed``) or always (``rejected``)
- ``afk-task: afk-toml`` -> writes an ``.afk.toml`` whose test command records
  ``attacker`` in the agent area's ``gate-log`` and whose prompt says ``ATTACKER-NOTE-1``

Only the standard library: it runs under the daemon's interpreter in the worktree.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

HEALTHY = '    return "ok"\n'
BROKEN = '    raise RuntimeError("status backend unreachable")\n'
STATUS_TEST = (
    "import unittest\n\nimport lib\n\n\nclass StatusTest(unittest.TestCase):\n"
    "    def test_status_is_ok(self):\n        self.assertEqual(lib.status(), 'ok')\n"
)


def push_to_remote(remote: str, files: dict[str, str], message: str) -> None:
    """What a human does meanwhile: commit ``files`` on the remote's main.

    The agent's sandbox cannot reach the remote, and a human is not in it: the
    request goes to the test's "human" (``world.HumanDesk``) through the agent
    area, and the agent waits until it is done.
    """
    desk = Path(os.environ["AGENT_WORLD"]).parent / "human"
    desk.mkdir(exist_ok=True)
    request = desk / f"{time.time_ns()}.json"
    # Written aside, then renamed: the desk, polling for *.json, never reads half a request.
    pending = request.with_suffix(".writing")
    pending.write_text(json.dumps({"remote": remote, "files": files, "message": message}))
    os.replace(pending, request)
    done = request.with_suffix(".done")
    deadline = time.monotonic() + 60
    while not done.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the human never pushed {message!r}")
        time.sleep(0.05)


def fix_forward(wd: Path, mode: str, run_id: int | None) -> str:
    if mode == "fail-when-released":
        wait_for_release()
        mode = "fail"
    if mode == "nothing-when-released":
        wait_for_release()
        return "the code is fine; the CI failure looks flaky, nothing to change"
    lib = wd / "lib.py"
    text = lib.read_text()
    if mode == "heal":
        (wd / "test_status.py").write_text(STATUS_TEST)
        lib.write_text(re.sub(r"    raise RuntimeError\(.*\)\n", HEALTHY, text))
        return "status answers ok again, with a test"
    lib.write_text(text.replace("unreachable", f"unreachable (retried by run {run_id})"))
    return "retried the backend call"


def feature(wd: Path, name: str) -> str:
    (wd / f"test_{name}.py").write_text(
        f"import unittest\n\nfrom {name} import {name}\n\n\nclass T(unittest.TestCase):\n"
        f"    def test_{name}(self):\n        self.assertEqual({name}(), '{name}')\n"
    )
    (wd / f"{name}.py").write_text(f"def {name}():\n    return '{name}'\n")
    return f"added {name}"


DOCSTRING = '"""Reviewed."""\n'


def review(wd: Path, task: str, name: str) -> tuple[str, str]:
    """The reviewer's answer and whether its write into the tree was refused."""
    try:
        (wd / "REVIEWER_WAS_HERE").write_text("x")
        write = "written"
    except OSError:
        write = "refused"
    module = wd / f"{name}.py"
    if task == "reviewed" and module.exists() and module.read_text().startswith(DOCSTRING):
        return "VERDICT: APPROVE\nThe module is documented.", write
    return f"VERDICT: REQUEST_CHANGES\n{name}.py needs the module docstring {DOCSTRING}", write


def reviewed(wd: Path, name: str, prompt: str) -> str:
    if "A reviewer read your change" not in prompt:
        return feature(wd, name)
    module = wd / f"{name}.py"
    module.write_text(DOCSTRING + module.read_text())
    return f"documented {name}"


def big_file(wd: Path, name: str) -> str:
    """A feature that also commits 51 MiB of data (over the default file size limit)."""
    (wd / "assets").mkdir(exist_ok=True)
    with open(wd / "assets" / f"{name}.bin", "wb") as blob:
        blob.truncate(51 * 1024 * 1024)
    return feature(wd, name)


def wait_for_release() -> None:
    """Until the test writes ``release`` beside the world description (two minutes at most)."""
    release = Path(os.environ["AGENT_WORLD"]).parent / "release"
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def do_task(wd: Path, world: dict[str, Any], task: str, argument: str | None) -> str:
    lib = wd / "lib.py"
    if task in ("reviewed", "rejected"):
        return reviewed(wd, argument or "extra", world["prompt"])
    if task in ("feature", "big-file"):
        return (big_file if task == "big-file" else feature)(wd, argument or "extra")
    if task == "race-clean":
        done = feature(wd, argument or "extra")
        notes = {"NOTES.md": "Release notes, written by a human.\n"}
        push_to_remote(world["remote"], notes, "Add release notes")
        return done
    if task == "break":
        lib.write_text(lib.read_text().replace(HEALTHY, BROKEN))
        return "status now asks the backend"
    if task == "race-conflict":
        mine = lib.read_text().replace('GREETING = "hello"', 'GREETING = "hi"')
        lib.write_text(mine)
        theirs = mine.replace('GREETING = "hi"', 'GREETING = "hey"')
        push_to_remote(world["remote"], {"lib.py": theirs}, "Greet with hey")
        return "greeting shortened"
    if task == "red":
        lib.write_text(lib.read_text().replace('f"{GREETING}, {name}"', 'f"{GREETING} {name}"'))
        return "greeting reworded"
    if task == "crash":
        raise SystemExit(3)
    if task == "sleep":
        time.sleep(600)
    if task == "block-when-released":
        wait_for_release()
        return "BLOCKED: which of the two designs?"
    if task == "feature-when-released":
        wait_for_release()
        return feature(wd, argument or "extra")
    if task == "afk-toml":
        gate_log = Path(os.environ["AGENT_WORLD"]).parent / "gate-log"
        script = f"open({str(gate_log)!r}, 'a').write('attacker\\n')"
        command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
        settings = f'test_command = {json.dumps(command)}\nprompt = "ATTACKER-NOTE-1"\n'
        (wd / ".afk.toml").write_text(settings)
        return "the test command is mine now"
    return f"BLOCKED: unknown afk-task {task!r}"


def main(prompt_file: str, workdir: str) -> None:
    world = json.loads(Path(os.environ["AGENT_WORLD"]).read_text())
    prompt = Path(prompt_file).read_text()
    wd = Path(workdir)
    runs = re.findall(r"Afk-Run: (\d+)", prompt)  # the contract's comes last
    run_id = int(runs[-1]) if runs else None
    task = re.search(r"afk-task: ([\w-]+)(?: ([\w-]+))?", prompt)
    fix = "Fix-forward:" in prompt
    conflict = "no longer applies on top of it" in prompt
    reviewing = prompt.startswith("afk-review:")
    answer = None
    if reviewing and task:
        answer, write = review(wd, task.group(1), task.group(2) or "extra")
    entry = {
        "run": run_id,
        "fix_forward": fix,
        "conflict": conflict,
        "task": task.group(0) if task else None,
        "token_vars": sorted(k for k in os.environ if "TOKEN" in k.upper()),
        "notes": re.findall(r"[A-Z]+-NOTE-\d+", prompt),
        "t": time.time(),
        "review": write if answer else None,
    }
    with open(world["log"], "a") as log:
        log.write(json.dumps(entry) + "\n")
    world["prompt"] = prompt
    if answer:
        print(answer)
    elif conflict:
        print("BLOCKED: both changes rewrite GREETING; a human must choose the wording")
    elif fix:
        print(fix_forward(wd, world["fix_mode"], run_id))
    elif task is None:
        print("BLOCKED: no afk-task line in the issue")
    else:
        print(do_task(wd, world, task.group(1), task.group(2)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
