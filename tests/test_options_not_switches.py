"""Behaviour is chosen by values passed in, never by assigning a babelspec module's global or a
babelspec class's attribute from outside: no benchmark or test may do it (``setattr`` and
``monkeypatch.setattr`` included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "tests").glob("*.py")])


def _babelspec_names(tree: ast.Module) -> set[str]:
    """Names a file binds to babelspec modules, classes and functions (any import, any depth)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "babelspec":
                    names.add(alias.asname or "babelspec")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "babelspec":
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def switches(source: str) -> list[str]:
    """Each assignment to an attribute of a babelspec module or class in ``source``."""
    tree = ast.parse(source)
    ours = _babelspec_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            named = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            first = node.args[0]
            if named == "setattr" and isinstance(first, ast.Constant) and str(first.value).startswith("babelspec"):
                found.append(f"line {node.lineno}: setattr({first.value!r}, ...)")
            elif named == "setattr" and _root(first) in ours:
                found.append(f"line {node.lineno}: setattr({ast.unparse(first)}, ...)")
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and _root(t) in ours:
                    found.append(f"line {node.lineno}: {ast.unparse(t)} = ...")
    return found


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_benchmark_or_test_flips_a_switch(path: Path) -> None:
    found = switches(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} assigns babelspec state from outside: {found}; pass a value instead"


def test_the_check_sees_a_benchmark_that_sets_a_forward_constant() -> None:
    assert switches("from babelspec import lean\nlean.MERGE_MAX_TOKENS = 4\n") == ["line 2: lean.MERGE_MAX_TOKENS = ..."]
    assert switches("import babelspec.lean as L\nL.MERGE_MAX_TOKENS += 1\n")
    assert switches("from babelspec.drafters.selfdraft import SelfDrafter\nSelfDrafter.TARGET_ROWS = 'none'\n")
    assert switches("from babelspec import agg\ndef t(monkeypatch):\n    monkeypatch.setattr(agg, 'f', 1)\n")
    assert switches("def t(monkeypatch):\n    monkeypatch.setattr('babelspec.lean.X', 1)\n")
    # an instance the file made is its own to configure
    assert not switches("from babelspec.target import Target\nt = Target(m)\nt.precision = 'w8a8'\n")


# Variables that say where things are (folders, files, a compiler), read where they are used. How
# babelspec computes is never among them: ``--forward`` and ``--native`` are read at the command
# line's edge (``babelspec.cli``) and passed in as values.
LOCATIONS = {"BABELSPEC_CACHE", "BABELSPEC_CORPORA", "BABELSPEC_DATA_DIR", "BABELSPEC_ROUTER", "BABELSPEC_MOSCAR",
             "HF_HUB_OFFLINE", "CC"}  # fmt: skip
EDGE = ROOT / "babelspec" / "cli"


def _constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}  # fmt: skip


def environment_reads(source: str) -> list[str]:
    """Each read of the environment in ``source`` (``os.environ[...]``, ``.get``, ``os.getenv``,
    ``os.environ`` itself) whose variable is not one of ``LOCATIONS``."""
    tree = ast.parse(source)
    constants = _constants(tree)
    found, named = [], set()
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and (
                ast.unparse(node.func) in ("os.environ.get", "environ.get", "os.getenv", "getenv")):  # fmt: skip
            key, named = node.args[0], named | {id(node.func.value)}
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            key, named = node.slice, named | {id(node.value)}
        if key is not None:
            value = key.value if isinstance(key, ast.Constant) else constants.get(getattr(key, "id", ""))
            if value not in LOCATIONS:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    for node in ast.walk(tree):  # the whole environment handed on or read some other way
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "os.environ" and id(node) not in named:
            found.append(f"line {node.lineno}: os.environ")
    return found


LIBRARY = sorted(p for p in (ROOT / "babelspec").rglob("*.py") if EDGE not in p.parents)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_library_reads_no_setting_from_the_environment(path: Path) -> None:
    found = environment_reads(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)} reads the environment: {found}; read it at the command line's edge "
                       "(babelspec.cli) and pass a value in")  # fmt: skip


def test_the_environment_check_sees_a_setting_read_where_forwards_are_built() -> None:
    assert environment_reads('import os\nX = "BABELSPEC_NATIVE"\ndef f():\n    return os.environ.get(X, "1")\n')
    assert environment_reads('import os\nv = os.environ["BABELSPEC_FORWARD"]\n')
    assert environment_reads('import os\nv = os.getenv("OMP_NUM_THREADS")\n')
    assert environment_reads('import os\nenv = dict(os.environ)\n')
    assert not environment_reads('import os\nCORPORA = "BABELSPEC_CORPORA"\nv = os.environ.get(CORPORA)\n')
