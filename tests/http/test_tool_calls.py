"""Tool calls over real servers with the official openai client: rendering, history, errors, streams, Responses."""

from __future__ import annotations

import json

import openai
import pytest
from test_streaming import raw_stream, sse_events

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def stream_data(server, body, path="/v1/chat/completions") -> list[dict]:
    """The JSON of every `data:` line of a streamed request ([DONE] left out), over a raw socket."""
    _, rest = raw_stream(server, body, path)
    lines = [line for frame in sse_events(rest) for line in frame.split("\n") if line.startswith("data: ")]
    return [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_tools_render_in_the_templates_own_terms(tools_server):
    status, body, _ = tools_server.post("/apply-template", {"messages": ASK, "tools": [WEATHER]})
    assert status == 200, body
    prompt = body["prompt"]
    assert "You are given function signatures inside <tools></tools>:" in prompt  # the template's words
    assert json.dumps(WEATHER) in prompt and "These functions are available" not in prompt


def test_the_chatml_template_gets_the_engine_tool_prompt(server):
    status, body, _ = server.post("/apply-template", {"messages": ASK, "tools": [WEATHER]})
    assert status == 200, body
    prompt = body["prompt"]
    assert prompt.startswith("<|im_start|>system\n# Tools\n\nThese functions are available")
    assert json.dumps(WEATHER["function"]["parameters"]) in prompt
    assert '{"name": "FUNCTION_NAME", "arguments": {"PARAMETER_NAME": VALUE}}' in prompt


def test_a_history_with_calls_and_results_renders_and_is_answered(tools_server, client_for):
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny"},
    ]
    _, body, _ = tools_server.post("/apply-template", {"messages": history, "tools": [WEATHER]})
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}' in body["prompt"]
    assert "<tool_response>\n18 C, sunny\n</tool_response>" in body["prompt"]
    client = client_for(tools_server)
    reply = client.chat.completions.create(
        model=client.models.list().data[0].id,
        messages=history,
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=24,
        temperature=0,
    )
    assert reply.choices[0].message.content and reply.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": 5}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [{**WEATHER, "function": {**WEATHER["function"], "strict": True}}]},
            "tools[0].function.parameters",
        ),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": 1}}}
                ]
            },
            "tools[0].function.parameters",
        ),
    ],
)
def test_malformed_tools_are_400_naming_the_param(client, fields, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="main", messages=ASK, max_tokens=1, **fields)
    assert info.value.body["param"] == param, info.value.body


def test_a_forced_call_that_cannot_fit_max_tokens_is_length_with_no_call(server, client):
    """max_tokens 4 fits no call: OpenAI's answer (vLLM's test_max_tokens_with_tool_choice_required) is 200,
    finish_reason "length", no tool_calls, empty content; whole or streamed, never a fake call or a fragment."""
    reply = client.chat.completions.create(
        model="main", messages=ASK, tools=[WEATHER], tool_choice=FORCED, max_tokens=4
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls and choice.message.content == ""
    body = {"messages": ASK, "tools": [WEATHER], "tool_choice": FORCED, "max_tokens": 4, "stream": True}
    frames = stream_data(server, body)
    assert not any("error" in f for f in frames)
    deltas = [f["choices"][0] for f in frames if f.get("choices")]
    assert not any("tool_calls" in d["delta"] or d["delta"].get("content") for d in deltas)
    assert deltas[-1]["finish_reason"] == "length"


def test_streamed_deltas_assemble_to_the_same_calls(tools_server, client_for):
    client = client_for(tools_server)
    model = client.models.list().data[0].id
    for seed, parallel in ((1, False), (2, True)):  # parallel calls (several indexes) run on to max_tokens here
        fields = dict(
            model=model, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=80,
            parallel_tool_calls=parallel,
        )  # fmt: skip
        client.chat.completions.create(**fields, seed=seed, temperature=1.0)  # both below see the same prefix cache
        whole = client.chat.completions.create(**fields, seed=seed, temperature=1.0)
        calls: dict[int, dict] = {}
        finish = None
        for chunk in client.chat.completions.create(**fields, seed=seed, temperature=1.0, stream=True):
            if not chunk.choices:
                continue
            for delta in chunk.choices[0].delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"name": "", "arguments": "", "id": None})
                if delta.id:
                    assert entry["id"] is None and delta.type == "function" and delta.function.name
                    entry["id"], entry["name"] = delta.id, delta.function.name
                entry["arguments"] += delta.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        streamed = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
        assert streamed == calls_of(whole.choices[0].message) and streamed, (streamed, whole)
        assert finish == whole.choices[0].finish_reason == ("tool_calls" if not parallel else finish)
        assert len(streamed) == 1 if not parallel else len(streamed) >= 1
        assert whole.choices[0].message.content is None or parallel


