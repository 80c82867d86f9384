"""Published chat templates (llama-cpp-python 0.3.36's copies, fetched by a fixture): gpt-oss's harmony template and
Qwen3-Coder's render history, tools, calls and results in our sandbox, and a forced call planned for each validates.

A forced call is checked by random walks under its real constraint (compiled by outlines-core over the real
vocabulary: SmolLM2's for Qwen3-Coder, the tiny-gpt-oss harmony vocabulary for gpt-oss), each walk's text read
back by the turn's own output pipeline. Walks pick uniformly among the allowed tokens: harsher than any model.
"""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from lexi.chat.prompt import Conversation, start_turn
from lexi.chat.response_format import ResponseFormat
from lexi.chat.template import ChatTemplate, ChatTemplateError, ThinkingUnsupported
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.compiler import ConstraintCompiler
from lexi.structured.vocabulary import ConstraintVocabulary

WEATHER = Tool(
    "get_weather",
    "Current weather in a city",
    {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
    strict=False,
)
NOTE = Tool("note", None, {"type": "object", "properties": {"text": {"type": "string", "maxLength": 6}}}, False)
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "Sunny and 21 C."},
    {"role": "user", "content": "And tomorrow?"},
]


def template(published_templates, name: str, **kwargs) -> ChatTemplate:
    path = published_templates / name
    return ChatTemplate(path.read_text(encoding="utf-8"), str(path), **kwargs)


@pytest.fixture(scope="module")
def gpt_oss(published_templates):
    return template(published_templates, "openai-gpt-oss-120b.jinja")


@pytest.fixture(scope="module")
def coder(published_templates):
    return template(published_templates, "Qwen3-Coder.jinja")


def test_gpt_oss_renders_history_tools_and_reasoning_effort(gpt_oss, harmony_tokenizer):
    tools = ToolSet((WEATHER, NOTE), ToolChoice("auto"))
    turn = start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY, tools, reasoning_effort="high"), True)
    text = turn.prompt.text
    assert gpt_oss.harmony and turn.prompt.harmony and gpt_oss.call_form == "harmony"
    assert "Reasoning: high" in text and "# Instructions\n\nBe brief." in text
    assert "namespace functions {" in text and "type get_weather = (_: {" in text and "type note = (_: {" in text
    assert "// Current weather in a city" in text and "// \ntype note" in text  # a tool without a description
    assert "city: string,\nunit: any," in text  # the template's own rendering of a typeless enum
    # the earlier call and its result, as the model wrote and read them; the answer after them
    call = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
    result = '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny, 21 C"<|end|>'
    answer = "<|start|>assistant<|channel|>final<|message|>Sunny and 21 C.<|end|>"
    assert call + result + answer in text
    assert text.endswith("<|start|>user<|message|>And tomorrow?<|end|><|start|>assistant")
    for token in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>"):
        assert harmony_tokenizer.token_to_id(token) in turn.prompt.ids, token  # one token each, not spelled out


def test_gpt_oss_reasoning_levels(gpt_oss, published_templates, harmony_tokenizer):
    def prompt(**kwargs) -> str:
        return start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY[1:2], **kwargs), True).prompt.text

    assert "Reasoning: medium" in prompt()  # the template's default
    assert "Reasoning: low" in prompt(template_kwargs={"reasoning_effort": "low"})
    assert "Reasoning: high" in prompt(reasoning_effort="xhigh")  # the nearest level gpt-oss knows
    assert "Reasoning: low" in prompt(reasoning_effort="minimal")
    for asked in ({"reasoning_effort": "none"}, {"template_kwargs": {"reasoning_effort": "none"}}):
        with pytest.raises(ThinkingUnsupported, match="always reasons"):
            prompt(**asked)
    server = template(published_templates, "openai-gpt-oss-120b.jinja", default_kwargs={"reasoning_effort": "xhigh"})
    assert "Reasoning: high" in start_turn(server, harmony_tokenizer, Conversation(HISTORY[1:2]), True).prompt.text
    with pytest.raises(ChatTemplateError, match="always reasons"):
        template(published_templates, "openai-gpt-oss-120b.jinja", default_kwargs={"reasoning_effort": "none"})


