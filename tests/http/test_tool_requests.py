"""Tool declarations, tool_choice and parallel_tool_calls: every malformed one is a 400 naming its param."""

from __future__ import annotations

import pytest

from lexi.http.chat.request import parse_chat_request
from lexi.http.errors import ApiError
from lexi.http.ops.config import SamplingDefaults
from lexi.http.responses.request import parse_responses_request

USER = [{"role": "user", "content": "hi"}]
DEFAULTS = SamplingDefaults()
OBJ = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def fn(name="get_weather", parameters=OBJ, **extra):
    return {"type": "function", "function": {"name": name, "parameters": parameters, **extra}}


def chat(**fields):
    return parse_chat_request({"messages": USER, **fields}, DEFAULTS)


def refused(param, **fields):
    with pytest.raises(ApiError) as info:
        chat(**fields)
    assert info.value.status == 400, info.value.message
    assert info.value.param == param, (info.value.param, info.value.message)
    return info.value.message


CLOSED = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "when": {
            "type": "object",
            "properties": {"day": {"type": "integer"}},
            "required": ["day"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
        "unit": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["city", "when", "tags", "unit"],
    "additionalProperties": False,
    "$defs": {
        "tag": {
            "type": "object",
            "properties": {"k": {"type": "string"}},
            "required": ["k"],
            "additionalProperties": False,
        }
    },
}


def opened(path: list, **change):
    """CLOSED with one nested object opened up."""
    import copy

    schema = copy.deepcopy(CLOSED)
    node = schema
    for key in path:
        node = node[key]
    node.update(change)
    return schema


@pytest.mark.parametrize(
    ("tools", "extra", "param"),
    [
        ([fn(name=5)], {}, "tools[0].function.name"),
        ([fn(name="has space")], {}, "tools[0].function.name"),
        ([fn(name="x" * 65)], {}, "tools[0].function.name"),
        ([fn(), fn()], {}, "tools"),
        ([fn(), fn("b", {"type": "object", "properties": 5})], {}, "tools[1].function.parameters"),
        ([fn(parameters={"type": "string"})], {}, "tools[0].function.parameters"),
        ([fn(parameters=[1])], {}, "tools[0].function.parameters"),
        ([fn(parameters={"$ref": "https://example.com/s.json"})], {}, "tools[0].function.parameters"),
        ([fn(parameters={"$ref": "#/$defs/missing"})], {}, "tools[0].function.parameters"),
        ([fn(description=3)], {}, "tools[0].function.description"),
        ([fn(strict="yes")], {}, "tools[0].function.strict"),
        ([fn(extra_field=1)], {}, "tools[0].function.extra_field"),
        ([{"type": "retrieval"}], {}, "tools[0]"),
        ([1], {}, "tools[0]"),
        ([fn()], {"tool_choice": "always"}, "tool_choice"),
        ([fn()], {"tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
        ([fn()], {"tool_choice": {"type": "function", "name": "get_weather"}}, "tool_choice"),
        ([fn()], {"tool_choice": 5}, "tool_choice"),
        ([fn()], {"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ([], {"tool_choice": "required"}, "tools"),  # an empty tools array is refused itself, as OpenAI does
        (None, {"tool_choice": "auto"}, "tool_choice"),
        (None, {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    ],
)
def test_malformed_tools_are_400(tools, extra, param):
    fields = dict(extra)
    if tools is not None:
        fields["tools"] = tools
    refused(param, **fields)


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (opened([], additionalProperties=True), "tools[0].function.parameters "),
        (opened([], required=["city"]), "tools[0].function.parameters "),
        (opened(["properties", "when"], additionalProperties=True), "parameters.properties.when "),
        (opened(["$defs", "tag"], required=[]), "parameters.$defs.tag "),
        (opened(["properties", "unit", "anyOf", 0], type="object"), "parameters.properties.unit.anyOf[0] "),
    ],
)
def test_strict_tools_must_be_closed_everywhere(schema, where):
    message = refused("tools[0].function.parameters", tools=[fn(parameters=schema, strict=True)])
    assert "'get_weather' is strict" in message and where in message


def test_accepted_tools():
    req = chat(tools=[fn(parameters=CLOSED, strict=True), fn("no_args", None)], parallel_tool_calls=False)
    tools = req.conversation.tools
    assert [t.name for t in tools.tools] == ["get_weather", "no_args"]
    assert tools.choice.mode == "auto" and tools.parallel is False and tools.tools[0].strict
    assert tools.tools[1].parameters == {"type": "object", "properties": {}}  # absent: an empty object schema
    forced = chat(tools=[fn()], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert forced.conversation.tools.choice.name == "get_weather" and forced.conversation.tools.forced
    assert chat(tool_choice="none").conversation.tools is None
    assert chat(tools=[fn(parameters={"type": "object", "properties": {"a": {"type": "string"}}})]).conversation.tools


def test_history_arguments_must_be_a_json_object():
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "not json"}}]
    refused(
        "messages[1].tool_calls[0].function.arguments", messages=[*USER, {"role": "assistant", "tool_calls": calls}]
    )
    calls[0]["function"]["arguments"] = "[1, 2]"
    refused(
        "messages[1].tool_calls[0].function.arguments", messages=[*USER, {"role": "assistant", "tool_calls": calls}]
    )


def test_responses_tools_take_the_flat_shape():
    def respond(**fields):
        return parse_responses_request({"input": "hi", **fields}, DEFAULTS)

    req = respond(
        tools=[{"type": "function", "name": "f", "parameters": OBJ}], tool_choice={"type": "function", "name": "f"}
    )
    assert req.conversation.tools.choice.name == "f" and req.tool_choice == {"type": "function", "name": "f"}
    for fields, param in [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0]"),
        ({"tools": [{"type": "file_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "array"}}]}, "tools[0].parameters"),
        (
            {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}},
            "tool_choice",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[]"}]}, "input[0].arguments"),
    ]:
        with pytest.raises(ApiError) as info:
            respond(**fields)
        assert info.value.param == param, (fields, info.value.message)


def test_responses_function_items_become_chat_history():
    req = parse_responses_request(
        {
            "input": [
                {"role": "user", "content": "weather in Oslo?"},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
                {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Bergen"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
            ]
        },
        DEFAULTS,
    )
    user, assistant, first, second = req.conversation.messages
    assert assistant["role"] == "assistant" and [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["tool_calls"][1]["function"] == {"name": "get_weather", "arguments": {"city": "Bergen"}}
    assert first == {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get_weather"}
    assert second["content"] == "rain" and second["tool_call_id"] == "c2"
