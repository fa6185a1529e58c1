"""The demo issues' changes, as the local demo agent makes them, test first.

Each ``Task`` is recognised by the tag ``demo-task: <name>`` in an issue body.
Its ``first`` change is what the agent writes for the issue; ``heal`` is what
it writes when a fix-forward prompt brings back failure evidence. The
``add-version`` task is built to pass its tests yet break the deploy: its
first change moves the deployed version out of ``/health`` (which the deploy
probe reads) into the new ``/version``; the heal puts it back and adds the
test that holds the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` by ``new`` in ``path`` (``old`` empty: append ``new``)."""

    path: str
    old: str
    new: str
    why: str

    def applies_to(self, workdir: Path) -> bool:
        target = workdir / self.path
        if not target.is_file():
            return False
        return not self.old or self.old in target.read_text(encoding="utf-8")

    def apply(self, workdir: Path) -> None:
        target = workdir / self.path
        text = target.read_text(encoding="utf-8")
        if not self.old:
            text = text.rstrip("\n") + "\n" + self.new
        else:
            text = text.replace(self.old, self.new, 1)
        target.write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class Change:
    """One test-first change: a test that fails, the edits, one commit."""

    subject: str
    body: str
    test_path: str
    test_text: str
    edits: tuple[Edit, ...]

    def applied(self, workdir: Path) -> bool:
        return (workdir / self.test_path).exists()

    def missing_anchors(self, workdir: Path) -> list[str]:
        """The edits whose anchor text is not in the checkout (empty: it applies)."""
        return [f"{e.path}: {e.why}" for e in self.edits if not e.applies_to(workdir)]

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.test_path, *dict.fromkeys(e.path for e in self.edits))


@dataclass(frozen=True)
class Task:
    tag: str
    first: Change
    heal: Change | None = None


SHOUT_TEST = '''\
"""The --shout option: the greeting in capitals."""

import io
import unittest
from contextlib import redirect_stdout

from greeter import greet
from greeter.cli import main


class ShoutTest(unittest.TestCase):
    def test_greet_can_shout(self) -> None:
        self.assertEqual(greet("Ada", shout=True), "HELLO, ADA!")

    def test_cli_shout_option(self) -> None:
        out = io.StringIO()
        with redirect_stdout(out):
            main(["--shout", "Ada"])
        self.assertEqual(out.getvalue(), "HELLO, ADA!\\n")
'''

ADD_SHOUT = Task(
    "add-shout",
    Change(
        subject="Add a --shout option to the greeter command",
        body="greet() takes shout=False; `python -m greeter --shout Ada` prints HELLO, ADA!.",
        test_path="tests/test_shout.py",
        test_text=SHOUT_TEST,
        edits=(
            Edit(
                "greeter/core.py",
                "def greet(name: str) -> str:",
                "def greet(name: str, shout: bool = False) -> str:",
                "greet() takes shout=False",
            ),
            Edit(
                "greeter/core.py",
                '    return f"Hello, {name}!"\n',
                '    greeting = f"Hello, {name}!"\n'
                "    return greeting.upper() if shout else greeting\n",
                "shouting upper-cases the greeting",
            ),
            Edit(
                "greeter/cli.py",
                "    args = parser.parse_args(argv)\n",
                '    parser.add_argument("--shout", action="store_true",'
                ' help="greet in capitals")\n'
                "    args = parser.parse_args(argv)\n",
                "the --shout option",
            ),
            Edit(
                "greeter/cli.py",
                "    print(greet(args.name))\n",
                "    print(greet(args.name, shout=args.shout))\n",
                "the command passes --shout on",
            ),
        ),
    ),
)

FAREWELL_TEST = '''\
"""farewell(): the counterpart of greet()."""

import unittest

from greeter import farewell


class FarewellTest(unittest.TestCase):
    def test_says_goodbye_by_name(self) -> None:
        self.assertEqual(farewell("Ada"), "Goodbye, Ada!")

    def test_blank_name_says_goodbye_to_the_world(self) -> None:
        self.assertEqual(farewell(" "), "Goodbye, world!")
'''

FAREWELL_CODE = '''

def farewell(name: str) -> str:
    """A goodbye for ``name``; a blank name says goodbye to the world."""
    name = name.strip() or "world"
    return f"Goodbye, {name}!"
'''

ADD_FAREWELL = Task(
    "add-farewell",
    Change(
        subject="Add farewell() to the greeter library",
        body="farewell(name) returns 'Goodbye, <name>!' and treats a blank name like greet().",
        test_path="tests/test_farewell.py",
        test_text=FAREWELL_TEST,
        edits=(
            Edit("greeter/core.py", "", FAREWELL_CODE, "farewell() next to greet()"),
            Edit(
                "greeter/__init__.py",
                "from greeter.core import greet\n",
                "from greeter.core import farewell, greet\n",
                "export farewell",
            ),
            Edit(
                "greeter/__init__.py",
                '__all__ = ["greet"]',
                '__all__ = ["farewell", "greet"]',
                "list farewell in __all__",
            ),
        ),
    ),
)

VERSION_TEST = '''\
"""GET /version: the deployed commit and the release number."""

import os
import unittest
from unittest import mock

from service import RELEASE
from service.routes import handle


class VersionTest(unittest.TestCase):
    def test_version_reports_commit_and_release(self) -> None:
        with mock.patch.dict(os.environ, {"APP_VERSION": "abc1234"}):
            status, body = handle("/version")
        self.assertEqual((status, body), (200, {"version": "abc1234", "release": RELEASE}))
'''

VERSION_CODE = """

def version() -> Response:
    return 200, {"version": deployed_commit(), "release": RELEASE}
"""

HEALTH_WITH_VERSION = '    return 200, {"status": "ok", "version": deployed_commit()}\n'
HEALTH_WITHOUT_VERSION = '    return 200, {"status": "ok"}\n'
ROUTE_TABLE = '{"/": index, "/health": health}'

ADD_VERSION = Task(
    "add-version",
    Change(
        subject="Add a /version endpoint",
        body="GET /version reports the deployed commit and the release; /health now "
        "only says the service is up.",
        test_path="tests/test_version.py",
        test_text=VERSION_TEST,
        edits=(
            Edit(
                "service/routes.py",
                HEALTH_WITH_VERSION,
                HEALTH_WITHOUT_VERSION + VERSION_CODE,
                "/version reports the build; /health keeps to liveness",
            ),
            Edit(
                "service/routes.py",
                ROUTE_TABLE,
                '{"/": index, "/health": health, "/version": version}',
                "route /version",
            ),
        ),
    ),
    heal=Change(
        subject="Put the deployed version back into /health",
        body="The deploy probe reads `version` from /health; the /version change had "
        "moved it out, so the deploy was judged broken. A test now holds that "
        "contract.",
        test_path="tests/test_health_contract.py",
        test_text='''\
"""/health reports the deployed commit: the deploy's probe checks it."""

import os
import unittest
from unittest import mock

from service.routes import handle


class HealthContractTest(unittest.TestCase):
    def test_health_reports_the_deployed_commit(self) -> None:
        with mock.patch.dict(os.environ, {"APP_VERSION": "abc1234"}):
            status, body = handle("/health")
        self.assertEqual((status, body.get("version")), (200, "abc1234"))
''',
        edits=(
            Edit(
                "service/routes.py",
                HEALTH_WITHOUT_VERSION,
                HEALTH_WITH_VERSION,
                "/health reports the deployed commit again",
            ),
        ),
    ),
)

TASKS: dict[str, Task] = {task.tag: task for task in (ADD_SHOUT, ADD_FAREWELL, ADD_VERSION)}