def test_gpt_oss_takes_content_parts_as_text(gpt_oss, harmony_tokenizer):
    parts = [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]
    assert not gpt_oss.takes_parts  # its `param_spec.type is not string` is no test of a message's content
    text = start_turn(gpt_oss, harmony_tokenizer, Conversation(parts), True).prompt.text
    assert "<|start|>user<|message|>one\ntwo<|end|>" in text


def test_a_forced_function_is_the_one_tool_gpt_oss_is_shown(gpt_oss, harmony_tokenizer):
    tools = ToolSet((WEATHER, NOTE), ToolChoice("function", "note"))
    text = start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY[1:2], tools), True).prompt.text
    assert "type note = " in text and "get_weather" not in text and "<tool_call>" not in text


def test_qwen3_coder_renders_calls_and_results(coder, smollm2_tokenizer):
    tools = ToolSet((WEATHER,), ToolChoice("auto"))
    text = start_turn(coder, smollm2_tokenizer, Conversation(HISTORY, tools), True).prompt.text
    assert "<function>\n<name>get_weather</name>" in text
    assert (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" in text
    )
    assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response>\n<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n")


def walk(constraint, tokenizer, vocab, rnd: random.Random, prefer: set[int], steps=600) -> tuple[list[int], bool]:
    """A uniform walk under the mask (half the time among `prefer` where allowed): (its tokens, whether it ended
    before `steps`, as the constraint or an end-of-generation token ended it)."""
    row = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
    ids: list[int] = []
    for _ in range(steps):
        if constraint.is_finished():
            return ids, True
        if constraint.mask_key() is None:
            allowed = list(range(tokenizer.vocab_size))
        else:
            row.fill(0)
            constraint.fill_mask(row)
            allowed = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: tokenizer.vocab_size])
        assert len(allowed), "the mask allows nothing"
        picks = [t for t in allowed if t in prefer]
        token = int(rnd.choice(picks) if picks and rnd.random() < 0.5 else rnd.choice(list(allowed)))
        if token in vocab.eog_ids:
            return ids, True
        constraint.advance(token)
        ids.append(token)
    return ids, False


@pytest.mark.parametrize("name", ["openai-gpt-oss-120b.jinja", "Qwen3-Coder.jinja"])
@pytest.mark.parametrize("choice", [ToolChoice("required"), ToolChoice("function", "get_weather")])
def test_a_forced_call_validates(published_templates, smollm2_tokenizer, harmony_tokenizer, name, choice):
    harmony = name.startswith("openai")
    tokenizer = harmony_tokenizer if harmony else smollm2_tokenizer
    tools = ToolSet((WEATHER, NOTE), choice, parallel=False)
    turn = start_turn(template(published_templates, name), tokenizer, Conversation(HISTORY, tools), True)
    vocab = ConstraintVocabulary(tokenizer)
    compiler = ConstraintCompiler(vocab)
    closers = {b'"', b"}", b"\n", b"<|end|>", b"</parameter>", b"c", b"f"}
    prefer = {i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) in closers}
    rnd, finished = random.Random(7), 0
    try:
        for _ in range(6):
            ids, ended = walk(asyncio.run(compiler.constraint(turn.plan)), tokenizer, vocab, rnd, prefer)
            if not ended:
                continue  # cut by the step budget, as max_tokens would: nothing to verify
            finished += 1
            text = tokenizer.decode(ids)
            output = turn.output()
            events = output.feed(text, len(ids), "stop")  # raises ToolCallError for anything but a valid call
            (call,) = [e.call for e in events if e.kind == "tool_call"]
            assert choice.mode != "function" or call.name == "get_weather"
            arguments = json.loads(call.arguments)
            assert call.name != "get_weather" or (len(arguments["city"]) <= 10 and arguments["unit"] in "cf")
            assert not [e for e in events if e.kind == "content"], text  # the thought went to reasoning alone
            if harmony:
                assert text.startswith("<|channel|>analysis<|message|>"), text
    finally:
        compiler.shutdown()
    assert finished >= 3


