"""Per-request constraints over the real SmolLM2 vocabulary: random walks under the mask always end valid.

A walk samples uniformly among the tokens the mask allows, which is harsher than any model: if a
path to invalid output existed, walks would find it. Each plan is compiled for real (outlines-core).
"""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from lexi.chat.constraint_plan import plan_output
from lexi.chat.output import ChatOutput
from lexi.chat.reasoning import DELIMITERS, ReasoningSplitter
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.plan import FreeText

WEATHER = Tool(
    "get_weather",
    None,
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["c", "f"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit"],
    },
    strict=False,
)
NOTE = Tool("note", None, {"type": "object", "properties": {"text": {"type": "string", "maxLength": 6}}}, False)


def walk(compiler, plan, tokenizer, seed: int, steps: int = 400, prefer=None):
    """(token ids, finished by the constraint, ended with EOG); `prefer` biases toward some text when allowed."""
    constraint = asyncio.run(compiler.constraint(plan))
    vocab = compiler.vocab
    rnd = random.Random(seed)
    row = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    ids: list[int] = []
    for _ in range(steps):
        if constraint.is_finished():
            return ids, True, False
        allowed = allowed_ids(constraint, row, tokenizer.vocab_size)
        assert len(allowed), "the mask allows nothing"
        picks = np.intersect1d(allowed, prefer) if prefer is not None else []
        token = int(rnd.choice(list(picks)) if len(picks) and rnd.random() < 0.5 else rnd.choice(allowed))
        if token in vocab.eog_ids:
            return ids, False, True
        constraint.advance(token)
        ids.append(token)
    return ids, constraint.is_finished(), False


def allowed_ids(constraint, row: np.ndarray, vocab_size: int) -> np.ndarray:
    """The tokens the constraint allows next, through the engine's protocol (key, then the bits)."""
    if constraint.mask_key() is None:
        return np.arange(vocab_size)
    row.fill(0)
    constraint.fill_mask(row)
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size])


def closing_ids(tokenizer) -> np.ndarray:
    """Tokens that close strings, objects and elements, so walks finish within their step budget."""
    closers = b'"}]\n</parameter>\n</function>\n</tool_call>'
    return [
        i
        for i in range(tokenizer.vocab_size)
        if 0 < len(tokenizer.token_bytes(i)) and tokenizer.token_bytes(i) in closers
    ]


@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("function", "get_weather")])
@pytest.mark.parametrize("form", ["json", "function"])
def test_forced_calls_always_validate(compiler, smollm2_tokenizer, choice, form):
    tools = ToolSet((WEATHER, NOTE), choice, parallel=False)
    plan = plan_output(tools, form, None, None)
    finished_walks = 0
    for seed in range(8):
        ids, finished, _ = walk(compiler, plan, smollm2_tokenizer, seed, prefer=closing_ids(smollm2_tokenizer))
        if not finished:
            continue  # cut by the step budget, as max_tokens would: nothing to verify
        finished_walks += 1
        text = smollm2_tokenizer.decode(ids)
        output = ChatOutput(None, tools)
        events = output.feed(text, len(ids), "stop")  # raises ToolCallError for anything but a valid call
        assert [e.call.name for e in events if e.kind == "tool_call"] == [output.calls[0].name], text
        assert choice.mode != "function" or output.calls[0].name == "get_weather"
        assert not [e for e in events if e.kind == "content"], text
    assert finished_walks >= 4


