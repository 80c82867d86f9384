"""gpt-oss's harmony format and Qwen3-Coder's template end to end: real servers serving the published templates
(fetched by a fixture) with `--chat-template-file`, over the socket with the official clients.

The gpt-oss server runs bench/synth_gguf.py's tiny-gpt-oss whose vocabulary ends with the harmony tokens: random
weights, so its free text (the analysis) is noise, but what the constraint forces is checked here whole: a forced
call validates on every route and is streamed only once verified, a JSON answer is the final message alone, and
the analysis never reaches content. Qwen3-Coder's template is served on SmolLM2. A history with calls and results
is rendered by the server exactly as the template renders it here (its prompt token count).
"""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest
from server_process import Server

from lexi.chat.prompt import Conversation, build_chat_prompt
from lexi.chat.template import ChatTemplate
from lexi.chat.tools import Tool, ToolChoice, ToolSet

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": PARAMETERS}}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HISTORY = [
    *ASK,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "assistant", "content": "Sunny, 21 C."},
    {"role": "user", "content": "And in Oslo?"},
]
TEMPLATE_HISTORY = [  # the same history as the template sees it (arguments as a mapping, content as text)
    ASK[0],
    {
        **HISTORY[1],
        "content": "",
        "tool_calls": [
            {
                **HISTORY[1]["tool_calls"][0],
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
            }
        ],
    },  # fmt: skip
    *HISTORY[2:],
]


@pytest.fixture(scope="module")
def harmony_servers(published_templates, harmony_path):
    launched = {
        "gpt-oss": Server(
            "-m", str(harmony_path), "--chat-template-file", str(published_templates / "openai-gpt-oss-120b.jinja"),
            "--parallel", "2",
        ),
        "coder": Server(
            "--chat-template-file", str(published_templates / "Qwen3-Coder.jinja"), "--parallel", "2",
        ),
    }  # fmt: skip
    for server in launched.values():
        server.launch()
    try:
        yield {name: server.wait_ready() for name, server in launched.items()}
    finally:
        for server in launched.values():
            server.stop()


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def gpt_oss(harmony_servers):
    return client_of(harmony_servers["gpt-oss"])


@pytest.fixture(scope="module")
def coder(harmony_servers):
    return client_of(harmony_servers["coder"])


def model_of(client) -> str:
    return client.models.list().data[0].id


@pytest.mark.parametrize("choice", ["required", FORCED])
def test_a_forced_call_validates_and_the_analysis_stays_reasoning(gpt_oss, choice):
    thoughts = []
    for seed in range(3):
        reply = gpt_oss.chat.completions.create(
            model=model_of(gpt_oss), messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=48, seed=seed,
            temperature=1.0,
        )  # fmt: skip
        choice_ = reply.choices[0]
        assert choice_.finish_reason == "tool_calls", choice_
        (call,) = choice_.message.tool_calls
        assert call.function.name == "get_weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)
        assert not choice_.message.content  # the thought (noise) went to reasoning_content, never here
        thought = choice_.message.model_extra.get("reasoning_content") or ""
        assert "<|" not in thought  # no framing in it either
        assert (reply.usage.completion_tokens_details.reasoning_tokens > 0) == bool(thought)
        thoughts.append(thought)
    assert any(thoughts), "some analysis was written (else nothing was kept out of content)"


def test_a_streamed_forced_call_comes_whole_after_the_thought(gpt_oss):
    stream = gpt_oss.chat.completions.create(
        model=model_of(gpt_oss), messages=ASK, tools=TOOLS, tool_choice=FORCED, max_tokens=48, seed=5, stream=True
    )
    kinds, fragments, finish = [], [], None
    for chunk in stream:
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        if (delta.model_extra or {}).get("reasoning_content"):
            kinds.append("reasoning")
        if delta.content:
            kinds.append("content")
        if delta.tool_calls:
            kinds.append("call")
            fragments += delta.tool_calls
    assert "content" not in kinds and kinds.count("call") == 1 and kinds[-1] == "call", kinds
    (fragment,) = fragments  # verified before it was sent: one fragment with the name and the whole arguments
    assert fragment.function.name == "get_weather" and finish == "tool_calls"
    jsonschema.validate(json.loads(fragment.function.arguments), PARAMETERS)


def test_responses_give_a_reasoning_item_and_the_verified_call(gpt_oss):
    tool = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}
    reply = gpt_oss.responses.create(
        model=model_of(gpt_oss), input="Weather in Rome?", tools=[tool], tool_choice="required", max_output_tokens=48
    )
    kinds = [item.type for item in reply.output]
    assert kinds[-1] == "function_call" and "message" not in kinds, kinds
    jsonschema.validate(json.loads(reply.output[-1].arguments), PARAMETERS)


