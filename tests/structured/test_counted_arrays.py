"""Item counts counted beside the DFA (minItems / maxItems past what the regex writes out), over the real SmolLM2
vocabulary and real compiled indexes: JSON answers, nested arrays, and forced calls in both call forms.

Two walks: `budget_walk` samples uniformly among the allowed tokens (an array then ends soon after its minimum,
which is the bound it runs into); `more_walk` takes a token that writes a comma whenever the mask allows one, so
only the maximum can stop it.
"""

from __future__ import annotations

import asyncio
import json
import random

import jsonschema
import numpy as np
import pytest
from test_turn import allowed_ids
from test_turn_budget import budget_walk

from lexi.chat.constraint_plan import plan_output
from lexi.chat.output import ChatOutput
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.closing_table import fewest_tokens
from lexi.structured.counted_marks import ARRAY, ARRAY_END, ITEM
from lexi.structured.counted_strings import has_counted
from lexi.structured.regex_cost import REPEAT_STATES, dfa_states
from lexi.structured.schema_regex import SchemaRegex

DIGIT = {"type": "integer", "minimum": 0, "maximum": 9}
FLAG = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}


def holder(items: dict, low: int, high: int | None) -> dict:
    array = {"type": "array", "items": items, "minItems": low} | ({} if high is None else {"maxItems": high})
    return {"type": "object", "properties": {"xs": array}, "required": ["xs"]}


def comma_tokens(vocab, allowed) -> list[int]:
    """The allowed tokens that write a comma and close no array."""
    return [int(t) for t in allowed if b"," in vocab.token_bytes[int(t)] and b"]" not in vocab.token_bytes[int(t)]]


def more_walk(constraint, vocab, size: int, budget: int, seed: int) -> tuple[list[int], str]:
    """Like budget_walk, but a token writing a comma (and closing no array) is taken whenever one is allowed: every
    array grows until its maximum refuses the comma."""
    rnd = random.Random(seed)
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    ids = []
    for _ in range(budget):
        if constraint.is_finished():
            return ids, "finished"
        allowed = allowed_ids(constraint, row, size)
        assert len(allowed), "the mask allows nothing"
        token = rnd.choice(commas) if (commas := comma_tokens(vocab, allowed)) else int(rnd.choice(allowed))
        constraint.advance(token)
        if token in vocab.eog_ids:
            return ids, "end"
        ids.append(token)
    return ids, "finished" if constraint.is_finished() else "length"


def test_item_counts_past_the_budget_are_counted_not_widened():
    for schema in (holder(FLAG, 0, 40), holder(DIGIT, 60, 256), holder(FLAG, 30, None)):
        regex = SchemaRegex(schema, REPEAT_STATES).regex()
        assert has_counted(regex) and all(f"\\u{mark:04X}" in regex for mark in (ARRAY, ITEM, ARRAY_END))
    # one copy of the item, whatever the bounds: a fraction of the 40 copies it would take written out
    assert dfa_states(SchemaRegex(holder(FLAG, 1, 40), REPEAT_STATES).regex()) == dfa_states(
        SchemaRegex(holder(FLAG, 7, 4000), REPEAT_STATES).regex()
    )
    assert dfa_states(SchemaRegex(holder(FLAG, 0, 40), REPEAT_STATES).regex()) * 5 < dfa_states(
        SchemaRegex(holder(FLAG, 0, 40), 10**6).regex()
    )
    assert not has_counted(SchemaRegex(holder(FLAG, 0, 8), REPEAT_STATES).regex())  # written out
    # a tuple's further items, in both spellings: counted past the budget, written out within it
    for tuple_ in (
        {"type": "array", "prefixItems": [DIGIT], "items": FLAG, "minItems": 20, "maxItems": 40},
        {"type": "array", "items": [DIGIT], "additionalItems": FLAG, "maxItems": 40},
    ):
        assert has_counted(SchemaRegex(tuple_, REPEAT_STATES).regex())
        assert not has_counted(SchemaRegex(tuple_ | {"minItems": 0, "maxItems": 3}, REPEAT_STATES).regex())
    assert not has_counted(SchemaRegex(holder(FLAG, 0, None), REPEAT_STATES).regex())  # nothing to count


