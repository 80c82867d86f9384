"""POST /v1/responses on real servers: the chat route's greedy text in Responses shapes, streamed and not.

The official openai client parses every body and stream event into its typed classes; raw HTTP
checks the SSE framing, the 400s for what the route does not support, auth, 429 and disconnects.
"""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest
from server_process import API_KEY

STORY = "Tell me a story about a lighthouse keeper."
INSTRUCTIONS = "You are a terse assistant."
THINKING_MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the thinking server has no alias


def chat_text(client, messages, max_tokens, **extra):
    reply = client.chat.completions.create(
        model="main", messages=messages, max_tokens=max_tokens, temperature=0, **extra
    )
    return reply


def respond(server, **fields):
    return server.post("/v1/responses", {"input": STORY, "max_output_tokens": 3, "temperature": 0, **fields})


def test_text_and_usage_equal_the_chat_route(client):
    r = client.responses.create(
        model="client-main", input=STORY, instructions=INSTRUCTIONS, max_output_tokens=8, temperature=0
    )
    chat = chat_text(client, [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": STORY}], 8)
    assert r.output_text == chat.choices[0].message.content and r.output_text.strip()
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "client-main"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    [message] = r.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [p.type for p in message.content] == ["output_text"] and message.content[0].annotations == []
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.input_tokens + 8
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.usage.input_tokens_details.cached_tokens >= 0
    assert r.temperature == 0 and r.max_output_tokens == 8 and r.instructions == INSTRUCTIONS and r.store is True


def test_message_items_with_text_parts_render_like_chat_messages(client):
    items = [
        {"role": "developer", "content": [{"type": "input_text", "text": INSTRUCTIONS}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "SECRET"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello! How can I help?", "annotations": []}],
        },
        {"role": "user", "content": STORY},
    ]
    messages = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": STORY},
    ]
    r = client.responses.create(model="main", input=items, max_output_tokens=6, temperature=0)
    chat = chat_text(client, messages, 6)
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens  # the reasoning item is not replayed


def test_stream_events_parse_and_deltas_make_the_final_text(client):
    events = list(client.responses.create(model="main", input=STORY, max_output_tokens=6, temperature=0, stream=True))
    whole = client.responses.create(model="main", input=STORY, max_output_tokens=6, temperature=0)
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert isinstance(events[0], openai.types.responses.ResponseCreatedEvent)
    assert isinstance(deltas[0], openai.types.responses.ResponseTextDeltaEvent)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert len({e.response.id for e in (events[0], events[1], events[-1])}) == 1
    text = "".join(d.delta for d in deltas)
    assert text == events[-4].text == events[-1].response.output_text == whole.output_text
    item_id = events[2].item.id
    assert all(d.item_id == item_id and d.output_index == 0 and d.content_index == 0 for d in deltas)
    assert events[-2].item.status == "incomplete" and events[-2].item.content[0].text == text
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 6 and final.usage.input_tokens == whole.usage.input_tokens


def test_stream_helper_completes_on_a_stop_string(client):
    whole = client.responses.create(model="main", input=STORY, max_output_tokens=8, temperature=0).output_text
    word = whole.split()[2]
    with client.responses.stream(
        model="main", input=STORY, max_output_tokens=8, temperature=0, extra_body={"stop": [word]}
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.incomplete_details is None
    assert final.output_text == "".join(deltas) == whole[: whole.index(word)]
    assert final.output[0].status == "completed"


def test_raw_sse_framing(server):
    status, text, headers = respond(server, stream=True)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    frames = text.split("\n\n")
    assert frames[-1] == "" and "[DONE]" not in text
    for number, frame in enumerate(frames[:-1]):
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        data = json.loads(data_line[6:])
        assert data["type"] == event_line[7:] and data["sequence_number"] == number
    assert frames[-2].startswith("event: response.incomplete\n")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": None}, "input"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
        ({"instructions": ["x"]}, "instructions"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),  # [] is no tools here (as OpenAI's Responses)
        ({"tool_choice": "required"}, "tool_choice"),
        ({"previous_response_id": 123}, "previous_response_id"),
        ({"previous_response_id": "resp_123"}, "previous_response_id"),  # not stored: OpenAI's 400 too
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"store": "yes"}, "store"),
        ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"unknown_field": 1}, "unknown_field"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}}, "text.format.schema"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ({"reasoning": {"effort": "max"}}, "reasoning.effort"),
        ({"truncation": "auto"}, "truncation"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": -1}, "top_p"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"stream_options": {"include_obfuscation": False}}, "stream_options"),
        ({"model": "gpt-4o"}, "model"),
        ({"input": "word " * 3000}, "input"),  # leaves no room in the 2048-token context
    ],
)
def test_unsupported_or_bad_fields_are_400(server, fields, param):
    status, body, _ = respond(server, **fields)
    assert status == 400, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == param


