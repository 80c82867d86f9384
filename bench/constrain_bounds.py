"""bench/constrain.py's bounds table: DFA states and cold compile p50 of one bounded value in an object, as the
server translates it for the model's vocabulary and written out (a fresh outlines-core `Index` each time)."""

from __future__ import annotations

import statistics
import time

from outlines_core import Index

from lexi.structured.regex_cost import dfa_states
from lexi.structured.schema_regex import SchemaRegex
from lexi.structured.vocabulary import ConstraintVocabulary

FLAG = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}


def one_value(schema: dict) -> dict:
    return {"type": "object", "properties": {"v": schema}, "required": ["v"]}


BOUNDS = {
    "string maxLength 40": one_value({"type": "string", "maxLength": 40}),
    "string maxLength 256": one_value({"type": "string", "maxLength": 256}),
    "string maxLength 16": one_value({"type": "string", "maxLength": 16}),
    "integers maxItems 20": one_value({"type": "array", "items": {"type": "integer"}, "maxItems": 20}),
    "strings maxItems 20": one_value({"type": "array", "items": {"type": "string"}, "maxItems": 20}),
    "objects maxItems 40": one_value({"type": "array", "items": FLAG, "maxItems": 40}),
    "integers maxItems 256": one_value({"type": "array", "items": {"type": "integer"}, "maxItems": 256}),
    "integer in [-37, 1234]": one_value({"type": "integer", "minimum": -37, "maximum": 1234}),
    "integer in (-5, 300)": one_value({"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 300}),
}
MAX_COMPILED = 200_000_000  # states x tokens (~10 s of compile) past which a regex is counted, not compiled


def bound_rows(name: str, vocab: ConstraintVocabulary, repeats: int = 3) -> list[str]:
    """| model | schema | regex | states | cold compile p50 ms | per state ms |, as translated (with the repeat budget
    the server gives this vocabulary: `ConstraintVocabulary.repeat_budget`) and written out."""
    rows = []
    for label, schema in BOUNDS.items():
        translated = SchemaRegex(schema, vocab.repeat_budget).regex()
        for mode, regex in (("as translated", translated), ("written out", SchemaRegex(schema, 10**9).regex())):
            if mode == "written out" and regex == translated:
                continue
            states = dfa_states(regex)
            if states * vocab.size > MAX_COMPILED:
                rows.append(f"| {name} | {label} | {mode} | {states} | not run | |")
            else:
                times = []
                for _ in range(repeats if states * vocab.size < MAX_COMPILED // 4 else 1):
                    start = time.perf_counter()
                    Index(regex, vocab.outlines)
                    times.append(time.perf_counter() - start)
                p50 = statistics.median(times)
                rows.append(f"| {name} | {label} | {mode} | {states} | {p50 * 1e3:.0f} | {p50 * 1e3 / states:.1f} |")
            print(rows[-1], flush=True)
    return rows