ANSWERS = [
    (holder(DIGIT, 60, 256), "xs"),
    (holder(FLAG, 30, 30), "xs"),
    (holder(FLAG, 17, 40), "xs"),
    (holder({"enum": ["a", "bc", 7]}, 0, 30), "xs"),
    (  # a tuple's further items: the whole tuple counted, its two elements first
        {
            "type": "object",
            "properties": {
                "xs": {
                    "type": "array",
                    "prefixItems": [DIGIT, {"enum": ["a", "b"]}],
                    "items": FLAG,
                    "minItems": 20,
                    "maxItems": 24,
                }
            },
            "required": ["xs"],
        },
        "xs",
    ),
    (
        {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 17, "maxItems": 20},
            "minItems": 2,
            "maxItems": 3,
        },
        None,
    ),  # fmt: skip
]


@pytest.mark.parametrize("walk", [budget_walk, more_walk], ids=["uniform", "more"])
@pytest.mark.parametrize(
    ("schema", "key"),
    ANSWERS,
    ids=["digits-60-256", "flags-30", "flags-17-40", "enums-0-30", "tuple-20-24", "nested"],
)
def test_a_json_answer_keeps_counted_item_bounds(compiler, smollm2_tokenizer, vocab, walk, schema, key):
    plan = plan_output(None, "json", ResponseFormat("json_schema", schema, "answer"), None)
    inner = schema["properties"][key] if key else schema["items"]
    counts = []
    for seed in range(4):
        constraint = asyncio.run(compiler.constraint(plan))
        ids, ended = walk(constraint, vocab, smollm2_tokenizer.vocab_size, 2500, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)[-200:]
        value = json.loads(smollm2_tokenizer.decode(ids))  # a written mark (a control character) would not parse
        jsonschema.validate(value, schema)
        counts += [len(value[key])] if key else [len(x) for x in value]
    low, high = inner["minItems"], inner["maxItems"]
    if walk is more_walk:
        assert set(counts) == {high}, counts  # only the maximum stops it
    else:
        assert low <= min(counts) <= low + 3, counts  # a uniform walk ends arrays early: the minimum holds them


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_forced_call_keeps_counted_item_bounds(compiler, smollm2_tokenizer, vocab, form):
    schema = holder(DIGIT, 20, 24)
    tools = ToolSet((Tool("pick", None, schema, strict=False),), ToolChoice("required"), parallel=False)
    plan = plan_output(tools, form, None, None)
    for walk in (budget_walk, more_walk):
        counts = []
        for seed in range(3):
            constraint = asyncio.run(compiler.constraint(plan))
            ids, ended = walk(constraint, vocab, smollm2_tokenizer.vocab_size, 600, seed)
            assert ended == "finished", smollm2_tokenizer.decode(ids)
            output = ChatOutput(None, tools)
            output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")  # raises for a call outside the schema
            (call,) = output.calls
            counts.append(len(json.loads(call.arguments)["xs"]))
        assert set(counts) == {24} if walk is more_walk else 20 <= min(counts) <= 23, (form, counts)


def test_a_mask_key_names_one_set_across_item_counts(compiler, smollm2_tokenizer, vocab):
    """The engine keeps one mask per key: a key seen again must name the same tokens, at any item count."""
    schema = holder(FLAG, 20, 30)
    plan = plan_output(None, "json", ResponseFormat("json_schema", schema, "answer"), None)
    size = smollm2_tokenizer.vocab_size
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    masks, shared = {}, 0
    for seed in range(4):
        rnd = random.Random(seed)
        constraint = asyncio.run(compiler.constraint(plan))
        for _ in range(600):
            if constraint.is_finished():
                break
            key = constraint.mask_key()
            allowed = allowed_ids(constraint, row, size)
            if key in masks:
                assert np.array_equal(masks[key], allowed), key
                shared += key[0] == "counted" and key[4] == ("items-within",)
            masks[key] = allowed
            commas = comma_tokens(vocab, allowed)
            token = rnd.choice(commas) if commas and seed % 2 else int(rnd.choice(allowed))
            constraint.advance(token)
    assert shared > 10


