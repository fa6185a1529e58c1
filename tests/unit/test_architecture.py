"""The package's shape: its top level, what each subpackage owns, which way imports go, sizes.

The size rules (module <= 400 lines, function <= 40 lines, <= 6 parameters with ``self``/``cls``
excluded and dataclass-generated constructors exempt) hold for the whole tree except the
entries in ``KNOWN_OVERSIZE``, each a violation that existed when the rule came in.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"
MAX_TOP_LEVEL = 20
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
MAX_PARAMETERS = 6
# Where ``pipeline.testing`` may be imported from (besides itself): the demo, tests, benchmarks.
TESTING_ALLOWED = ("pipeline/testing/", "pipeline/demo/")
# The demo's sample projects are data shipped with the package, not the package's code.
SAMPLE_CODE = "pipeline/demo/projects/"

# Violations of the size rules that predate them. This set must only shrink: fix an entry and
# remove it (test_known_oversize_entries_are_still_real fails until you do); never add one.
KNOWN_OVERSIZE: frozenset[str] = frozenset()

# Package-level imports that point against the arrows (each closes a cycle between
# subpackages). Like KNOWN_OVERSIZE, this set must only shrink.
KNOWN_BACK_EDGES: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Module:
    name: str  # pipeline.run.flow; a package is named by its folder (pipeline.run)
    path: Path
    tree: ast.Module

    @property
    def relative(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


@cache
def modules() -> dict[str, Module]:
    """Every module of the package (the demo's sample projects aside), by dotted name."""
    found: dict[str, Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(SAMPLE_CODE):
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8")))
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _load_time_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module loads: top level, under if/try, not under TYPE_CHECKING."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _load_time_imports(block)


def _imported_names(module: Module, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """Dotted names an import refers to: ``from a import b`` yields ``a``, then ``a.b``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _resolve(name: str) -> str | None:
    """The package module ``name`` loads: itself, or the nearest enclosing module."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports when it loads."""
    graph: dict[str, set[str]] = {}
    for module in modules().values():
        targets: set[str] = set()
        for node in _load_time_imports(module.tree.body):
            base, *names = _imported_names(module, node)
            if isinstance(node, ast.Import):
                names.append(base)
            # ``from a import b``: b is a module when a.b is one, else a name defined in a.
            for name in names:
                if name.startswith("pipeline"):
                    target = name if name in modules() else _resolve(name.rpartition(".")[0])
                    targets.add(target or name)
        targets.discard(module.name)
        graph[module.name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def subpackage(name: str) -> str:
    """``pipeline.run.flow`` -> ``pipeline.run``; top-level modules stand for themselves."""
    return ".".join(name.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for source, targets in import_graph().items():
        for target in targets:
            a, b = subpackage(source), subpackage(target)
            if a != b and a != "pipeline" and b != "pipeline":
                graph.setdefault(a, set()).add(b)
    return graph


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Parameters a caller can pass: ``self``/``cls`` excluded, ``*args``/``**kw`` one each."""
    a = node.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def size_violations() -> set[str]:
    """Every breach of the size rules, as ``KNOWN_OVERSIZE`` spells them."""
    found: set[str] = set()
    for module in modules().values():
        text = module.path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            found.add(f"module {module.relative}")
        for qualname, node in _functions(module.tree):
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            assert node.end_lineno is not None
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                found.add(f"lines {module.relative}::{qualname}")
            if parameter_count(node) > MAX_PARAMETERS:
                found.add(f"params {module.relative}::{qualname}")
    return found


def test_the_package_has_at_most_twenty_top_level_entries() -> None:
    """pipeline/ holds at most 20 files and folders (caches aside), so the map stays readable."""
    entries = sorted(
        p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")
    )
    assert len(entries) <= MAX_TOP_LEVEL, f"{len(entries)} entries in pipeline/: {entries}"


def test_every_subpackage_says_what_it_owns() -> None:
    """Each package's __init__ opens with a docstring (the demo's sample projects aside)."""
    silent = [
        m.relative
        for m in modules().values()
        if m.is_package and len((ast.get_docstring(m.tree) or "").split()) < 4
    ]
    assert silent == [], f"packages without a docstring saying what they own: {silent}"


def test_only_tests_benchmarks_and_the_demo_import_the_test_doubles() -> None:
    """No production module imports pipeline.testing, even lazily inside a function."""
    offenders: list[str] = []
    for module in modules().values():
        if module.relative.startswith(TESTING_ALLOWED):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported_names(module, node)
                if any(n == "pipeline.testing" or n.startswith("pipeline.testing.") for n in names):
                    offenders.append(f"{module.relative}:{node.lineno}")
    assert offenders == [], f"production code imports pipeline.testing: {offenders}"


def test_no_import_cycles_between_modules() -> None:
    """Loading any module never needs a module that (transitively) needs it back."""
    assert cycles(import_graph()) == []


def test_subpackages_import_one_way() -> None:
    """Between subpackages the imports form no cycle, once the known back edges are set aside."""
    graph = package_graph()
    for source, target in KNOWN_BACK_EDGES:
        graph.get(source, set()).discard(target)
    assert cycles(graph) == []


def test_known_back_edges_still_exist() -> None:
    """A back edge that was removed leaves KNOWN_BACK_EDGES too, so the set only shrinks."""
    graph = package_graph()
    stale = sorted(e for e in KNOWN_BACK_EDGES if e[1] not in graph.get(e[0], set()))
    assert stale == [], f"remove these from KNOWN_BACK_EDGES: {stale}"


def test_modules_and_functions_stay_small() -> None:
    """No module over 400 lines, no function over 40 lines or with more than 6 parameters."""
    new = sorted(size_violations() - KNOWN_OVERSIZE)
    assert new == [], f"over the size limits (split them; do not add to KNOWN_OVERSIZE): {new}"


def test_known_oversize_entries_are_still_real() -> None:
    """A fixed violation leaves KNOWN_OVERSIZE too, so the set only shrinks."""
    stale = sorted(KNOWN_OVERSIZE - size_violations())
    assert stale == [], f"fixed: remove these from KNOWN_OVERSIZE: {stale}"


def test_the_size_measure_sees_what_it_should() -> None:
    """The measure counts lines and parameters as the rules say (self excluded, *args one)."""
    source = "class A:\n    def f(self, a, b, *c, d, **e):\n" + "        x = 1\n" * 40
    tree = ast.parse(source)
    (name, node), *_ = _functions(tree)
    assert isinstance(node, ast.FunctionDef) and node.end_lineno is not None
    assert (name, parameter_count(node), node.end_lineno - node.lineno + 1) == ("A.f", 5, 41)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The cycle check can fail: a -> b -> c -> a is found, a -> b -> c is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
