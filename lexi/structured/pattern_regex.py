"""A JSON Schema `pattern` as a regex over the JSON text of the string (what the model writes).

`pattern` constrains the decoded string, and it is a search (unanchored) whose meaning, for the
verifier (`jsonschema`), is Python's `re`. So the pattern is parsed with Python's own parser and
rewritten atom by atom: each character class becomes every way JSON writes its characters (raw,
or escaped when JSON requires or allows it), `\\d`/`\\w`/`\\s` keep Python's Unicode meaning, `$` also
accepts the newline before the end that Python lets it skip, and an unanchored side gets any text.
Constructs a DFA cannot express (lookaround, backreferences, word boundaries, case folding) make the
whole pattern untranslatable: the caller then widens to any string.
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

from lexi.structured.regex_cost import REPEAT_STATES, bounded_repeat
from lexi.structured.regex_text import (
    ALL,
    Charset,
    alt,
    class_regex,
    complement,
    json_char,
    normalize,
    python_category,
    seq,
    subtract,
)

_CATEGORIES = {
    sre.CATEGORY_DIGIT: ("digit", False),
    sre.CATEGORY_NOT_DIGIT: ("digit", True),
    sre.CATEGORY_WORD: ("word", False),
    sre.CATEGORY_NOT_WORD: ("word", True),
    sre.CATEGORY_SPACE: ("space", False),
    sre.CATEGORY_NOT_SPACE: ("space", True),
}


class Untranslatable(ValueError):
    """The pattern uses something a regular language cannot hold, or that does not parse."""


def pattern_body(pattern: str, any_char: str, quote_as_unicode: bool = False) -> str | None:
    """The regex of a JSON string's body (between the quotes) whose value `re.search(pattern)` accepts.

    Raises Untranslatable; returns None when no string can match.
    """
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise Untranslatable(f"pattern does not parse: {exc}") from None
    if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.LOCALE):
        raise Untranslatable("pattern flags are not supported")
    items = list(parsed)
    anchored_start = bool(items) and items[0] == (sre.AT, sre.AT_BEGINNING)
    anchored_end = bool(items) and items[-1] in ((sre.AT, sre.AT_END), (sre.AT, sre.AT_END_STRING))
    ends_absolutely = anchored_end and items[-1] == (sre.AT, sre.AT_END_STRING)
    if anchored_start:
        items = items[1:]
    if anchored_end:
        items = items[:-1]
    body = _sequence(items, quote_as_unicode)
    free = f"(?:{any_char})*"
    if body is None:
        return None
    prefix = "" if anchored_start else free
    if not anchored_end:
        suffix = free
    elif ends_absolutely:
        suffix = ""
    else:
        suffix = f"(?:{json_char([(0x0A, 0x0A)])})?"  # Python's $ also matches before a final newline
    return prefix + body + suffix


def _sequence(items, quote_as_unicode: bool) -> str | None:
    return seq(*(_node(op, arg, quote_as_unicode) for op, arg in items))


def _node(op, arg, q: bool) -> str | None:
    if op is sre.LITERAL:
        return json_char([(arg, arg)], q)
    if op is sre.NOT_LITERAL:
        return json_char(complement([(arg, arg)]), q)
    if op is sre.ANY:
        return json_char(complement([(0x0A, 0x0A)]), q)
    if op is sre.IN:
        return json_char(_charset(arg), q)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        low, high, sub = arg
        inner = _sequence(sub, q)
        high = None if high is sre.MAXREPEAT else high
        if inner is None:
            return "" if low == 0 else None
        return bounded_repeat(inner, low, high, REPEAT_STATES)  # a pattern is never counted: cutting would widen it
    if op is sre.SUBPATTERN:
        _group, add_flags, _del_flags, sub = arg
        if add_flags:
            raise Untranslatable("inline flags are not supported")
        inner = _sequence(sub, q)
        return None if inner is None else f"(?:{inner})"
    if op is sre.BRANCH:
        return alt(_sequence(branch, q) for branch in arg[1])
    raise Untranslatable(f"{op} is not supported in a pattern")


def _charset(items) -> Charset:
    ranges: Charset = []
    negate = False
    for op, arg in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            ranges.append((arg, arg))
        elif op is sre.RANGE:
            ranges.append(arg)
        elif op is sre.CATEGORY and arg in _CATEGORIES:
            name, inverted = _CATEGORIES[arg]
            members = list(python_category(name))
            ranges += complement(members) if inverted else members
        else:
            raise Untranslatable(f"{op} {arg} is not supported in a character class")
    return complement(ranges) if negate else normalize(ranges)


def any_json_char(quote_as_unicode: bool = False) -> str:
    """One character of any JSON string body: raw, a short escape, or any \\uXXXX escape (a quote only as
    \\u0022 with `quote_as_unicode`)."""
    raw = class_regex(subtract(ALL, [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))
    short = "" if quote_as_unicode else "\\u0022"
    escapes = f"\\u005C(?:[{short}\\u005C\\u002Fbfnrt]|u[0-9a-fA-F]{{4}})"
    return f"(?:{raw}|{escapes})"
