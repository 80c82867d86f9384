"""Tool use on /v1/messages with the official `anthropic` client, over the tools server (a Hermes-style template
that renders tools, --deterministic, four slots): forced calls that validate, the tool_result round trip, streamed
input_json_delta, tool_choice none / disable_parallel_tool_use, and counts with tools."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest
from server_process import http

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}
TIME = {"name": "get_time", "description": "The local time in a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def claude(tools_server):
    return anthropic.Anthropic(base_url=tools_server.url, api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(tools_server):
    return tools_server.get("/v1/models")[1]["data"][0]["id"]


def tool_uses(message) -> list:
    return [block for block in message.content if block.type == "tool_use"]


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_a_forced_tool_use_validates_and_its_result_is_answered(claude, model, choice):
    tools = [WEATHER, TIME]
    first = claude.messages.create(
        model=model, max_tokens=80, messages=ASK, tools=tools, tool_choice=choice, extra_body={"temperature": 0}
    )
    assert first.stop_reason == "tool_use"
    uses = tool_uses(first)
    assert len(uses) >= 1 and all(b.id.startswith("toolu_") for b in uses)
    for use in uses:
        schema = next(t for t in tools if t["name"] == use.name)["input_schema"]
        jsonschema.validate(use.input, schema)
    if choice["type"] == "tool":
        assert [b.name for b in uses] == ["get_weather"]
    results = [{"type": "tool_result", "tool_use_id": b.id, "content": "18 C, sunny"} for b in uses]
    history = [*ASK, {"role": "assistant", "content": first.content}, {"role": "user", "content": results}]
    second = claude.messages.create(model=model, max_tokens=16, messages=history, tools=tools)
    assert second.content and second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    counted = claude.messages.count_tokens(model=model, messages=history, tools=tools).input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == counted


def test_a_failed_tool_result_reaches_the_model_marked(tools_server, claude, model):
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "unit": "celsius"}}
    history = lambda result: [  # noqa: E731
        *ASK,
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    ok = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "no such city"}]}
    failed = {**ok, "is_error": True}
    count = lambda result: claude.messages.count_tokens(model=model, messages=history(result), tools=[WEATHER])  # noqa: E731
    assert count(failed).input_tokens > count(ok).input_tokens
    status, body, _ = http("POST", tools_server.url + "/v1/messages", {
        "max_tokens": 2, "messages": history(failed), "tools": [WEATHER],
    })  # fmt: skip
    assert status == 200, body


def test_streamed_tool_use_assembles_to_the_verified_input(tools_server, claude, model):
    fields = dict(
        model=model, max_tokens=80, messages=ASK, tools=[WEATHER], tool_choice={"type": "any",
        "disable_parallel_tool_use": True}, extra_body={"temperature": 0},
    )  # fmt: skip
    whole = claude.messages.create(**fields)
    partial: dict[int, str] = {}
    with claude.messages.stream(**fields) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial[event.index] = partial.get(event.index, "") + event.delta.partial_json
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                assert event.content_block.input == {} and event.content_block.name == "get_weather"
        final = stream.get_final_message()
    uses = tool_uses(final)
    assert len(uses) == 1 and final.stop_reason == "tool_use"
    index = final.content.index(uses[0])
    assert json.loads(partial[index]) == uses[0].input == tool_uses(whole)[0].input
    jsonschema.validate(uses[0].input, WEATHER["input_schema"])


def test_tool_choice_none_writes_no_call_and_auto_may(claude, model):
    none = claude.messages.create(
        model=model, max_tokens=24, messages=ASK, tools=[WEATHER], tool_choice={"type": "none"},
        extra_body={"temperature": 0},
    )  # fmt: skip
    assert not tool_uses(none) and none.stop_reason in ("end_turn", "max_tokens")
    auto = claude.messages.create(model=model, max_tokens=60, messages=ASK, tools=[WEATHER])
    assert auto.stop_reason in ("end_turn", "max_tokens", "tool_use")
    for use in tool_uses(auto):
        jsonschema.validate(use.input, WEATHER["input_schema"])


def test_count_tokens_counts_the_rendered_tools(claude, model):
    bare = claude.messages.count_tokens(model=model, messages=ASK).input_tokens
    with_tools = claude.messages.count_tokens(model=model, messages=ASK, tools=[WEATHER]).input_tokens
    unseen = claude.messages.count_tokens(model=model, messages=ASK, tools=[WEATHER], tool_choice={"type": "none"})
    assert with_tools > bare and unseen.input_tokens == bare  # under "none" the tools are not shown


def test_a_forced_call_cut_by_max_tokens_is_max_tokens_with_no_call(claude, model):
    message = claude.messages.create(
        model=model, max_tokens=4, messages=ASK, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}
    )
    assert message.stop_reason == "max_tokens" and not tool_uses(message)