def test_items_still_needed_count_in_the_closing_distance(compiler, smollm2_tokenizer, vocab):
    """An array short of its minimum is not yet closable: the distance counts the items it still needs, from the start
    (the array still to come) and from inside it, from the compiled index's own transitions."""
    schema = holder(FLAG, 20, 40)
    plan = plan_output(None, "json", ResponseFormat("json_schema", schema, "answer"), None)
    constraint = asyncio.run(compiler.constraint(plan, 400))
    before = constraint.closing_distance()
    per_item = constraint._walk.compiled.items.per_item
    assert 2 <= per_item <= 6  # `,{"a":true}` in a few tokens, never in one
    shortest = fewest_tokens(b',{"a":true}', vocab.ids_of_bytes)  # one more item, written alone
    assert before >= 20 * (shortest - 1)  # the array is not open yet: its twenty items count already
    first = smollm2_tokenizer.encode('{"xs": [{"a": true}')
    for token in first:
        constraint.advance(token)
    assert 19 * (shortest - 1) <= constraint.closing_distance() < before
    assert constraint.closing_distance() >= before - len(first)  # a token brings the end at most one nearer
    for token in smollm2_tokenizer.encode(', {"a": false}' * 19):
        constraint.advance(token)
    assert constraint.closing_distance() <= 2  # `]}`: the minimum is met