def test_a_harmony_json_answer_is_the_final_message(gpt_oss, harmony_tokenizer):
    """response_format json_object: a free thought, then the final message is the JSON; the thought never in it."""
    conversation = Conversation(HISTORY[1:2], response_format=ResponseFormat("json_object"))
    turn = start_turn(gpt_oss, harmony_tokenizer, conversation, True)
    vocab = ConstraintVocabulary(harmony_tokenizer)
    compiler = ConstraintCompiler(vocab)
    prefer = {i for i in range(harmony_tokenizer.vocab_size) if harmony_tokenizer.token_bytes(i) in (b"}", b"<|end|>")}
    rnd, finished = random.Random(3), 0
    try:
        for _ in range(4):
            ids, ended = walk(asyncio.run(compiler.constraint(turn.plan)), harmony_tokenizer, vocab, rnd, prefer)
            if not ended:
                continue
            finished += 1
            text = harmony_tokenizer.decode(ids)
            events = turn.output().feed(text, len(ids), "stop")  # raises AnswerFormatError unless the answer is JSON
            content = "".join(e.text for e in events if e.kind == "content")
            reasoning = "".join(e.text for e in events if e.kind == "reasoning")
            assert isinstance(json.loads(content), dict), text
            assert text == f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>final" \
                f"<|message|>{content}"  # fmt: skip
    finally:
        compiler.shutdown()
    assert finished >= 2


def test_harmony_auto_holds_an_addressed_call_and_none_never_addresses(gpt_oss, harmony_tokenizer):
    vocab = ConstraintVocabulary(harmony_tokenizer)
    compiler = ConstraintCompiler(vocab)
    auto, none = (ToolSet((WEATHER,), ToolChoice(mode)) for mode in ("auto", "none"))
    auto = start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY, auto), True)
    none = start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY, none), True)
    try:
        constraint = asyncio.run(compiler.constraint(auto.plan))
        for token in harmony_tokenizer.encode("<|channel|>analysis<|message|>ok<|end|><|start|>assistant"):
            assert constraint.mask_key() is None  # free: the model chooses between an answer and a call
            constraint.advance(token)
        for token in harmony_tokenizer.encode("<|channel|>commentary to=functions."):
            constraint.advance(token)
        ids, ended = walk(constraint, harmony_tokenizer, vocab, random.Random(1), {harmony_tokenizer.token_to_id("}")})
        assert ended
        header, _, body = harmony_tokenizer.decode(ids).partition("<|message|>")
        assert header.startswith("get_weather") and json.loads(body)["unit"] in "cf", (header, body)
        prefer = set(harmony_tokenizer.encode(" to=functions.", special=False))
        for seed in range(3):
            constraint = asyncio.run(compiler.constraint(none.plan))
            ids, _ = walk(constraint, harmony_tokenizer, vocab, random.Random(seed), prefer, steps=300)
            assert len(ids) > 20 and " to=functions." not in harmony_tokenizer.decode(ids)
    finally:
        compiler.shutdown()


def test_a_thought_budget_closes_the_analysis(gpt_oss, harmony_tokenizer):
    """Messages' thinking.budget_tokens on a harmony turn: the analysis opened by the model is closed (<|end|>
    forced) within the budget, its closer included."""
    turn = start_turn(gpt_oss, harmony_tokenizer, Conversation(HISTORY[1:2], thinking_budget=6), True)
    vocab = ConstraintVocabulary(harmony_tokenizer)
    compiler = ConstraintCompiler(vocab)
    end = harmony_tokenizer.token_to_id("<|end|>")
    try:
        for seed in range(3):
            constraint = asyncio.run(compiler.constraint(turn.plan))
            for token in harmony_tokenizer.encode("<|channel|>analysis<|message|>"):
                constraint.advance(token)
            ids, _ = walk(constraint, harmony_tokenizer, vocab, random.Random(seed), set(), steps=6)
            text = harmony_tokenizer.decode(ids)
            assert "<|end|>" in text and len(ids) <= 6, text
            assert end in ids or text.endswith("<|end|>")
    finally:
        compiler.shutdown()