def test_messages_tool_use_validates(harmony_servers):
    claude = anthropic.Anthropic(base_url=harmony_servers["gpt-oss"].url, api_key="none", max_retries=0, timeout=300)
    tool = {"name": "get_weather", "description": "Weather", "input_schema": PARAMETERS}
    message = claude.messages.create(
        model=model_of(client_of(harmony_servers["gpt-oss"])), max_tokens=48, messages=ASK, tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )  # fmt: skip
    assert message.stop_reason == "tool_use"
    (use,) = [block for block in message.content if block.type == "tool_use"]
    assert use.name == "get_weather" and not [block for block in message.content if block.type == "text"]
    jsonschema.validate(use.input, PARAMETERS)


def test_a_json_answer_is_the_final_message_alone(gpt_oss):
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    for seed in range(2):
        reply = gpt_oss.chat.completions.create(
            model=model_of(gpt_oss), messages=ASK, max_tokens=40, seed=seed, temperature=1.0,
            response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        )  # fmt: skip
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(message.content), schema)  # nothing of the thought before or after it
        assert "<|" not in message.content and "<|" not in (message.model_extra.get("reasoning_content") or "")


def test_reasoning_effort_reaches_the_template_and_none_is_refused(gpt_oss):
    reply = gpt_oss.chat.completions.create(
        model=model_of(gpt_oss), messages=ASK, max_tokens=2, reasoning_effort="high"
    )
    assert reply.choices[0].finish_reason == "length"
    with pytest.raises(openai.APIStatusError) as refused:
        gpt_oss.chat.completions.create(model=model_of(gpt_oss), messages=ASK, max_tokens=2, reasoning_effort="none")
    assert refused.value.status_code == 501 and "always reasons" in str(refused.value)


@pytest.mark.parametrize("name", ["gpt-oss", "coder"])
def test_a_history_with_calls_and_results_renders_as_the_template_does(
    harmony_servers, published_templates, harmony_tokenizer, smollm2_tokenizer, name
):
    client = client_of(harmony_servers[name])
    file = "openai-gpt-oss-120b.jinja" if name == "gpt-oss" else "Qwen3-Coder.jinja"
    tokenizer = harmony_tokenizer if name == "gpt-oss" else smollm2_tokenizer
    reply = client.chat.completions.create(model=model_of(client), messages=HISTORY, tools=TOOLS, max_tokens=2)
    template = ChatTemplate((published_templates / file).read_text(encoding="utf-8"), file)
    tools = ToolSet((Tool("get_weather", "Weather", PARAMETERS, False),), ToolChoice("auto"))
    prompt = build_chat_prompt(template, tokenizer, Conversation(TEMPLATE_HISTORY, tools))
    assert '{"city": "Paris", "unit": "c"}' in prompt.text or "<parameter=city>\nParis\n" in prompt.text
    assert "sunny, 21 C" in prompt.text and "Sunny, 21 C." in prompt.text
    assert reply.usage.prompt_tokens == len(prompt.ids)


def test_qwen3_coder_forced_call_validates(coder):
    for seed in range(3):
        reply = coder.chat.completions.create(
            model=model_of(coder), messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
            max_tokens=64, seed=seed, temperature=1.0,
        )  # fmt: skip
        assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0]
        (call,) = reply.choices[0].message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)


def _marked_tool(properties: dict) -> list[dict]:
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return [{"type": "function", "function": {"name": "get_weather", "parameters": parameters}}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "which, properties",
    [
        ("gpt_oss", {"city": {"type": "string", "const": "a <|call|> <|end|> <|return|> <|start|> b"}}),
        (
            "coder",
            {
                "city": {"type": "string", "const": "a </tool_call> </function> <tool_call> <|im_end|> b"},
                "extra": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "const": "x </parameter> </tool_call> y"}},
                    "required": ["code"],
                },
            },
        ),
    ],
)
def test_a_closing_marker_inside_a_value_stays_in_the_call(which, properties, stream, request):
    """Harmony's terminators in a JSON string; Qwen3-Coder's function form with its tags in a text value and in a
    JSON value's string: each call ends where the constraint ends it, after the value."""
    client = request.getfixturevalue(which)
    reply = client.chat.completions.create(
        model=model_of(client), messages=ASK, tools=_marked_tool(properties), tool_choice=FORCED, max_tokens=160,
        stream=stream,
    )  # fmt: skip
    if stream:
        chunks = list(reply)
        finish = chunks[-1].choices[0].finish_reason
        arguments = "".join(
            c.function.arguments or "" for chunk in chunks for d in chunk.choices for c in d.delta.tool_calls or []
        )
    else:
        finish = reply.choices[0].finish_reason
        arguments = reply.choices[0].message.tool_calls[0].function.arguments
    assert finish == "tool_calls"
    expected = {key: sub["const"] if "const" in sub else {"code": sub["properties"]["code"]["const"]}
                for key, sub in properties.items()}  # fmt: skip
    assert json.loads(arguments) == expected