def test_arrays_of_anyof_branches_that_share_their_bracket_are_counted():
    """Two anyOf branches that may both be arrays share their `[` in the DFA: every array there is marked (short ones
    too, and any value's, and literal ones), so a count opened at the shared `[` always closes."""
    ints = {"type": "array", "items": FLAG, "minItems": 20, "maxItems": 40}
    for other in (
        {"type": "array", "items": {"type": "string"}},
        {},  # {} may be an array too
        {"const": [1, 2]},
        {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
        {"type": "array", "maxItems": 0},
    ):
        regex = SchemaRegex({"anyOf": [ints, other]}, REPEAT_STATES).regex()
        assert regex.count(f"\\u{ARRAY:04X}") == regex.count(f"\\u{ARRAY_END:04X}") >= 2, other  # every `[` marked
    assert has_counted(SchemaRegex({"anyOf": [ints, {"type": "null"}, {"type": "string"}]}, REPEAT_STATES).regex())
    assert has_counted(SchemaRegex({"type": ["array", "null"], "items": FLAG, "maxItems": 40}, REPEAT_STATES).regex())


TWO_ARRAYS = {
    "type": "object",
    "properties": {
        "xs": {
            "anyOf": [
                {"type": "array", "items": FLAG, "minItems": 20, "maxItems": 24},
                {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 2, "maxItems": 3},
                {"type": "null"},
            ]
        }
    },
    "required": ["xs"],
}


@pytest.mark.parametrize("walk", [budget_walk, more_walk], ids=["uniform", "more"])
def test_arrays_of_two_branches_keep_their_own_bounds(compiler, smollm2_tokenizer, vocab, walk):
    """The count opens with the loosest bounds of the two branches (2..24) and takes the branch's own at its first
    comma, where the items have told them apart: flags 20..24, letters 2..3."""
    plan = plan_output(None, "json", ResponseFormat("json_schema", TWO_ARRAYS, "answer"), None)
    counts = {"flags": [], "letters": []}
    for seed in range(8):
        constraint = asyncio.run(compiler.constraint(plan))
        start = smollm2_tokenizer.encode('{"xs": [{' if seed % 2 else '{"xs": ["')  # each branch, half the walks
        for token in start:
            constraint.advance(token)
        ids, ended = walk(constraint, vocab, smollm2_tokenizer.vocab_size, 800, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)[-200:]
        value = json.loads(smollm2_tokenizer.decode(start + ids))
        jsonschema.validate(value, TWO_ARRAYS)
        counts["flags" if seed % 2 else "letters"].append(len(value["xs"]))
    if walk is more_walk:  # only the maximum stops it
        assert set(counts["flags"]) == {24} and set(counts["letters"]) == {3}, counts
    else:  # a uniform walk ends arrays early: the minimum holds them
        assert min(counts["flags"]) <= 23 and min(counts["letters"]) == 2, counts


COLOURS = {"enum": ["red", "green", "blue"]}


def shortest_walk(constraint, size: int) -> list[int]:
    """Tokens that close the output in the fewest steps: each step takes an allowed token whose next state is nearest
    the end (the distance the constraint itself reports)."""
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    ids = []
    while not constraint.is_finished():
        best = None
        for token in allowed_ids(constraint, row, size):
            saved = constraint.snapshot()
            constraint.advance(int(token))
            after = constraint.closing_distance()
            constraint.restore(saved)
            best = min(best or (after, int(token)), (after, int(token)))
        constraint.advance(best[1])
        ids.append(best[1])
    return ids


@pytest.mark.parametrize("items", [COLOURS, {"type": "boolean"}, {"type": "string"}, {"type": "integer"}], ids=str)
def test_thirty_items_close_in_a_budget_that_fits_the_shortest_output(compiler, smollm2_tokenizer, vocab, items):
    """minItems 30 of short items with max_tokens = the shortest closing output: every uniform walk (harsher than any
    model at temperature 1) writes thirty items or more and closes, because near the end only tokens on a shortest
    closing path are allowed. The distance at the start is an output's length, not an estimate: a walk reaches it."""
    schema = holder(items, 30, None)
    assert has_counted(SchemaRegex(schema, REPEAT_STATES).regex())  # counted, not written out
    plan = plan_output(None, "json", ResponseFormat("json_schema", schema, "answer"), None)
    size = smollm2_tokenizer.vocab_size
    budget = asyncio.run(compiler.constraint(plan)).closing_distance()
    shortest = shortest_walk(asyncio.run(compiler.constraint(plan, budget)), size)
    assert len(shortest) == budget
    jsonschema.validate(json.loads(smollm2_tokenizer.decode(shortest)), schema)
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        ids, ended = budget_walk(constraint, vocab, size, budget, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        value = json.loads(smollm2_tokenizer.decode(ids))
        jsonschema.validate(value, schema)
        assert len(value["xs"]) >= 30 and len(ids) <= budget


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_forced_call_with_thirty_items_closes_in_the_shortest_budget(compiler, smollm2_tokenizer, vocab, form):
    schema = holder(COLOURS, 30, 40)
    tools = ToolSet((Tool("tag", None, schema, strict=False),), ToolChoice("function", "tag"), parallel=True)
    plan = plan_output(tools, form, None, None)
    budget = asyncio.run(compiler.constraint(plan)).closing_distance()
    assert budget >= 30 * 2  # every colour after the first takes its comma and at least one token
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, budget, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        output = ChatOutput(None, tools)
        output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")  # raises for a call outside the schema
        (call,) = output.calls
        assert call.name == "tag" and 30 <= len(json.loads(call.arguments)["xs"]) <= 40


INTS_OR_FLAGS = {  # the branches share their `[`; an integer or a boolean as the first item tells them apart
    "type": "object",
    "properties": {"a": {"anyOf": [holder({"type": "integer"}, 6, None)["properties"]["xs"],
                                   holder({"type": "boolean"}, 2, None)["properties"]["xs"]]}},
    "required": ["a"],
}  # fmt: skip


@pytest.mark.parametrize("extra", [0, 1, 2, 4])
def test_a_first_item_telling_branches_apart_takes_its_branch_need_at_once(compiler, smollm2_tokenizer, vocab, extra):
    """At a `[` that two anyOf branches share, the count opens with the loosest minimum (2 booleans); an integer as the
    first item picks the branch of 6. Its need counts from that token, not from the first comma: with a budget a
    few tokens past the shortest output, walks that start on integers they cannot finish are steered away in time.
    (The same shape with strings for the short branch, over the server before the fix: `{"a": [1, 2, 3,` ran out
    at max_tokens 14 and 16 for 7 seeds of 8; tests/http/test_budget_close.py holds that one.)"""
    plan = plan_output(None, "json", ResponseFormat("json_schema", INTS_OR_FLAGS, "answer"), None)
    size = smollm2_tokenizer.vocab_size
    budget = asyncio.run(compiler.constraint(plan)).closing_distance() + extra
    for seed in range(8):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        ids, ended = budget_walk(constraint, vocab, size, budget, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        jsonschema.validate(json.loads(smollm2_tokenizer.decode(ids)), INTS_OR_FLAGS)
    start = smollm2_tokenizer.encode('{"a": [')
    constraint = asyncio.run(compiler.constraint(plan))
    for token in start:
        constraint.advance(token)
    before = constraint.closing_distance()
    constraint.advance(smollm2_tokenizer.encode("1")[0])
    assert constraint.closing_distance() >= 2 * 5 + 1  # five more `,N` and the `]}`: the branch of six integers
    assert before <= 2 * 1 + 2 + 1  # `true,true]}`-ish: the booleans are the shorter way from the shared `[`
