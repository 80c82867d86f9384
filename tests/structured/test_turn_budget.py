"""Constraints that close within max_tokens, over the real SmolLM2 vocabulary and real compiled indexes.

Walks sample uniformly among the allowed tokens (harsher than any model: a uniform walk inside an open
string almost never closes it on its own), for exactly as many steps as the budget; a walk that fits
the budget must end with the constraint finished and the output valid.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import deque

import numpy as np
import pytest
from test_turn import allowed_ids

from lexi.chat.constraint_plan import plan_output
from lexi.chat.output import ChatOutput
from lexi.chat.reasoning import DELIMITERS, ReasoningSplitter
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.closing_table import ClosingTable, fewest_tokens
from lexi.structured.regex_cost import REPEAT_STATES
from lexi.structured.schema_regex import SchemaRegex

TWO_STRINGS = Tool(
    "send",
    None,
    {
        "type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "body"],
    },
    strict=False,
)
LOOKUP = Tool("lookup", None, {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}, False)


def budget_walk(constraint, vocab, size: int, budget: int, seed: int, start: list[int] = ()):
    """Uniform random tokens under the mask for at most `budget` steps: (ids, how it ended)."""
    rnd = random.Random(seed)
    row = np.zeros((size + 31) // 32, dtype=np.int32)
    ids = list(start)
    for token in start:
        constraint.advance(token)
    for _ in range(budget - len(start)):
        if constraint.is_finished():
            return ids, "finished"
        allowed = allowed_ids(constraint, row, size)
        assert len(allowed), "the mask allows nothing"
        token = int(rnd.choice(allowed))
        constraint.advance(token)
        if token in vocab.eog_ids:
            return ids, "end"
        ids.append(token)
    return ids, "finished" if constraint.is_finished() else "length"


@pytest.mark.parametrize("form", ["json", "function"])
@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("function", "send")])
def test_forced_calls_with_open_strings_close_within_the_budget(compiler, smollm2_tokenizer, vocab, form, choice):
    tools = ToolSet((TWO_STRINGS, LOOKUP), choice, parallel=False)
    plan = plan_output(tools, form, None, None)
    for seed in range(12):
        constraint = asyncio.run(compiler.constraint(plan, 60))
        assert constraint.closing_distance() <= 60
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 60, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        output = ChatOutput(None, tools)
        events = output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")  # raises for an invalid call
        assert len(output.calls) == 1 and not [e for e in events if e.kind == "content"]
        assert choice.mode != "function" or output.calls[0].name == "send"


def test_parallel_required_calls_end_cleanly_within_the_budget(compiler, smollm2_tokenizer, vocab):
    tools = ToolSet((TWO_STRINGS, LOOKUP), ToolChoice("required"), parallel=True)
    plan = plan_output(tools, "json", None, None)
    for seed in range(8):
        constraint = asyncio.run(compiler.constraint(plan, 90))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 90, seed)
        assert ended == "end", smollm2_tokenizer.decode(ids)  # after its calls the output ends itself
        output = ChatOutput(None, tools)
        output.feed(smollm2_tokenizer.decode(ids), len(ids), "stop")
        assert output.calls


def test_json_object_answers_close_within_48_tokens(compiler, smollm2_tokenizer, vocab):
    plan = plan_output(None, "json", ResponseFormat("json_object", None, None), None)
    for seed in range(12):
        constraint = asyncio.run(compiler.constraint(plan, 48))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 48, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        assert isinstance(json.loads(smollm2_tokenizer.decode(ids)), dict)


def test_a_thought_is_closed_in_time_for_the_answer(compiler, smollm2_tokenizer, vocab):
    schema = {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]}
    fmt = ResponseFormat("json_schema", schema, "answer")
    plan = plan_output(None, "json", fmt, DELIMITERS[0])
    for seed in range(6):
        constraint = asyncio.run(compiler.constraint(plan, 30))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, 30, seed)
        assert ended == "finished", smollm2_tokenizer.decode(ids)
        events = ChatOutput(ReasoningSplitter(opened=DELIMITERS[0]), None, fmt).feed(
            smollm2_tokenizer.decode(ids), len(ids), "stop"
        )  # raises if the answer is not the schema's
        assert "why" in json.loads("".join(e.text for e in events if e.kind == "content"))


def test_a_budget_below_the_shortest_call_gives_no_call_and_no_text(compiler, smollm2_tokenizer, vocab):
    tools = ToolSet((TWO_STRINGS,), ToolChoice("required"), parallel=False)
    plan = plan_output(tools, "json", None, None)
    shortest = asyncio.run(compiler.constraint(plan, 1000)).closing_distance()
    assert shortest > 5
    for budget in (1, shortest - 1):
        constraint = asyncio.run(compiler.constraint(plan, budget))
        ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, budget, 0)
        assert ended == "length" and len(ids) == budget
        output = ChatOutput(None, tools)
        events = output.feed(smollm2_tokenizer.decode(ids), len(ids), "length")  # no 422: nothing could fit
        assert events == [] and output.calls == []
    constraint = asyncio.run(compiler.constraint(plan, shortest))  # exactly enough: the call closes
    ids, ended = budget_walk(constraint, vocab, smollm2_tokenizer.vocab_size, shortest, 1)
    assert ended == "finished" and len(ids) == shortest


def test_auto_does_not_open_a_call_it_cannot_finish(compiler, smollm2_tokenizer, vocab):
    tools = ToolSet((TWO_STRINGS,), ToolChoice("auto"))
    plan = plan_output(tools, "json", None, None)
    opener = smollm2_tokenizer.encode("<tool_call>", special=False)
    prefix = smollm2_tokenizer.encode("Sure. ", special=False)
    roomy = asyncio.run(compiler.constraint(plan, 200))
    for token in prefix + opener:
        roomy.advance(token)
    assert roomy.mask_key()[0] == "guided"  # room enough: the opener starts the call
    tight = asyncio.run(compiler.constraint(plan, len(prefix) + len(opener) + 3))
    for token in prefix + opener[:-1]:
        tight.advance(token)
    row = np.zeros((smollm2_tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    assert opener[-1] not in allowed_ids(tight, row, smollm2_tokenizer.vocab_size)


def test_closing_distances_equal_a_breadth_first_search_over_every_token(compiler, smollm2_tokenizer, vocab):
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "bbbbbbbb"]}, "n": {"type": "boolean"}}}
    index = compiler.index_now(SchemaRegex(schema, REPEAT_STATES).regex()).index
    table = ClosingTable(index, vocab.eos_id)
    transitions = index.get_transitions()
    final = set(index.get_final_states())
    reverse: dict[int, set[int]] = {}
    for state, edges in transitions.items():
        for token, target in edges.items():
            if token != vocab.eos_id:
                reverse.setdefault(target, set()).add(state)
    distance = {s: (0 if set(transitions.get(s, {})) <= {vocab.eos_id} else 1) for s in final}
    queue = deque(sorted(distance, key=distance.get))
    while queue:  # unit edges from sources at 0 and 1: a BFS that seeds the 1s after the 0s is exact
        state = queue.popleft()
        for source in reverse.get(state, ()):
            if source not in distance or distance[source] > distance[state] + 1:
                distance[source] = distance[state] + 1
                queue.append(source)
    assert {s: table.distance(s) for s in transitions} == distance
    start = index.get_initial_state()
    assert table.worst(start) >= table.distance(start)
    assert set(table.allowed_within(start, table.distance(start) - 1)) <= set(transitions[start])


def test_fewest_tokens_spell_the_marker(smollm2_tokenizer, vocab):
    assert (
        1
        <= fewest_tokens(b"<tool_call>", vocab.ids_of_bytes)
        <= len(smollm2_tokenizer.encode("<tool_call>", special=False))
    )
    assert fewest_tokens(b"", vocab.ids_of_bytes) == 0