def test_store_false_and_harmless_extras_are_accepted(server):
    status, body, _ = respond(server, store=False, metadata={"k": "v"}, user="u1", tool_choice="none")
    assert status == 200, body
    assert body["store"] is False and body["metadata"] == {"k": "v"} and body["tool_choice"] == "none"


def test_reasoning_effort_without_a_thinking_switch_is_501(server):
    status, body, _ = respond(server, reasoning={"effort": "high"})
    assert status == 501 and body["error"]["param"] == "reasoning.effort"
    assert respond(server, reasoning={"effort": "none"})[0] == 200


def test_auth_applies(server):
    body = {"input": STORY, "max_output_tokens": 1}
    assert server.post("/v1/responses", body, headers={})[0] == 401
    status, body, headers = server.post("/v1/responses", body, headers={"Authorization": "Bearer wrong"})
    assert status == 401 and body["error"]["code"] == "invalid_api_key" and headers["WWW-Authenticate"] == "Bearer"


def test_think_block_becomes_a_reasoning_item(thinking_server, client_for):
    """The template opens <think>; the server's --n-predict 3 stops inside it: all three tokens are reasoning."""
    c = client_for(thinking_server)
    chat = c.chat.completions.create(model=THINKING_MODEL, messages=[{"role": "user", "content": STORY}], temperature=0)
    r = c.responses.create(model=THINKING_MODEL, input=STORY, temperature=0)
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.content[0].type == "reasoning_text"
    assert reasoning.content[0].text == chat.choices[0].message.reasoning_content and reasoning.content[0].text
    assert message.type == "message" and r.output_text == "" == chat.choices[0].message.content
    assert r.status == "incomplete" and r.usage.output_tokens == 3
    assert r.usage.output_tokens_details.reasoning_tokens == 3
    events = list(c.responses.create(model=THINKING_MODEL, input=STORY, temperature=0, stream=True))
    added = [(e.output_index, e.item.type) for e in events if e.type == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message")]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == reasoning.content[0].text
    assert events[-1].response.output[0].content[0].text == reasoning.content[0].text
    assert events[-1].response.usage.output_tokens_details.reasoning_tokens == 3


def test_server_sampling_defaults_and_reasoning_effort_none(thinking_server, client_for):
    c = client_for(thinking_server)
    r = c.responses.create(model=THINKING_MODEL, input=STORY, reasoning={"effort": "none"}, temperature=0)
    chat = c.chat.completions.create(
        model=THINKING_MODEL, messages=[{"role": "user", "content": STORY}], reasoning_effort="none", temperature=0
    )
    assert [item.type for item in r.output] == ["message"] and r.output_text == chat.choices[0].message.content
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    status, body, _ = thinking_server.post("/v1/responses", {"input": STORY, "max_output_tokens": 1})
    assert status == 200 and body["temperature"] == 1.5 and body["top_p"] == 1.0  # --temp 1.5 --top-p 1


def _open_stream(server, body):
    """A streamed /v1/responses request on a raw socket, returned once its first text delta has arrived."""
    payload = json.dumps({**body, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    sock.sendall(
        (
            f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nAuthorization: Bearer {API_KEY}\r\n\r\n"
        ).encode()
        + payload
    )
    data = b""
    while b"response.output_text.delta" not in data:
        data += sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    return sock


def test_busy_slot_is_429_and_a_disconnect_frees_it(server):
    sock = _open_stream(server, {"input": STORY, "max_output_tokens": 2000, "temperature": 0})
    try:
        status, body, _ = respond(server)
        assert status == 429 and body["error"]["type"] == "inference_busy"
        status, body, _ = respond(server, stream=True)
        assert status == 429 and body["error"]["code"] == "inference_busy"
    finally:
        sock.close()
    deadline = time.monotonic() + 3.0
    while server.metric("lexi_slots_busy") != 0:
        assert time.monotonic() < deadline, "the abandoned response still holds its slot"
        time.sleep(0.05)
    assert respond(server)[0] == 200
