"""Regex building blocks over JSON text, written in the syntax both Python's `re` and Rust's `regex` read.

Constraint regexes are compiled by outlines-core (Rust) and checked in tests with Python's `re`, so
every character outside `[A-Za-z0-9]` is written as a `\\uXXXX` / `\\UXXXXXXXX` escape, groups are
non-capturing, and classes are explicit ranges (no negated classes, no `.`, no class set operators).
A "charset" is a sorted list of inclusive (low, high) code point ranges; surrogates are never in one,
since they cannot appear in UTF-8 text.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable

Charset = list[tuple[int, int]]
MAX_CODE = sys.maxunicode
SURROGATES = (0xD800, 0xDFFF)
ALL: Charset = [(0, SURROGATES[0] - 1), (SURROGATES[1] + 1, MAX_CODE)]
# JSON's short escapes, by the character they stand for
SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}


def lit(ch: str) -> str:
    """One character as a literal that both regex dialects read the same way."""
    code = ord(ch)
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def literal(text: str) -> str:
    return "".join(lit(ch) for ch in text)


def alt(parts: Iterable[str | None]) -> str | None:
    """Alternation of the satisfiable parts (None = matches nothing); None when none is left."""
    options = list(dict.fromkeys(p for p in parts if p is not None))
    if not options:
        return None
    return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"


def seq(*parts: str | None) -> str | None:
    """Concatenation; None (unsatisfiable) if any part is."""
    if any(p is None for p in parts):
        return None
    return "".join(parts)  # type: ignore[arg-type]


def repeat(part: str, low: int, high: int | None) -> str:
    """`part` repeated low..high times (high None = unbounded)."""
    if (low, high) == (0, None):
        return f"(?:{part})*"
    if (low, high) == (1, None):
        return f"(?:{part})+"
    if (low, high) == (0, 1):
        return f"(?:{part})?"
    if high is None:
        return f"(?:{part}){{{low},}}"
    if low == high:
        return part if low == 1 else f"(?:{part}){{{low}}}"
    return f"(?:{part}){{{low},{high}}}"


def normalize(ranges: Iterable[tuple[int, int]]) -> Charset:
    """Sorted, merged, without surrogates."""
    out: Charset = []
    for low, high in sorted(ranges):
        for lo, hi in _minus_surrogates(low, high):
            if out and lo <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
    return out


def _minus_surrogates(low: int, high: int) -> list[tuple[int, int]]:
    s0, s1 = SURROGATES
    parts = []
    if low < s0:
        parts.append((low, min(high, s0 - 1)))
    if high > s1:
        parts.append((max(low, s1 + 1), high))
    return [p for p in parts if p[0] <= p[1]]


def complement(charset: Charset) -> Charset:
    out: Charset = []
    start = 0
    for low, high in normalize(charset):
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= MAX_CODE:
        out.append((start, MAX_CODE))
    return normalize(out)


def subtract(a: Charset, b: Charset) -> Charset:
    return intersect(a, complement(b))


def intersect(a: Charset, b: Charset) -> Charset:
    out = []
    for lo1, hi1 in normalize(a):
        for lo2, hi2 in normalize(b):
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return normalize(out)


def contains(charset: Charset, code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in charset)


def class_regex(charset: Charset) -> str | None:
    ranges = normalize(charset)
    if not ranges:
        return None
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return lit(chr(ranges[0][0]))
    body = "".join(lit(chr(lo)) if lo == hi else f"{lit(chr(lo))}-{lit(chr(hi))}" for lo, hi in ranges)
    return f"[{body}]"


def json_char(charset: Charset, quote_as_unicode: bool = False) -> str | None:
    """One character of a JSON string whose value is in `charset`, in every way JSON may write it:
    raw (except `"`, `\\` and control characters, which JSON cannot hold raw), as a short escape, or as
    a `\\uXXXX` escape of a character below U+0080 that has no raw form. `quote_as_unicode` writes a
    quote only as `\\u0022` (see `schema_regex`: a raw quote byte would restart a string-rooted match)."""
    raw = subtract(charset, [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
    options = [class_regex(raw)]
    for code, short in SHORT_ESCAPES.items():
        if contains(charset, code):
            options.append(literal("\\u0022" if quote_as_unicode and code == 0x22 else "\\" + short))
    for low, high in intersect(charset, [(0x00, 0x1F)]):
        for code in range(low, high + 1):
            options.append(literal("\\u00") + _hex_digit(code >> 4) + _hex_digit(code & 15))
    return alt(options)


def _hex_digit(value: int) -> str:
    digit = format(value, "x")
    return digit if digit.isdigit() else f"[{digit}{digit.upper()}]"


@functools.cache
def python_category(name: str) -> tuple[tuple[int, int], ...]:
    """The code points Python's `re` puts in \\d, \\w or \\s for str patterns (computed once, on first use)."""
    test = {"digit": str.isdecimal, "word": lambda c: c.isalnum() or c == "_", "space": str.isspace}[name]
    ranges: Charset = []
    for code in range(MAX_CODE + 1):
        if SURROGATES[0] <= code <= SURROGATES[1] or not test(chr(code)):
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return tuple(ranges)
