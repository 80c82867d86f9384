"""Forced calls and JSON answers close within max_tokens, over the real server and the openai client.

At temperature 1 over several seeds, with budgets that fit a call but not a rambling one: every forced call
comes back valid (no 422), every json_object answer parses, a budget no call fits is OpenAI's 200 "length"
with no call and empty content, and a named tool_choice yields exactly one call. An array of minItems 30 closes
in a max_tokens of exactly its shortest output, as an answer and as a forced call.
"""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from test_constrained import function, per_seed

from lexi.chat.constraint_plan import plan_output
from lexi.chat.response_format import ResponseFormat
from lexi.chat.tools import Tool, ToolChoice, ToolSet
from lexi.structured.compiler import CompilerConfig, ConstraintCompiler
from lexi.structured.vocabulary import ConstraintVocabulary

MESSAGE = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to", "body"],
}
LOOKUP = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
ASK = [{"role": "user", "content": "Write a long, warm letter to my grandmother about the garden, then send it."}]
SEEDS = range(8)


@pytest.fixture(scope="module")
def tools_client(tools_server, client_for):
    client = client_for(tools_server)
    return client, client.models.list().data[0].id


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "send_message"}}], ids=["required", "named"]
)
def test_forced_calls_with_open_strings_fit_60_tokens(tools_client, choice):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=ASK,
            tools=[function("send_message", MESSAGE), function("lookup", LOOKUP)],
            tool_choice=choice,
            temperature=1.0,
            seed=seed,
            max_tokens=60,
        ),
        SEEDS,
    )
    for reply in replies:
        calls = reply.choices[0].message.tool_calls
        assert calls, reply
        for call in calls:
            jsonschema.validate(
                json.loads(call.function.arguments), {"send_message": MESSAGE, "lookup": LOOKUP}[call.function.name]
            )
        assert reply.usage.completion_tokens <= 60
        if isinstance(choice, dict):
            assert [c.function.name for c in calls] == ["send_message"]
            assert reply.choices[0].finish_reason == "tool_calls"


def test_a_named_choice_is_exactly_one_call_even_with_parallel_calls_on(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Look up the weather in Paris, Rome and Oslo."}],
            tools=[function("lookup", LOOKUP)],
            tool_choice={"type": "function", "function": {"name": "lookup"}},
            parallel_tool_calls=True,
            temperature=1.0,
            seed=seed,
            max_tokens=120,
        ),
        range(4),
    )
    for reply in replies:
        assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["lookup"]
        assert reply.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_no_call_fits_one_token_so_the_answer_is_length_without_a_call(tools_client, stream):
    client, model = tools_client
    fields = dict(
        model=model, messages=ASK, tools=[function("send_message", MESSAGE)], tool_choice="required", max_tokens=1
    )
    if not stream:
        reply = client.chat.completions.create(**fields)
        choice = reply.choices[0]
        assert choice.finish_reason == "length"
        assert not choice.message.tool_calls
        assert choice.message.content == ""
        return
    chunks = list(client.chat.completions.create(**fields, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content is None  # a forced call's first delta: no text
    assert not any(d.tool_calls for d in deltas)
    assert not "".join(d.content or "" for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_json_object_answers_in_48_tokens_always_parse(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Describe your favourite city in detail, as JSON."}],
            response_format={"type": "json_object"},
            temperature=1.0,
            seed=seed,
            max_tokens=48,
        ),
        range(9),
    )
    for reply in replies:
        assert reply.choices[0].finish_reason == "stop", reply
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
        assert reply.usage.completion_tokens <= 48


def test_responses_forced_call_fits_its_max_output_tokens(tools_client):
    client, model = tools_client
    tool = {"type": "function", "name": "send_message", "parameters": MESSAGE}
    for seed in range(3):
        reply = client.responses.create(
            model=model,
            input=ASK[0]["content"],
            tools=[tool],
            tool_choice="required",
            temperature=1.0,
            max_output_tokens=60,
            extra_body={"seed": seed},
        )
        calls = [item for item in reply.output if item.type == "function_call"]
        assert calls and reply.status == "completed", reply
        jsonschema.validate(json.loads(calls[0].arguments), MESSAGE)


TAGS = {  # minItems 30: counted beside the DFA, not written out
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 30}},
    "required": ["tags"],
}


