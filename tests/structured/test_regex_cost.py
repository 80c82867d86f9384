"""The cost model of constraint regexes: states counted over a byte vocabulary are the states outlines-core
builds its index with on the bundled models' real vocabularies (their byte tokens reach every state)."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from outlines_core import Index
from test_schema_regex import schema_regex
from test_turn_budget import budget_walk

from lexi.chat.constraint_plan import plan_output
from lexi.chat.response_format import ResponseFormat
from lexi.structured.compiler import CompilerConfig, ConstraintCompiler
from lexi.structured.counted_strings import has_counted
from lexi.structured.plan_regex import written
from lexi.structured.regex_cost import REPEAT_STATES, bounded_repeat, copy_states, dfa_states, repeat_budget
from lexi.structured.regex_text import repeat
from lexi.structured.schema_regex import SchemaRegex
from lexi.structured.vocabulary import ConstraintVocabulary


def one_value(schema: dict) -> dict:
    return {"type": "object", "properties": {"v": schema}, "required": ["v"]}


REGEXES = {
    "string": schema_regex(one_value({"type": "string"})),
    "string_16": schema_regex(one_value({"type": "string", "maxLength": 16})),
    "range": schema_regex(one_value({"type": "integer", "minimum": -37, "maximum": 1234})),
    "numbers_20": schema_regex(one_value({"type": "array", "items": {"type": "integer"}, "maxItems": 20})),
}


def index_states(regex: str, vocab: ConstraintVocabulary) -> int:
    index = Index(regex, vocab.outlines)
    return len(set(index.get_transitions()) | set(index.get_final_states()))


@pytest.mark.parametrize("name", REGEXES)
def test_states_counted_over_bytes_are_the_index_states_on_smollm2(name, smollm2_tokenizer):
    assert dfa_states(REGEXES[name]) == index_states(REGEXES[name], ConstraintVocabulary(smollm2_tokenizer))


def test_states_counted_over_bytes_are_the_index_states_on_gemma(gemma3_tokenizer):
    vocab = ConstraintVocabulary(gemma3_tokenizer)
    for name in ("string", "range"):  # the cheap ones: each state is a pass over 262k tokens
        assert dfa_states(REGEXES[name]) == index_states(REGEXES[name], vocab), name


def test_copies_cost_what_copy_states_says():
    char = "(?:[a-z]|\\u005C[nt])"
    for count in (2, 5, 9):
        assert dfa_states(repeat(char, count, count)) == dfa_states(char) + (count - 1) * copy_states(char)


def test_bounded_repeat_widens_past_the_budget_only():
    char = "(?:[a-z]|\\u005C[nt])"  # a copy: the character, and the state after a backslash
    assert copy_states(char) == 2
    fits = REPEAT_STATES // 2
    assert bounded_repeat(char, 0, fits, REPEAT_STATES) == repeat(char, 0, fits)
    assert bounded_repeat(char, 0, fits + 1, REPEAT_STATES) == repeat(char, 0, None)
    assert bounded_repeat(char, fits + 5, None, REPEAT_STATES) == repeat(char, fits, None)  # at least as many as fit
    assert bounded_repeat(char, 0, 40, budget=10, always=40) == repeat(char, 0, 40)


@pytest.mark.parametrize("word", ["</parameter>", "</tool_call>", "<x>"])
def test_text_that_avoids_a_word_is_exact_and_shares_its_non_ascii_states(word, smollm2_tokenizer):
    """The function form's raw values: any text without the closing tag, and nothing else (checked with Python's
    own regex engine on random text full of the word's characters, non-ASCII ones and the word itself); a non-ASCII
    character's UTF-8 states are shared by the word's prefixes, not repeated for each (102 states before, at
    `</parameter>`: each a pass over the vocabulary when a call's index compiles)."""
    import random
    import re

    from lexi.structured.call_regex import NON_ASCII, avoid

    regex = avoid(word)
    pattern = re.compile(regex)
    alphabet = [*set(word), "a", "\n", "\x00", "\x7f", "\x80", "é", "中", "\U0001f600"]
    rnd = random.Random(7)
    for _ in range(20000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 24)))
        if rnd.random() < 0.4:
            at = rnd.randint(0, len(text))
            text = text[:at] + word[: rnd.randint(1, len(word))] + text[at:]
        assert (pattern.fullmatch(text) is not None) == (word not in text), (word, text)
    assert dfa_states(regex) <= len(word) + dfa_states(f"(?:{NON_ASCII})*") + 8
    assert dfa_states(regex) == index_states(regex, ConstraintVocabulary(smollm2_tokenizer))


