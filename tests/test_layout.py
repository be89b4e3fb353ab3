"""The layout's rule: every import points down, so no module or package reaches back up.

import-linter (``lint-imports``, run by ``make test`` with the contracts in pyproject.toml)
checks the layers; this test walks the same import graph (grimp, which import-linter builds
on) for cycles, which a layers contract does not see inside one layer.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("babelspec")


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def _edges(graph: grimp.ImportGraph, name) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = name(module), name(imported)
            if a != b:
                edges.setdefault(a, set()).add(b)
    return edges


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert strongly_connected({"a", "b", "c"}, {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a", "b", "c"}, {"a": {"b"}, "b": {"c"}}) == []


def test_no_module_imports_itself_back(graph) -> None:
    edges = _edges(graph, lambda m: m)
    assert strongly_connected(set(graph.modules), edges) == []


def test_no_top_level_package_imports_itself_back(graph) -> None:
    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges = _edges(graph, top)
    assert strongly_connected({top(m) for m in graph.modules}, edges) == []


def test_no_function_outside_the_tests_is_longer_than_80_lines():
    import ast

    root = Path(__file__).resolve().parents[1]
    long = []
    for path in sorted([*(root / "babelspec").rglob("*.py"), *(root / "benchmarks").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not long, f"split these into functions of at most 80 lines: {long}"