def test_auto_lets_text_through_and_holds_calls_to_the_schema(compiler, smollm2_tokenizer, vocab):
    tools = ToolSet((WEATHER,), ToolChoice("auto"))
    plan = plan_output(tools, "json", None, None)
    opener = [smollm2_tokenizer.encode(t, special=False) for t in ("<tool_call>",)][0]
    constraint = asyncio.run(compiler.constraint(plan))
    row = np.zeros((smollm2_tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    for token in smollm2_tokenizer.encode("Let me look that up. ", special=False):
        assert constraint.mask_key() is None  # free text: nothing restricted
        constraint.advance(token)
    for token in opener:  # the opener written token by token switches to the call's schema
        constraint.advance(token)
    assert constraint.mask_key() is not None
    allowed = allowed_ids(constraint, row, smollm2_tokenizer.vocab_size)
    texts = {smollm2_tokenizer.token_bytes(int(t)) for t in allowed}
    assert b'{"' in texts or b"{" in texts
    assert all(t.lstrip(b"\n")[:1] in (b"{", b"") for t in texts), sorted(texts)[:20]


def test_none_never_writes_the_opener(compiler, smollm2_tokenizer):
    plan = plan_output(ToolSet((WEATHER,), ToolChoice("none")), "json", None, None)
    pieces = (b"<", b"<tool", b"_call", b"tool", b"_", b"call", b">")
    opener_prefix = np.array(
        [i for i in range(smollm2_tokenizer.vocab_size) if smollm2_tokenizer.token_bytes(i) in pieces]
    )
    for seed in range(4):
        ids, _, _ = walk(compiler, plan, smollm2_tokenizer, seed, steps=300, prefer=opener_prefix)
        assert len(ids) > 50
        assert "<tool_call>" not in smollm2_tokenizer.decode(ids)


def test_json_answer_after_a_thought_the_template_opened(compiler, smollm2_tokenizer):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok"]}
    fmt = ResponseFormat("json_schema", schema, "answer")
    plan = plan_output(None, "json", fmt, DELIMITERS[0])
    assert isinstance(plan.phases[0], FreeText) and not plan.phases[0].may_end
    closer = smollm2_tokenizer.encode("</think>", special=False)
    for seed in range(4):
        constraint = asyncio.run(compiler.constraint(plan))
        thought = smollm2_tokenizer.encode("some reasoning", special=False)
        for token in thought + closer:
            constraint.advance(token)
        prompt_ids = thought + closer
        ids, finished, _ = walk_from(constraint, compiler, smollm2_tokenizer, seed)
        if finished:
            text = smollm2_tokenizer.decode(prompt_ids + ids)
            output = ChatOutput(ReasoningSplitter(opened=DELIMITERS[0]), None, fmt)
            events = output.feed(text, 1, "stop")  # raises if the answer is not valid for the schema
            assert json.loads("".join(e.text for e in events if e.kind == "content"))["ok"] in (True, False)


def walk_from(constraint, compiler, tokenizer, seed, steps=300):
    rnd = random.Random(seed)
    row = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    ids = []
    for _ in range(steps):
        if constraint.is_finished():
            return ids, True, False
        assert constraint.mask_key() is not None
        allowed = allowed_ids(constraint, row, tokenizer.vocab_size)
        token = int(rnd.choice(allowed))
        if token in compiler.vocab.eog_ids:
            return ids, False, True
        constraint.advance(token)
        ids.append(token)
    return ids, False, False


def test_end_of_output_is_allowed_exactly_where_the_answer_may_end(compiler, smollm2_tokenizer, vocab):
    fmt = ResponseFormat("json_schema", {"type": "integer", "minimum": 10, "maximum": 99}, "n")
    constraint = asyncio.run(compiler.constraint(plan_output(None, "json", fmt, None)))
    row = np.zeros((smollm2_tokenizer.vocab_size + 31) // 32, dtype=np.int32)

    def eos_allowed():
        return vocab.eos_id in allowed_ids(constraint, row, smollm2_tokenizer.vocab_size)

    assert not eos_allowed()
    constraint.advance(smollm2_tokenizer.encode("4", special=False)[0])
    assert not eos_allowed()  # "4" is not in 10..99
    constraint.advance(smollm2_tokenizer.encode("2", special=False)[0])
    assert constraint.is_finished()  # "42": nothing but the end can follow


def test_a_container_past_the_depth_limit_frees_the_rest(compiler, smollm2_tokenizer, vocab):
    fmt = ResponseFormat("json_object")
    constraint = asyncio.run(compiler.constraint(plan_output(None, "json", fmt, None)))
    row = np.zeros((smollm2_tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    for piece in ['{"', "a", '":', "[", "{"]:  # an object in an array in an object: past the written levels
        for token in smollm2_tokenizer.encode(piece, special=False):
            assert token in allowed_ids(constraint, row, smollm2_tokenizer.vocab_size), piece
            constraint.advance(token)
    assert constraint.mask_key() is None and not constraint.is_finished()


def test_after_an_auto_call_the_output_is_free_again(compiler, smollm2_tokenizer):
    for parallel in (True, False):
        tools = ToolSet((WEATHER,), ToolChoice("auto"), parallel=parallel)
        constraint = asyncio.run(compiler.constraint(plan_output(tools, "json", None, None)))
        call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'
        for token in smollm2_tokenizer.encode(call, special=False):
            constraint.advance(token)
        assert not constraint.is_finished()  # a finished call does not end the request
        for token in smollm2_tokenizer.encode(" Done. ", special=False):
            constraint.advance(token)
        key = constraint.mask_key()
        if parallel:
            assert key is None  # free text: another call may open, or the output may end
        else:  # free text in which `<tool_call>` cannot be written again
            row = np.zeros((smollm2_tokenizer.vocab_size + 31) // 32, dtype=np.int32)
            for token in smollm2_tokenizer.encode("<tool_call", special=False):
                constraint.advance(token)
            assert smollm2_tokenizer.encode(">", special=False)[0] not in allowed_ids(
                constraint, row, smollm2_tokenizer.vocab_size
            )
