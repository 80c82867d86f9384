"""A JSON Schema as a regex of the JSON text that satisfies it: what constrained decoding enforces.

The rule (the spec's Schemas section): what the regex cannot enforce is widened to the nearest thing
it can, never narrowed, so every value the schema accepts keeps a serialization the regex matches
(compact, keys in the order the schema lists them). Widened: `format`, `multipleOf`, `uniqueItems`,
`not`, `if`/`then`/`else`, property counts, untranslatable patterns, pattern repeats past their compile
budget (`regex_cost`; string lengths and item counts past it, a tuple's further items included, are counted
beside the DFA instead, `counted_marks`), integer bounds of more than 18 digits, and nesting past a depth
limit: there the regex holds a hole (a NUL character, which JSON text never contains raw), and the per-request
constraint lets the model open any container at a hole and leaves the rest of the output free (a regex
cannot count brackets, and writing every level out costs ~4x per level in the compiled index). The one
narrowing follows common practice: an object that lists `properties` and says nothing about others accepts
only the listed ones. The output is still verified
against the schema as written, so widening never lets an invalid value through to the client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lexi.structured.counted_marks import (
    UNBOUNDED,
    countable,
    counted_array,
    counted_brackets,
    counted_json_body,
    counted_separator,
    exit_mark,
)
from lexi.structured.number_regex import NUMBER, integer_regex, number_regex
from lexi.structured.pattern_regex import Untranslatable, any_json_char, pattern_body
from lexi.structured.regex_cost import REPEAT_STATES, bounded_repeat, writes_out
from lexi.structured.regex_text import alt, literal, repeat
from lexi.structured.schema_refs import resolve_ref

WS = "\\u0020?"  # one optional space after ',' and ':': compact JSON, and no room to pad forever
COMMA = WS + "\\u002C" + WS
COLON = WS + "\\u003A" + WS
QUOTE = "\\u0022"
NULL, BOOLEAN = "null", "(?:true|false)"
TYPES = ("object", "array", "string", "number", "boolean", "null")
MAX_DEPTH = 8  # nesting of a schema's own objects/arrays (and $ref expansions) written out exactly
ANY_DEPTH = 1  # levels of containers written out exactly inside a value the schema leaves open
HOLE = "\\u0000"  # where a container past the depth limit may open (see the module docstring)
OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties")


class SchemaRegex:
    """Translates one root schema (its $refs resolve against the root)."""

    def __init__(self, root: Mapping[str, Any] | bool, budget: int) -> None:
        self.root = root
        # DFA states a string's counted characters may add before they are counted beside it: the vocabulary's repeat
        # budget (ConstraintVocabulary.repeat_budget; regex_cost.REPEAT_STATES up to SmolLM2's 49,152 tokens)
        self.budget = budget
        # Array items keep the full budget: counted arrays (of counted strings above all) cost more a token to mask
        # (Gemma, `json_schema person`'s 4 languages counted: mask p99 3.4 -> 20 ms) than a cut budget saves.
        self.items_budget = max(budget, REPEAT_STATES)
        self._shared_brackets = 0  # inside anyOf branches of which two may be arrays: every array marked (array_regex)
        # A raw quote byte inside a string-rooted answer would restart the match in the unanchored DFA that
        # outlines-core also builds, and counted string characters then cost exponential compile time
        # (Gemma: 1.5 s for a 10-character bound, 286 s for 20). Such answers write a quote as \u0022: the
        # same values, no restarts.
        self.quote_as_unicode = not _never_a_string(root, root)
        self.char = any_json_char(self.quote_as_unicode)
        self.string = QUOTE + f"(?:{self.char})*" + QUOTE

    def regex(self) -> str | None:
        """The whole value's regex; None when the schema accepts nothing."""
        return self.value(self.root, 0)

    def value(self, schema: Any, depth: int) -> str | None:
        if schema is True or schema == {}:
            return self.any_value(ANY_DEPTH)
        if schema is False:
            return None
        if not isinstance(schema, Mapping):
            return self.any_value(ANY_DEPTH)
        if isinstance(schema.get("$ref"), str):
            if depth >= MAX_DEPTH:
                return self.any_value(0)
            target = resolve_ref(self.root, schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = _merge([target, rest]) if rest and isinstance(target, Mapping) else target
            return self.value(schema, depth + 1)
        if isinstance(schema.get("allOf"), list):
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.value(_merge([rest, *schema["allOf"]]), depth)
        branches = schema.get("anyOf") or schema.get("oneOf")  # oneOf widened to anyOf
        if isinstance(branches, list):
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            branches = [_merge([rest, b]) if rest else b for b in branches]
            shared = sum(_may_be_array(b, self.root) for b in branches) > 1
            self._shared_brackets += shared
            try:
                return alt(self.value(b, depth) for b in branches)
            finally:
                self._shared_brackets -= shared
        if "const" in schema:
            return value_literal(schema["const"], self._shared_brackets > 0)
        if isinstance(schema.get("enum"), list):
            return alt(value_literal(v, self._shared_brackets > 0) for v in schema["enum"])
        kinds = schema.get("type", list(TYPES))
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if "integer" in kinds and "number" in kinds:
            kinds.remove("integer")
        return alt(self.typed(schema, kind, depth) for kind in kinds)

    def typed(self, schema: Mapping[str, Any], kind: str, depth: int) -> str | None:
        if kind == "null":
            return NULL
        if kind == "boolean":
            return BOOLEAN
        if kind == "integer":
            return integer_regex(schema)
        if kind == "number":
            return number_regex(schema)
        if kind == "string":
            return self.string_regex(schema)
        if depth >= MAX_DEPTH:
            return HOLE
        if kind == "array":
            return self.array_regex(schema, depth + 1)
        if kind == "object":
            return self.object_regex(schema, depth + 1)
        return None

    def string_regex(self, schema: Mapping[str, Any]) -> str | None:
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                body = pattern_body(pattern, self.char, self.quote_as_unicode)
            except Untranslatable:
                body = f"(?:{self.char})*"  # widened: any string
            return QUOTE + body + QUOTE if body is not None else None
        low = _count(schema.get("minLength"), 0)
        high = _count(schema.get("maxLength"), None)
        if high is not None and low > high:
            return None
        if writes_out(self.char, low, high, self.budget) or not countable(low, high):
            return QUOTE + bounded_repeat(self.char, low, high, self.budget) + QUOTE
        # past the DFA budget: counted beside the automaton (counted_marks, counted_strings)
        return QUOTE + counted_json_body(self.char, low, high) + QUOTE + exit_mark()

    def array_regex(self, schema: Mapping[str, Any], depth: int) -> str | None:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # drafts before 2020-12: items as a tuple, then additionalItems
            prefix, items = items, schema.get("additionalItems", True)
        item = self.value(items, depth)
        if isinstance(prefix, list) and prefix:
            elements = [self.value(element, depth) for element in prefix]
            return tuple_regex(elements, item, schema, self.items_budget, marked=self._shared_brackets > 0)
        low = _count(schema.get("minItems"), 0)
        high = _count(schema.get("maxItems"), None)
        if high is not None and low > high:
            return None
        if item is None or high == 0:
            if low > 0:
                return None
            return counted_brackets("", 0, 0, WS) if self._shared_brackets else "\\u005B" + WS + "\\u005D"
        # counted copies of the item cost its states each, as string characters do; past the budget, the items are
        # counted beside the automaton (counted_marks, counted_arrays)
        more_low, more_high = max(low - 1, 0), None if high is None else high - 1
        # Where another anyOf branch's array shares the `[`, the DFA merges them: every array there is marked, even
        # a short one, so a count opened at the shared `[` always closes (bounds past what marks name: widened)
        if self._shared_brackets:
            return counted_array(item, *_nameable(low, high), WS, COMMA)
        budget = self.items_budget
        if countable(low, high) and not writes_out(COMMA + item, more_low, more_high, budget, 16):
            return counted_array(item, low, high, WS, COMMA)
        more = bounded_repeat(COMMA + item, more_low, more_high, budget, 16)
        body = item + more
        if low == 0:
            body = f"(?:{body})?"
        return "\\u005B" + WS + body + WS + "\\u005D"

    def object_regex(self, schema: Mapping[str, Any], depth: int) -> str | None:
        listed = schema.get("properties")
        properties = dict(listed) if isinstance(listed, Mapping) else {}
        required = [k for k in schema.get("required") or [] if isinstance(k, str)]
        extra = schema.get("additionalProperties")
        if extra is None:
            # the one narrowing: listed properties and nothing said about others -> only the listed ones
            extra = False if properties and "patternProperties" not in schema else True
        for key in required:
            properties.setdefault(key, True)  # required but not described: any value
        if "patternProperties" in schema and extra is False:
            extra = True  # names matching a pattern are allowed: widened to any name
        extra_value = self.value(extra, depth) if extra is not False else None
        extra_pair = None if extra_value is None else self.string + COLON + extra_value
        pairs = []
        for key, sub in properties.items():
            value = self.value(sub, depth)
            if value is None:
                if key in required:
                    return None
                continue
            pairs.append((literal(_dump(key)) + COLON + value, key in required))
        return "\\u007B" + WS + _members(pairs, extra_pair) + WS + "\\u007D"

    def any_value(self, levels: int) -> str:
        """Any JSON value: `levels` levels of containers written out, then a hole (see the module docstring)."""
        scalars = [self.string, NUMBER, BOOLEAN, NULL]
        if levels <= 0:
            return alt([*scalars, HOLE])
        inner = self.any_value(levels - 1)
        if self._shared_brackets:  # marked, as every array where anyOf branches' arrays share a `[`
            array = counted_brackets(
                f"(?:{inner}{repeat(counted_separator(COMMA, 0, None) + inner, 0, None)})?", 0, None, WS
            )
        else:
            array = "\\u005B" + WS + f"(?:{inner}{repeat(COMMA + inner, 0, None)})?" + WS + "\\u005D"
        pair = self.string + COLON + inner
        obj = "\\u007B" + WS + f"(?:{pair}{repeat(COMMA + pair, 0, None)})?" + WS + "\\u007D"
        return alt([*scalars, array, obj])


def tuple_regex(
    elements: list[str | None],
    rest: str | None,
    schema: Mapping[str, Any],
    budget: int,
    marked: bool = False,
) -> str | None:
    """A tuple (draft-07 `items` as an array, or `prefixItems`): element i is `elements[i]`, any after them
    `rest` (None: none may follow); minItems and maxItems counted, so the leading minItems are required.

    Built from the end: `after` is what may follow once i elements are written (each behind a comma). Items after
    the elements are written out within the repeat budget; past it they are counted beside the automaton, the
    whole tuple as one counted array (every comma at its level marked, so its bounds hold for all its items).
    `marked` (another anyOf branch's array shares the `[`): marked as counted whatever its size.
    """
    low, high = _count(schema.get("minItems"), 0), _count(schema.get("maxItems"), None)
    if high is not None and low > high:
        return None
    count = len(elements)
    more_low, more_high = max(low - count, 0), None if high is None else max(high - count, 0)
    counting = (
        rest is not None
        and more_high != 0
        and (marked or countable(low, high) and not writes_out(COMMA + rest, more_low, more_high, budget, 16))
    )
    if marked or counting:
        low, high = _nameable(low, high)
    comma = counted_separator(COMMA, low, high) if marked or counting else COMMA
    if counting:
        after = f"(?:{comma}{rest})*"  # the count holds minItems and maxItems
    elif rest is None or more_high == 0:
        after = "" if more_low == 0 else None
    else:  # counted like other items: written out within the repeat budget, widened past it
        after = bounded_repeat(COMMA + rest, more_low, more_high, budget, 16)
    for i in range(count - 1, -1, -1):
        if high is not None and i >= high:  # no room for element i: the array ends before it
            after = ""
            continue
        written = None if elements[i] is None or after is None else (comma if i else "") + elements[i] + after
        if i < low:
            after = written  # required (None: it cannot be written, so nothing satisfies the tuple)
        else:
            after = "" if written is None else f"(?:{written})?"
    if after is None:
        return None
    return counted_brackets(after, low, high, WS) if marked or counting else "\\u005B" + WS + after + WS + "\\u005D"


def _never_a_string(schema: Any, root: Any, depth: int = 0) -> bool:
    """The schema only takes objects or arrays (through $refs and branches), so its text never starts with a quote."""
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return False
    if isinstance(schema.get("$ref"), str):
        try:
            return _never_a_string(resolve_ref(root, schema["$ref"]), root, depth + 1)
        except ValueError:
            return False
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        return all(_never_a_string(b, root, depth + 1) for b in branches)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return isinstance(values, list) and all(isinstance(v, dict | list) for v in values)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind
    return isinstance(kinds, list) and bool(kinds) and set(kinds) <= {"object", "array"}


def _may_be_array(schema: Any, root: Any, depth: int = 0) -> bool:
    """Whether the schema may take an array (True unless its type, enum or const rules one out)."""
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return schema is not False
    if isinstance(schema.get("$ref"), str):
        try:
            return _may_be_array(resolve_ref(root, schema["$ref"]), root, depth + 1)
        except ValueError:
            return True
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list):
        return any(_may_be_array(b, root, depth + 1) for b in branches)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return not isinstance(values, list) or any(isinstance(v, list) for v in values)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind
    return not isinstance(kinds, list) or "array" in kinds


