"""What real clients send back is accepted: each surface's own response objects returned as history through its own
SDK (chat messages with calls, Responses output items, Messages content blocks), an openai-agents agent without
tools on the Responses model, and vLLM's extra sampling fields on Responses. All over the main server (ChatML, the
engine's tool prompt, --deterministic) with the official clients."""

from __future__ import annotations

import json

import anthropic
import pytest
from server_process import API_KEY

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


@pytest.mark.parametrize("dumped", [False, True])
def test_a_chat_reply_with_calls_goes_back_as_history(client, model, dumped):
    """The assistant message as the SDK returned it (or its model_dump(), nulls and all), then the tool's result."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}]
    messages = [{"role": "user", "content": ASK}]
    forced = {"type": "function", "function": {"name": "get_weather"}}
    first = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice=forced, max_tokens=40
    )
    message = first.choices[0].message
    (call,) = message.tool_calls
    messages += [
        message.model_dump() if dumped else message,
        {"role": "tool", "tool_call_id": call.id, "content": "21 C"},
    ]
    second = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=8)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("dumped", [False, True])
def test_responses_output_items_go_back_as_input(client, model, dumped):
    """A forced call's output items (and a plain answer's message item) sent back in the next request's input."""
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}]
    first = client.responses.create(
        model=model, input=ASK, tools=tools, tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40, store=False,
    )  # fmt: skip
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls, first.output
    items = [item.model_dump(by_alias=True) if dumped else item for item in first.output]  # nulls and all
    results = [{"type": "function_call_output", "call_id": c.call_id, "output": "21 C"} for c in calls]
    second = client.responses.create(
        model=model, input=[{"role": "user", "content": ASK}, *items, *results], tools=tools, max_output_tokens=8,
        store=False,
    )  # fmt: skip
    assert second.status in ("completed", "incomplete")
    message = [item.model_dump(by_alias=True) if dumped else item for item in second.output]
    third = client.responses.create(
        model=model, input=[{"role": "user", "content": ASK}, *message, {"role": "user", "content": "Thanks."}],
        max_output_tokens=4, store=False,
    )  # fmt: skip
    assert third.output


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dumped", [False, True])
def test_the_anthropic_tool_loop_sends_the_response_content_back(server, stream, dumped):
    """`{"role": "assistant", "content": response.content}` then the tool_result, as the SDK's docs do: the blocks
    carry `caller`, `toolset_name`, `citations` (null when dumped), and the route takes them as echo."""
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    model = claude.models.list().data[0].id
    tools = [{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER_SCHEMA}]
    messages = [{"role": "user", "content": ASK}]
    ask = dict(model=model, max_tokens=40, messages=messages, tools=tools, tool_choice={"type": "any"})
    if stream:
        with claude.messages.stream(**ask) as events:
            first = events.get_final_message()
    else:
        first = claude.messages.create(**ask)
    (use,) = [block for block in first.content if block.type == "tool_use"]
    content = [block.model_dump() for block in first.content] if dumped else first.content
    messages += [
        {"role": "assistant", "content": content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "21 C"}]},
    ]
    second = claude.messages.create(model=model, max_tokens=8, messages=messages, tools=tools)
    assert second.content and second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    answer = [{"type": "text", "text": "It is 21 C.", "citations": [{"type": "char_location", "cited_text": "21 C",
               "document_index": 0, "start_char_index": 0, "end_char_index": 4}]}]  # fmt: skip
    third = claude.messages.create(
        model=model, max_tokens=4, tools=tools,
        messages=[*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks."}],
    )  # fmt: skip
    assert third.content


def test_fields_outside_anthropics_schema_are_still_refused(server):
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    for block, param in (
        ({**use, "origin": "x"}, "messages[1].content[0].origin"),
        ({**use, "caller": "direct"}, "messages[1].content[0].caller"),
        ({**use, "toolset_name": 3}, "messages[1].content[0].toolset_name"),
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            claude.messages.create(
                model=claude.models.list().data[0].id, max_tokens=4,
                messages=[{"role": "user", "content": ASK}, {"role": "assistant", "content": [block]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}],
            )  # fmt: skip
        assert param in refused.value.message


def test_an_agent_without_tools_runs_on_the_responses_model(server, model):
    """openai-agents sends `tools: []` for an agent that has none; OpenAI's Responses API takes it as no tools."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI
    backend = AsyncOpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    agent = Agent(
        name="helper", instructions="Answer in one short sentence.",
        model=OpenAIResponsesModel(model=model, openai_client=backend),
        model_settings=ModelSettings(max_tokens=96, temperature=0),
    )  # fmt: skip
    result = Runner.run_sync(agent, "Say hello in one word.")
    assert isinstance(result.final_output, str) and result.final_output.strip()


def test_responses_take_an_empty_tools_array_as_no_tools(client, model):
    reply = client.responses.create(model=model, input="Hi", tools=[], max_output_tokens=4, store=False)
    assert reply.tools == [] and reply.output
    reply = client.responses.create(model=model, input="Hi", tools=[], tool_choice="auto", max_output_tokens=4)
    assert reply.output
    with pytest.raises(Exception) as refused:
        client.responses.create(model=model, input="Hi", tools=[], tool_choice="required", max_output_tokens=4)
    assert "tool_choice" in str(refused.value) and "needs tools" in str(refused.value)
    with pytest.raises(Exception) as refused:  # Chat Completions keeps OpenAI's refusal of `tools: []`
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], tools=[])
    assert "empty array" in str(refused.value)


def test_repetition_penalty_on_responses_is_honoured_as_on_chat(client, model):
    """vLLM's name for the penalty is taken on Responses and gives what chat gives with it (greedy, deterministic)."""
    prompt = "List the numbers from one to twenty in words, separated by commas."
    answers = {}
    for penalty in (1.0, 1.8):
        extra = {"repetition_penalty": penalty, "top_k": 40, "seed": 42}
        responses = client.responses.create(
            model=model, input=prompt, max_output_tokens=24, temperature=0, extra_body=extra, store=False
        )
        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=24, temperature=0, extra_body=extra
        )
        assert responses.output_text == chat.choices[0].message.content
        answers[penalty] = responses.output_text
    assert answers[1.0] != answers[1.8], json.dumps(answers)
