"""The CPU kernels' C files (lexi/kernels/cpu) depend on each other one way only, read from their text:

- the `#include "..."` graph of the .c and .h files has no cycle;
- each header's entry points (the functions it declares) are implemented by one .c file, so a header is that
  file's interface and nothing else's (records shared by two files get a header of their own: decode_records.h);
- the .c files' use graph has no cycle: A uses B when A names a function or object B defines (not static), and no
  two files use each other, directly or around a longer loop.
"""

from __future__ import annotations

import re
from pathlib import Path

CPU = Path(__file__).resolve().parents[1] / "lexi" / "kernels" / "cpu"
# The shared declarations every kernel file reads: each ISA's kernel table and the lookups that fill it come from
# that ISA's files (gemm_scalar.c, gemm_avx2.c, gemv_avx2.c, gemm_x8_*.c), and the thread pool from pool.c.
SHARED_HEADERS = {"lexi_cpu.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
PARAMS = r"\((?:[^;{}()]|\([^()]*\))*\)"  # a parameter list, one level of nested parentheses (function pointers)
DECLARATION = re.compile(rf"^(?!typedef\b|static\b|extern\b|#)[A-Za-z_][\w \t*]*?\b(\w+)\s*{PARAMS}\s*;", re.M)
DEFINITION = re.compile(rf"^([A-Za-z_][\w \t*]*?)\b(\w+)\s*(?:{PARAMS}\s*\{{|=)", re.M)


def without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def without_strings(text: str) -> str:
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def sources() -> dict[str, str]:
    files = {p.name: without_comments(p.read_text()) for p in sorted(CPU.glob("*.[ch]"))}
    assert "decode.c" in files and "decode.h" in files, sorted(files)
    return files


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def definitions(files: dict[str, str]) -> dict[str, str]:
    """Name -> the .c file that defines it (a function or an object at file scope, not static)."""
    out: dict[str, str] = {}
    for name, text in files.items():
        if not name.endswith(".c"):
            continue
        for m in DEFINITION.finditer(without_strings(text)):
            prefix = m.group(1).split()
            if "static" in prefix or prefix[0] in ("return", "else", "typedef"):
                continue
            assert m.group(2) not in out, f"{m.group(2)} is defined in {out.get(m.group(2))} and {name}"
            out[m.group(2)] = name
    return out


def test_the_include_graph_has_no_cycle():
    files = sources()
    graph = {name: set(INCLUDE.findall(text)) for name, text in files.items()}
    for name, included in graph.items():
        assert included <= files.keys(), f"{name} includes {sorted(included - files.keys())}, not in {CPU}"
    print({name: sorted(included) for name, included in graph.items()})
    assert cycle(graph) is None, f"include cycle: {' -> '.join(cycle(graph))}"


def test_each_header_entry_points_are_implemented_by_one_file():
    files = sources()
    defined = definitions(files)
    for name, text in files.items():
        if not name.endswith(".h"):
            continue
        declared = DECLARATION.findall(without_strings(text))
        missing = [f for f in declared if f not in defined]
        assert not missing, f"{name} declares {missing}, which no .c file defines"
        implementers = {defined[f] for f in declared}
        print(name, sorted(declared), "->", sorted(implementers))
        if name not in SHARED_HEADERS:
            assert len(implementers) <= 1, f"{name}'s entry points are implemented by {sorted(implementers)}"
    assert {"decode_layers", "decode_attention", "dot_f32"} <= defined.keys()


def test_no_two_files_use_each_other():
    files = sources()
    defined = definitions(files)
    uses: dict[str, set[str]] = {}
    for name, text in files.items():
        if name.endswith(".c"):
            words = set(re.findall(r"\b\w+\b", without_strings(text)))
            uses[name] = {defined[w] for w in words if w in defined and defined[w] != name}
    print({name: sorted(used) for name, used in uses.items()})
    assert "decode_attn.c" in uses["decode.c"], "decode.c calls decode_attention (the check reads calls)"
    assert cycle(uses) is None, f"files that use each other: {' -> '.join(cycle(uses))}"
