"""No import cycle anywhere in course_lib, counting imports inside functions too.

A cycle hidden in a function (``from .reductions import sum_to`` inside a rule) still ties
two modules together: neither can be read, tested or moved without the other. The graph is
read from the source with ``ast``: an edge for every ``import`` of a course_lib module, at
any depth of the file.
"""

import ast
from pathlib import Path

import pytest

import course_lib

ROOT = Path(course_lib.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The course_lib modules that the file of module ``name`` imports, anywhere in it.

    ``from X import a`` runs X (and the packages above it) and, if ``a`` is a module, X.a;
    the packages above the importer itself are already running, so they are no edge.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # submodules
    running = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {m for m in _with_parents(found) if m in MODULES and m != name} - running


def _with_parents(modules: set[str]) -> set[str]:
    """The modules and every package above them (importing a.b.c runs a and a.b first)."""
    return {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 2)}


def import_graph() -> dict[str, set[str]]:
    return {name: imported(name, path) for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "course_lib.graph" in graph["course_lib.ops.elementwise"]  # from ..graph import
    assert "course_lib.params" in graph["course_lib.ops.elementwise"]  # from .. import params
    assert "course_lib.ops" in graph["course_lib"]  # from .ops import *


@pytest.mark.parametrize(
    "graph, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": set(), "c": {"c2"}, "c2": {"c"}}, ["c", "c2", "c"]),
        ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle


def test_function_local_imports_are_edges(tmp_path):
    source = "def rule():\n    from .reductions import sum_to\n    return sum_to\n"
    path = tmp_path / "shape.py"
    path.write_text(source)
    assert "course_lib.ops.reductions" in imported("course_lib.ops.shape", path)


def test_course_lib_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
