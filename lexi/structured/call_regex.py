"""Regexes of tool calls in the form a template teaches, for constrained decoding.

JSON form: `<tool_call>\\n{"name": "NAME", "arguments": ARGS}\\n</tool_call>`, ARGS the tool's schema.
Function form: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n...</function>\\n</tool_call>`,
a VALUE being raw text when the schema says the parameter is a string (any text without `</parameter>`,
or one of its enum values) and JSON text of its schema otherwise. Parameters come in the order the
schema lists them, required ones always, optional ones when the model chooses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from lexi.structured.counted_marks import countable, entry_mark, exit_mark
from lexi.structured.regex_text import alt, literal, repeat
from lexi.structured.schema_refs import says_string
from lexi.structured.schema_regex import COLON, COMMA, WS, SchemaRegex

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NEWLINE = "\\u000A?"
NON_ASCII = "[\\u0080-\\uD7FF\\uE000-\\U0010FFFF]"  # one character outside ASCII (not a surrogate)


class Tool(Protocol):
    """What a call's regex reads of a declared tool (lexi.chat.tools.Tool is one)."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Any: ...  # the JSON Schema of its arguments


def call_after_opener(tools: Sequence[Tool], form: str, budget: int) -> str | None:
    """What follows `<tool_call>` in a block calling any of `tools`, through `</tool_call>` (None: no tool fits);
    `budget`: as `SchemaRegex`'s."""
    body = alt((function_call(t, budget) if form == "function" else json_call(t, budget)) for t in tools)
    return None if body is None else NEWLINE + body + NEWLINE + literal(CLOSE)


def json_call(tool: Tool, budget: int) -> str | None:
    arguments = SchemaRegex(tool.parameters, budget).regex()
    if arguments is None:
        return None
    name = literal(json.dumps(tool.name))
    return (
        "\\u007B" + WS + literal('"name"') + COLON + name + COMMA + literal('"arguments"') + COLON + arguments
        + WS + "\\u007D"
    )  # fmt: skip


def function_call(tool: Tool, budget: int) -> str | None:
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    translator = SchemaRegex(schema, budget)
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = set(schema.get("required") or [])
    params = []
    for key, sub in properties.items():
        value, counted = _text_value(sub) if says_string(schema, key) else (translator.value(sub, 1), None)
        if value is None:
            if key in required:
                return None
            continue
        if counted is None:
            param = literal(f"<parameter={key}>\n") + value + literal("\n</parameter>\n")
        else:  # its length counted beside the DFA (counted_marks)
            opener = literal(f"<parameter={key}>") + entry_mark(*counted) + literal("\n")
            param = opener + value + literal("\n</parameter>") + exit_mark() + literal("\n")
        params.append(param if key in required else f"(?:{param})?")
    if schema.get("additionalProperties", not properties) is not False:
        any_key = "[\\u0020-\\u003D\\u003F-\\uD7FF\\uE000-\\U0010FFFF]+"  # a name without '>' or a newline
        params.append(repeat(literal("<parameter=") + any_key + literal(">\n") + avoid("</parameter>")
                             + literal("\n</parameter>\n"), 0, None))  # fmt: skip
    return literal(f"<function={tool.name}>\n") + "".join(params) + literal("</function>")


def _text_value(schema) -> tuple[str, tuple[int, int | None] | None]:
    """A string parameter written as raw text, and whether its length is counted beside the DFA: its enum values
    when it lists them, a length bound when it is too short to hold the closing tag (written out), a longer
    bound counted beside the DFA (`counted_marks`: written out, the DFA that avoids the tag would take ~19
    states a character, past the repeat budget of `regex_cost` from 12 on), else any text without `</parameter>`
    (other keywords widened)."""
    if isinstance(schema, dict):
        choices = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
            return alt(literal(c) for c in choices), None
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if isinstance(high, int) and isinstance(low, int) and 0 <= low <= high < len("</parameter>"):
            return repeat("[\\u0000-\\uD7FF\\uE000-\\U0010FFFF]", low, high), None
        low = low if isinstance(low, int) and not isinstance(low, bool) and low >= 0 else 0
        high = high if isinstance(high, int) and not isinstance(high, bool) and high >= low else None
        if (low or high is not None) and countable(low, high):
            return avoid("</parameter>"), (low, high)
    return avoid("</parameter>"), None


def avoid(word: str) -> str:
    """Any text that does not contain `word` (ASCII, its first character occurring in it only once).

    A non-ASCII character, which cannot be part of the word, is one branch that every prefix state of the word
    reaches: outlines-core does not minimise its DFA, so a non-ASCII character read in each prefix state's own
    branch got its own UTF-8 continuation states (`</parameter>`: 102 states, each a pass over the vocabulary at
    compile time); here they share one set."""
    first, rest = word[0], word[1:]
    assert first not in rest, "the construction needs a word whose first character does not recur"
    assert word.isascii(), "the construction needs an ASCII word"

    def other(*chars: str) -> str:  # an ASCII character other than `chars`
        cut = sorted({ord(c) for c in chars})
        ranges, start = [], 0
        for code in cut:
            if code > start:
                ranges.append((start, code - 1))
            start = code + 1
        ranges.append((start, 0x7F))
        pieces = [literal(chr(lo)) if lo == hi else f"{literal(chr(lo))}-{literal(chr(hi))}" for lo, hi in ranges]
        return "[" + "".join(pieces) + "]"

    # After the first character (state 1), a path back to state 0 reads a prefix of `rest` and then a
    # character that neither continues it nor restarts the word; a restart (the first character again)
    # returns to state 1.
    back = alt(literal(rest[:i]) + other(first, rest[i]) for i in range(len(rest)))
    restart = alt(literal(rest[:i]) + literal(first) for i in range(len(rest)))
    loop_at_one = f"(?:{restart})*"
    partial = alt(literal(rest[:i]) for i in range(len(rest)))  # stop inside a proper prefix of the word
    opened = f"{literal(first)}{loop_at_one}"
    return f"(?:{other(first)}|(?:{opened}{partial})?{NON_ASCII}|{opened}{back})*(?:{opened}{partial})?"
