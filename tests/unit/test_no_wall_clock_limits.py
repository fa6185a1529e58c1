"""Tests check behaviour, not speed: no assertion compares a measured duration.

A limit such as ``assert elapsed < 1.0`` fails on a loaded machine and says nothing about
behaviour; speed belongs in ``benchmarks/``. Waiting with a deadline (``while time.monotonic()
< deadline``, ``assert time.monotonic() < deadline, "still open"``) is a hang guard and allowed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns"}


def _is_clock_call(node: ast.AST) -> bool:
    """``time.monotonic()``, ``monotonic()``, ``time.perf_counter()``..."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in CLOCKS


def _is_duration(node: ast.AST, durations: set[str]) -> bool:
    """A clock reading minus something, a name holding one, or a timedelta's total_seconds()."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub):
            if _is_clock_call(sub.left) or _is_clock_call(sub.right):
                return True
        if isinstance(sub, ast.Name) and sub.id in durations:
            return True
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "total_seconds"
        ):
            return True
    return False


def _duration_names(tree: ast.AST) -> set[str]:
    """Names assigned a measured duration anywhere in the module (``elapsed = now() - t0``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_duration(node.value, set()):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if isinstance(node.target, ast.Name) and _is_duration(node.value, set()):
                names.add(node.target.id)
    return names


def wall_clock_limits(source: str) -> Iterator[int]:
    """Line numbers of assertions that compare a measured duration."""
    tree = ast.parse(source)
    durations = _duration_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if any(_is_duration(side, durations) for side in [compare.left, *compare.comparators]):
                yield node.lineno
                break


def test_no_test_asserts_a_duration() -> None:
    """No file under tests/ asserts on how long something took."""
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in wall_clock_limits(path.read_text(encoding="utf-8"))
    ]
    assert found == [], f"wall-clock limits in tests (check behaviour instead): {found}"


def test_the_check_finds_each_form_of_limit() -> None:
    """Each way of writing a limit is found; a deadline guard and a plain comparison are not."""
    limits = """
import time
started = time.monotonic()
assert time.monotonic() - started < 0.5
elapsed = time.monotonic() - started
assert elapsed < 3.0, "took too long"
assert ok and took.total_seconds() > 1.5
"""
    allowed = """
import time
deadline = time.monotonic() + 5
assert time.monotonic() < deadline, "the stream is still open"
assert len(runs) < 3
"""
    assert list(wall_clock_limits(limits)) == [4, 6, 7]
    assert list(wall_clock_limits(allowed)) == []
