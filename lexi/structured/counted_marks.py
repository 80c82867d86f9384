"""String length bounds too long to write out in a DFA, marked in the regex so they can be counted beside it.

Writing `maxLength: 40` out as 40 copies of a JSON character costs ~520 DFA states, each a pass over
the vocabulary when the index is built (see `regex_cost`). A counted string is written with an
unbounded body instead, plus marks made of control characters where the text can never hold one, so
nothing a schema accepts is narrowed:
- a JSON string: at every character boundary of its body, BOUNDARY + min + max (raw control characters
  are not JSON text);
- a function-form raw text value: right after `<parameter=KEY>`, where only the newline may follow,
  ENTRY + min + max (the value itself may hold any character);
- after either string's closer (the quote, `\\n</parameter>`), EXIT, where only JSON punctuation or a
  newline may follow.
Item counts of an array too long to write out are marked the same way (`counted_arrays` counts them):
ARRAY + min + max right after its `[`, ITEM + min + max right after each of its commas, ARRAY_END after its `]`.
min and max are written as four digits each, the digits being the control characters U+0010..U+001F.
A model never writes a mark (the constraint masks them out); they only let `counted_strings` read, from
the DFA's own states, where a counted string begins, which bounds it has and where it ends.
"""

from __future__ import annotations

from lexi.structured.regex_text import lit

BOUNDARY, ENTRY, EXIT = 0x01, 0x02, 0x03
ARRAY, ITEM, ARRAY_END = 0x04, 0x05, 0x06
DIGIT_BASE = 0x10  # U+0010 + d is the digit d (0..15)
DIGITS = 4
UNBOUNDED = 0xFFFF  # the max of a string with no maxLength; larger bounds are not counted


def _number(value: int) -> str:
    return "".join(lit(chr(DIGIT_BASE + ((value >> (4 * k)) & 15))) for k in range(DIGITS - 1, -1, -1))


def bounds_mark(kind: int, low: int, high: int | None) -> str:
    return lit(chr(kind)) + _number(low) + _number(UNBOUNDED if high is None else high)


def countable(low: int, high: int | None) -> bool:
    """Bounds the marks can name (larger ones are widened: no output of a real budget reaches them)."""
    return low < UNBOUNDED and (high is None or high < UNBOUNDED)


def counted_json_body(char: str, low: int, high: int | None) -> str:
    """Any number of JSON string characters `char`, marked as bounded low..high at every boundary."""
    return f"(?:{char}|{bounds_mark(BOUNDARY, low, high)})*"


def entry_mark(low: int, high: int | None) -> str:
    """Before a function-form value's newline: the value that follows is bounded low..high."""
    return f"(?:{bounds_mark(ENTRY, low, high)})?"


def exit_mark() -> str:
    """What follows a counted string's closer: an optional EXIT (never written, only read)."""
    return f"(?:{lit(chr(EXIT))})?"


def counted_separator(comma: str, low: int, high: int | None) -> str:
    """`comma` (`ws , ws`) with ITEM + the array's bounds right after its `,`: a comma of a counted array. Where two
    anyOf branches' arrays share their `[`, the count opens with the loosest bounds of the two; a comma once the
    items tell the branches apart names the bounds of the one still possible."""
    separator = comma.replace("\\u002C", "\\u002C" + f"(?:{bounds_mark(ITEM, low, high)})?", 1)
    assert separator != comma, comma
    return separator


def counted_brackets(body: str, low: int, high: int | None, ws: str) -> str:
    """`[ body ]` marked as a counted array of low..high items (`body`'s commas at its level: `counted_separator`)."""
    opener = f"(?:{bounds_mark(ARRAY, low, high)})?"
    return "\\u005B" + opener + ws + body + ws + "\\u005D" + f"(?:{lit(chr(ARRAY_END))})?"


def counted_array(item: str, low: int, high: int | None, ws: str, comma: str) -> str:
    """An array of `item`s, low..high of them, marked for counting (`comma` is `ws , ws`: ITEM goes after its `,`)."""
    body = f"{item}(?:{counted_separator(comma, low, high)}{item})*"
    if low == 0:
        body = f"(?:{body})?"
    return counted_brackets(body, low, high, ws)
