"""The greeting library and its command line."""

import io
import unittest
from contextlib import redirect_stdout

from greeter import greet
from greeter.cli import main


class GreetTest(unittest.TestCase):
    def test_greets_by_name(self) -> None:
        self.assertEqual(greet("Ada"), "Hello, Ada!")

    def test_blank_name_greets_the_world(self) -> None:
        self.assertEqual(greet("  "), "Hello, world!")


class CliTest(unittest.TestCase):
    def test_prints_the_greeting(self) -> None:
        out = io.StringIO()
        with redirect_stdout(out):
            code = main(["Grace"])
        self.assertEqual((code, out.getvalue()), (0, "Hello, Grace!\n"))
