"""The import graph of lexi/: no circle, and the layers hold (DESIGN.md's table: a lower layer never imports a higher).

Every module under lexi/ is parsed with `ast`, nothing is imported: imports at module level, inside functions and
under `if TYPE_CHECKING:` all count (a circle of type-only imports is still one a reader has to hold in mind), as
does the package of a `from package import name`. Anyone can run it alone, in about a second:

    .venv/bin/python -m pytest tests/test_import_graph.py -q
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

LEXI = Path(__file__).resolve().parents[1] / "lexi"
TORCH = ("torch", "triton")
# what lexi/structured may import of lexi (DESIGN.md: the tokenizer, the engine's request interface; held_back is a
# leaf any layer may use)
STRUCTURED_MAY_USE = ("lexi.structured", "lexi.gguf", "lexi.engine.request", "lexi.held_back")
HIGHER_THAN_ENGINE = ("lexi.chat", "lexi.structured", "lexi.http")


def module_name(path: Path) -> str:
    parts = path.relative_to(LEXI.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> Iterator[str]:
    name = module_name(path)
    return names_in(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")


def names_in(source: str, name: str, is_package: bool) -> Iterator[str]:
    """Every dotted name the import statements of module `name` name, relative imports resolved: for `from a import
    b`, both `a` and `a.b` (a module, where it is one)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


@cache
def graph() -> dict[str, frozenset[str]]:
    """lexi module -> the lexi modules it imports."""
    paths = {module_name(path): path for path in sorted(LEXI.rglob("*.py"))}
    return {
        name: frozenset(n for n in imported_names(path) if n in paths and n != name) for name, path in paths.items()
    }


@cache
def outside_imports() -> dict[str, frozenset[str]]:
    """lexi module -> the top-level names of what it imports from outside lexi (torch, numpy...)."""
    found = {}
    for path in sorted(LEXI.rglob("*.py")):
        names = {n.split(".")[0] for n in imported_names(path) if n and not n.startswith("lexi")}
        found[module_name(path)] = frozenset(names)
    return found


def cycles() -> list[list[str]]:
    """One circle (a path that comes back to its start) through each strongly connected set of modules (Tarjan)."""
    edges, index, low, stack, on_stack, found = graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while v not in group:
                group.add(stack.pop())
            on_stack.difference_update(group)
            if len(group) > 1:
                found.append(_circle_in(group, edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _circle_in(group: set[str], edges: dict[str, frozenset[str]]) -> list[str]:
    """A path from the group's first module back to it, through the group (breadth first: a shortest one)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        reached = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    reached.append(w)
        frontier = reached
    raise AssertionError(f"no circle through {sorted(group)}")


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_lexi_has_no_import_circle():
    found = cycles()
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_no_import_circle_touches_chat_or_structured():
    found = [c for c in cycles() if any(_in(m, ("lexi.chat", "lexi.structured")) for m in c)]
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_the_graph_sees_every_kind_of_import():
    """The parser itself: imports in functions and under TYPE_CHECKING, relative ones, `from package import module`."""
    source = (
        "from typing import TYPE_CHECKING\nimport lexi.a.b\nfrom . import sibling\nfrom ..up import thing\n"
        "if TYPE_CHECKING:\n    from lexi.c import D\n"
        "def f():\n    from .inner import g\n"
    )
    names = set(names_in(source, "lexi.pkg.mod", is_package=False))
    assert {"lexi.a.b", "lexi.pkg", "lexi.pkg.sibling", "lexi.up", "lexi.up.thing", "lexi.c", "lexi.pkg.inner"} <= names
    assert set(names_in("from . import x", "lexi.pkg", is_package=True)) == {"lexi.pkg", "lexi.pkg.x"}
    edges = graph()
    assert "lexi.engine.request" in edges["lexi.structured"]  # under `if TYPE_CHECKING:`
    assert "lexi.structured" in edges["lexi.http.state"]  # inside a function


def test_structured_imports_only_its_own_layer():
    """lexi/structured is below lexi/chat: it may use the tokenizer and the engine's request types, nothing else."""
    wrong = {
        name: sorted(n for n in targets if not _in(n, STRUCTURED_MAY_USE))
        for name, targets in graph().items()
        if _in(name, ("lexi.structured",))
    }
    assert not {k: v for k, v in wrong.items() if v}


def test_the_engine_and_below_import_nothing_of_chat_structured_or_http():
    lower = ("lexi.engine", "lexi.model", "lexi.kernels", "lexi.gguf")
    wrong = {
        name: sorted(n for n in targets if _in(n, HIGHER_THAN_ENGINE))
        for name, targets in graph().items()
        if _in(name, lower)
    }
    assert not {k: v for k, v in wrong.items() if v}


def test_chat_and_structured_reach_neither_torch_nor_triton():
    """STYLE rule 4, read off the source: no module of lexi/chat or lexi/structured imports torch or triton, nor does
    any lexi module they import, however indirectly."""
    edges, seen = graph(), set()
    todo = [n for n in edges if _in(n, ("lexi.chat", "lexi.structured"))]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges[name])
    wrong = {name: sorted(outside_imports()[name] & set(TORCH)) for name in sorted(seen)}
    assert seen and not {k: v for k, v in wrong.items() if v}


def test_importing_chat_and_structured_loads_neither_torch_nor_triton():
    """The same, as Python imports them: every module of both packages, in a fresh interpreter."""
    names = sorted(n for n in graph() if _in(n, ("lexi.chat", "lexi.structured")))
    code = (
        f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
        f"print([m for m in {TORCH!r} if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=LEXI.parent)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