@pytest.fixture(scope="module")
def shortest(smollm2_tokenizer):
    """The fewest tokens that close a plan, by the constraint's own figures over the served model's vocabulary."""
    compiler = ConstraintCompiler(ConstraintVocabulary(smollm2_tokenizer), CompilerConfig(timeout=600))
    yield lambda plan: asyncio.run(compiler.constraint(plan)).closing_distance()
    compiler.shutdown()


def json_answers(tools_client, ask: str, schema: dict, max_tokens: int, seeds) -> list:
    """Seeded answers at temperature 1 under `schema` and `max_tokens`: each stopped (closed) and valid."""
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": ask}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
            temperature=1.0,
            seed=seed,
            max_tokens=max_tokens,
        ),
        seeds,
    )
    for reply in replies:
        assert reply.choices[0].finish_reason == "stop", reply
        jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
        assert reply.usage.completion_tokens <= max_tokens
    return replies


def test_thirty_items_close_in_the_shortest_budget_as_an_answer(tools_client, shortest):
    budget = shortest(plan_output(None, "json", ResponseFormat("json_schema", TAGS, "tags"), None))
    assert budget >= 60  # thirty colours and their commas
    json_answers(tools_client, "List colours for my quilt, as JSON.", TAGS, budget, SEEDS)


def test_a_forced_call_of_thirty_items_closes_in_the_shortest_budget(tools_client, shortest):
    client, model = tools_client
    tools = ToolSet((Tool("tag", None, TAGS, strict=False),), ToolChoice("function", "tag"), parallel=True)
    budget = shortest(plan_output(tools, "json", None, None))  # hermes_tools.jinja teaches the JSON form
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tag my quilt with colours."}],
            tools=[function("tag", TAGS)],
            tool_choice={"type": "function", "function": {"name": "tag"}},
            temperature=1.0,
            seed=seed,
            max_tokens=budget,
        ),
        SEEDS,
    )
    for reply in replies:
        (call,) = reply.choices[0].message.tool_calls
        assert call.function.name == "tag" and reply.choices[0].finish_reason == "tool_calls", reply
        jsonschema.validate(json.loads(call.function.arguments), TAGS)
        assert reply.usage.completion_tokens <= budget


SHARED_BRACKET = {  # two anyOf arrays share their `[`: the count opens at the strings' minimum (2)
    "type": "object",
    "properties": {
        "a": {
            "anyOf": [
                {"type": "array", "items": {"type": "integer"}, "minItems": 6},
                {"type": "array", "items": {"type": "string"}, "minItems": 2},
            ]
        }
    },
    "required": ["a"],
}


@pytest.mark.parametrize("max_tokens", [14, 16])
def test_an_answer_whose_first_item_picks_the_longer_branch_still_closes(tools_client, max_tokens):
    """Measured before the fix: `{ "a": [1, 2, 3,` cut by max_tokens for 7 seeds of 8 at 14 and 16 tokens (the
    integers' six items were counted from the first comma, too late); the strings' branch fits in ~10."""
    json_answers(tools_client, "Write the JSON.", SHARED_BRACKET, max_tokens, range(8))


WEATHER_NOTE = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "note": {"type": "string"}},
    "required": ["city", "note"],
}


@pytest.mark.parametrize("max_tokens", [32, 61, 64, 80, 128])
def test_a_named_call_with_open_strings_closes_at_any_budget_that_fits_it(client, max_tokens):
    """Issue 36's shape on the default model and template (the engine's tool prompt): a named call with two open
    strings, temperature 1, 8 seeds. The issue saw 422 'Unterminated string' at 61, 64 and 80 tokens: the model
    wrote `</tool_call>` inside `note` and the reader ended the call there. The shortest call here is 27 tokens."""
    model = client.models.list().data[0].id
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "What's the weather in Paris? Add a note."}],
            tools=[function("get_weather", WEATHER_NOTE)],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=1.0,
            seed=seed,
            max_tokens=max_tokens,
        ),
        range(1, 9),
        slots=1,
    )
    for reply in replies:
        assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0]
        (call,) = reply.choices[0].message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), WEATHER_NOTE)