def test_responses_function_call_round_trip(tools_server, client_for):
    client = client_for(tools_server)
    model = client.models.list().data[0].id
    tool = {"type": "function", **WEATHER["function"]}
    first = client.responses.create(
        model=model,
        input="What is the weather like in Paris today?",
        tools=[tool],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=80,
        temperature=1.0,
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.status == "completed"
    arguments = json.loads(call.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    assert first.tools[0].name == "get_weather" and first.status == "completed"
    second = client.responses.create(
        model=model,
        input=[
            {"role": "user", "content": "What is the weather like in Paris today?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"},
        ],
        tools=[tool],
        tool_choice="none",
        max_output_tokens=24,
        temperature=0,
    )
    assert second.output_text and all(item.type == "message" for item in second.output)


def test_responses_stream_sends_function_call_events_in_order(tools_server):
    body = {
        "input": "What is the weather like in Paris today?",
        "tools": [{"type": "function", **WEATHER["function"]}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "max_output_tokens": 80,
        "stream": True,
    }
    events = stream_data(tools_server, body, "/v1/responses")
    kinds = [e["type"] for e in events]
    start = kinds.index("response.function_call_arguments.delta")
    assert kinds[start - 1] == "response.output_item.added" and events[start - 1]["item"]["type"] == "function_call"
    assert kinds[start + 1 : start + 3] == ["response.function_call_arguments.done", "response.output_item.done"]
    done = events[start + 2]["item"]
    assert events[start]["delta"] == events[start + 1]["arguments"] == done["arguments"]
    assert json.loads(done["arguments"])["city"] and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_further_call_that_cannot_fit_is_not_begun(tools_server, client_for):
    """Under a forced tool_choice with parallel calls the output goes on only with calls: when max_tokens leaves
    no room for another, the turn ends after the finished ones (finish_reason "tool_calls"), and no piece of an
    unfinished call reaches the text. Before budget-aware constraints the next call was begun and cut ("length")."""
    client = client_for(tools_server)
    model = client.models.list().data[0].id
    city_only = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": city_only}}
    fields = dict(model=model, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[tool],
                  tool_choice="required", parallel_tool_calls=True, max_tokens=32, temperature=0)  # fmt: skip
    whole = client.chat.completions.create(**fields)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) >= 1, choice
    assert choice.message.content is None, choice.message.content
    assert whole.usage.completion_tokens <= 32
    chunks = list(client.chat.completions.create(**fields, stream=True))
    assert not any(c.choices and c.choices[0].delta.content for c in chunks)
    r = client.responses.create(
        model=model, input="Weather in Paris?", tools=[{"type": "function", "name": "get_weather",
        "parameters": city_only}], tool_choice="required", max_output_tokens=32, temperature=0,
    )  # fmt: skip
    assert r.status == "completed" and [item.type for item in r.output] == ["function_call"] * len(r.output), r


# Each call format's closing marker and the end-of-turn token's text, written inside a string value (the schema's
# const makes the constraint write it): the reader must end the call where the constraint does, after the value.
JSON_FORM_MARKERS = "a </tool_call> <tool_call> <|im_end|> b"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("which", ["server", "tools_server"])
def test_a_closing_marker_inside_a_string_value_stays_in_the_call(which, stream, request, client_for):
    """The engine's tool prompt (JSON form) and a Hermes template (JSON form), plain and streamed."""
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "note": {"type": "string", "const": JSON_FORM_MARKERS}},
        "required": ["city", "note"],
    }
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
    client = client_for(request.getfixturevalue(which))
    reply = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=ASK, tools=[tool], tool_choice=FORCED, max_tokens=96,
        stream=stream,
    )  # fmt: skip
    if stream:
        chunks = list(reply)
        arguments = "".join(
            c.function.arguments or "" for chunk in chunks for d in chunk.choices for c in d.delta.tool_calls or []
        )
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
    else:
        assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0]
        (call,) = reply.choices[0].message.tool_calls
        arguments = call.function.arguments
    assert json.loads(arguments)["note"] == JSON_FORM_MARKERS