def test_the_repeat_budget_is_cut_for_large_vocabularies_only():
    """A cold compile walks every token from every state: the written-out budget holds at SmolLM2's 49,152 tokens
    and shrinks in proportion past it (a floor of 32 states)."""
    assert repeat_budget(32_000) == repeat_budget(49_152) == REPEAT_STATES
    assert repeat_budget(128_256) == 85 and repeat_budget(262_144) == 42
    assert repeat_budget(10**7) == 32


def test_at_a_cut_budget_short_strings_are_counted_not_written_out_nor_widened():
    """At Gemma's budget, a 16-character string (written out at SmolLM2's: 221 states, a pass over 262k tokens
    each) is counted beside the automaton: 34 states, the bound still exact. What fits is still written out;
    patterns (never counted) and array items (cheaper to mask written out) keep the full budget."""
    gemma = repeat_budget(262_144)
    schema = one_value({"type": "string", "maxLength": 16})
    written, counted = SchemaRegex(schema, REPEAT_STATES).regex(), SchemaRegex(schema, gemma).regex()
    assert not has_counted(written) and has_counted(counted)
    assert (dfa_states(written), dfa_states(counted)) == (221, 34)
    short = one_value({"type": "string", "maxLength": 3})  # 3 x 13 states fit 42: written out either way
    numbers = one_value({"type": "array", "items": {"type": "integer"}, "maxItems": 20})  # 192 states, written out
    pattern = one_value({"type": "string", "pattern": "^[a-z]{2,40}$"})
    for same in (short, numbers, pattern):
        regex = SchemaRegex(same, REPEAT_STATES).regex()
        assert SchemaRegex(same, gemma).regex() == regex and not has_counted(regex), same
    assert dfa_states(SchemaRegex(numbers, REPEAT_STATES).regex()) == 192


BOUNDED = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "minLength": 4, "maxLength": 9},
        "ns": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 5},
    },
    "required": ["code", "ns"],
}


def test_short_bounds_counted_at_gemmas_budget_hold_over_its_vocabulary(gemma3_tokenizer):
    """Over Gemma 3's real vocabulary and compiled index, with the budget the server gives it (the code counted
    beside the automaton there, written out at SmolLM2's): uniform walks (any allowed token) write codes of 4..9
    characters and 2..5 numbers, and close within a budget of tokens."""
    vocab = ConstraintVocabulary(gemma3_tokenizer)
    compiler = ConstraintCompiler(vocab, CompilerConfig(timeout=600))
    try:
        assert vocab.repeat_budget == repeat_budget(vocab.size) < REPEAT_STATES  # the vocabulary owns its budget
        plan = plan_output(None, "json", ResponseFormat("json_schema", BOUNDED, "x"), None)
        assert has_counted(written(plan, vocab.repeat_budget).phases[-1].pattern)
        for seed in range(4):
            constraint = asyncio.run(compiler.constraint(plan, 60))
            ids, ended = budget_walk(constraint, vocab, gemma3_tokenizer.vocab_size, 60, seed)
            assert ended == "finished", gemma3_tokenizer.decode(ids)
            value = json.loads(gemma3_tokenizer.decode(ids))
            jsonschema.validate(value, BOUNDED)
    finally:
        compiler.shutdown()