def _members(pairs: list[tuple[str, bool]], extra: str | None) -> str:
    """Object members in listed order, optional ones skippable, with commas only between members.

    after: members i.. when one was already written (each preceded by a comma); first: when none was.
    """
    extras_after = "" if extra is None else repeat(COMMA + extra, 0, None)
    extras_first = "" if extra is None else f"(?:{extra}{extras_after})?"
    after, first = extras_after, extras_first
    for pair, needed in reversed(pairs):
        if needed:
            after, first = COMMA + pair + after, pair + after
        else:
            after, first = f"(?:{COMMA}{pair})?" + after, alt([pair + after, first]) or ""
    return first


def value_literal(value: Any, marked: bool = False) -> str:
    """One JSON value exactly, with the same optional spaces as everywhere else in the output; `marked`: its arrays
    carry counted-array marks (where anyOf branches' arrays share a `[`, see SchemaRegex.array_regex)."""
    if isinstance(value, dict):
        pairs = COMMA.join(literal(_dump(k)) + COLON + value_literal(v, marked) for k, v in value.items())
        return "\\u007B" + WS + pairs + WS + "\\u007D"
    if isinstance(value, list):
        if marked:
            comma = counted_separator(COMMA, len(value), len(value))
            return counted_brackets(comma.join(value_literal(v, True) for v in value), len(value), len(value), WS)
        return "\\u005B" + WS + COMMA.join(value_literal(v) for v in value) + WS + "\\u005D"
    return literal(_dump(value))


def _nameable(low: int, high: int | None) -> tuple[int, int | None]:
    """Item bounds the marks can name: past them, widened (no output of a real budget reaches them)."""
    return min(low, UNBOUNDED - 1), None if high is None or high >= UNBOUNDED else high


def _merge(schemas: list[Any]) -> Any:
    """allOf as one schema: object properties and required lists combined, other keywords first-wins.

    A value valid for every branch is valid for the merge (first-wins only drops constraints), so
    this widens and never narrows; a `false` branch makes the whole unsatisfiable.
    """
    merged: dict[str, Any] = {}
    for schema in schemas:
        if schema is False:
            return False
        if not isinstance(schema, Mapping):
            continue
        for key, value in schema.items():
            if key == "properties" and isinstance(value, Mapping):
                merged.setdefault("properties", {})
                for name, sub in value.items():
                    merged["properties"].setdefault(name, sub)
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


def _count(value: Any, default: int | None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return default
    return int(value)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
