"""Anthropic's Messages API over the real server with the official `anthropic` client: text, streams, counts,
stop reasons, thinking, keys, and malformed bodies answered in Anthropic's error shape.

anthropic 2.10's `messages.create` no longer takes temperature / top_p / top_k (Anthropic dropped them from
its newer models); the API still does, and clients send them through `extra_body`, as here.
"""

from __future__ import annotations

import json
import uuid

import anthropic
import pytest
from server_process import API_KEY, http
from test_streaming import raw_stream, sse_events

GREEDY = {"temperature": 0}
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)


def claude_for(server, key: str = "none"):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def post(server, body, path="/v1/messages", headers=None):
    return http("POST", server.url + path, body, {"x-api-key": API_KEY} if headers is None else headers)


def events_of(server, body, path="/v1/messages") -> list[tuple[str, dict]]:
    """(event name, data) of every frame of a streamed request, over a raw socket."""
    _, rest = raw_stream(server, {**body, "stream": True}, path)
    out = []
    for frame in sse_events(rest):
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def assert_anthropic_error(body, status, kind=None):
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
    if kind is not None:
        assert body["error"]["type"] == kind, (status, body)


def test_text_is_chats_text_with_anthropics_fields(claude, client):
    message = claude.messages.create(model="client-main", max_tokens=12, messages=HI, extra_body=GREEDY)
    chat = client.chat.completions.create(model="main", messages=HI, max_tokens=12, temperature=0)
    assert message.type == "message" and message.role == "assistant" and message.model == "client-main"
    assert message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == chat.choices[0].message.content
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    assert message.stop_sequence is None
    assert message.usage.output_tokens == chat.usage.completion_tokens
    total = message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert total == chat.usage.prompt_tokens and message.usage.cache_creation_input_tokens == 0


def test_streamed_text_is_the_whole_message(claude):
    fields = dict(model="main", max_tokens=12, system="Be brief.", messages=HI, extra_body=GREEDY)
    whole = claude.messages.create(**fields)
    with claude.messages.stream(**fields) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == (
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    )


def test_stream_events_in_anthropics_order(server):
    events = events_of(server, {"max_tokens": 6, "messages": HI, **GREEDY})
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    assert events[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for _, d in events[3:-3])
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 6


def test_count_tokens_is_what_the_model_is_given(claude, server):
    """On a prompt no earlier request shares, input_tokens is the whole prompt; repeated, the prefix cache
    supplies its full blocks and input_tokens + cache_read_input_tokens is still the count."""
    fresh = [{"role": "user", "content": f"Say {uuid.uuid4().hex} back."}]
    fields = dict(model="main", system=[{"type": "text", "text": f"Id {uuid.uuid4().hex}."}], messages=fresh)
    counted = claude.messages.count_tokens(**fields).input_tokens
    first = claude.messages.create(**fields, max_tokens=2, extra_body=GREEDY)
    assert first.usage.input_tokens == counted and first.usage.cache_read_input_tokens == 0
    again = claude.messages.create(**fields, max_tokens=2, extra_body=GREEDY)
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == counted
    chat_messages = [{"role": "system", "content": fields["system"][0]["text"]}, *fresh]
    prompt = server.post("/apply-template", {"messages": chat_messages})[1]["prompt"]
    assert len(server.post("/tokenize", {"content": prompt})[1]["tokens"]) == counted


def test_stop_sequences_and_max_tokens(claude):
    message = claude.messages.create(
        model="main", max_tokens=20, messages=HI, stop_sequences=["!", "?"], extra_body=GREEDY
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence in ("!", "?")
    assert message.stop_sequence not in message.content[0].text
    short = claude.messages.create(model="main", max_tokens=2, messages=HI, extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_prefill_continues_the_assistants_text(claude):
    """A final assistant message is where the answer starts: greedy, it goes on as the model's own answer does."""
    plain = claude.messages.create(model="main", max_tokens=12, messages=HI, extra_body=GREEDY).content[0].text
    prefix = " ".join(plain.split(" ")[:2])  # cut between words, so the prefix tokenizes as the answer did
    history = [*HI, {"role": "assistant", "content": prefix}]
    message = claude.messages.create(model="main", max_tokens=3, messages=history, extra_body=GREEDY)
    rest = message.content[0].text
    assert rest and plain.startswith(prefix + rest), (plain, prefix, rest)


def test_thoughts_in_history_are_accepted_and_not_replayed(claude):
    plain = [*HI, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    with_thoughts = [
        *HI,
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "They greet me.", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Hello."},
        ]},
        {"role": "user", "content": [{"type": "text", "text": "Bye"}]},
    ]  # fmt: skip
    count = lambda messages: claude.messages.count_tokens(model="main", messages=messages).input_tokens  # noqa: E731
    assert count(with_thoughts) == count(plain)


def test_keys_x_api_key_bearer_and_a_wrong_key(server, claude):
    body = {"max_tokens": 1, "messages": HI}
    assert post(server, body)[0] == 200
    assert post(server, body, headers={"Authorization": f"Bearer {API_KEY}"})[0] == 200
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}
    assert post(server, body, headers=headers)[0] == 200
    for headers in ({}, {"x-api-key": "sk-wrong"}, {"Authorization": "Bearer sk-wrong"}):
        status, reply, _ = post(server, body, headers=headers)
        assert status == 401
        assert_anthropic_error(reply, status, "authentication_error")
    with pytest.raises(anthropic.AuthenticationError) as caught:
        claude_for(server, "sk-wrong").messages.create(model="main", max_tokens=1, messages=HI)
    assert caught.value.status_code == 401 and caught.value.body["error"]["type"] == "authentication_error"
    status, reply, _ = post(server, {"messages": HI}, "/v1/messages/count_tokens", headers={"x-api-key": "no"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"


def test_thinking_on_a_template_without_a_switch_is_501(server):
    for thinking in ({"type": "enabled", "budget_tokens": 2}, {"type": "adaptive"}):
        status, body, _ = post(server, {"max_tokens": 3, "messages": HI, "thinking": thinking})
        assert status == 501 and "thinking" in body["error"]["message"]
        assert_anthropic_error(body, status)
    assert post(server, {"max_tokens": 1, "messages": HI, "thinking": {"type": "disabled"}})[0] == 200


def test_thinking_blocks_with_a_thinking_template(thinking_server):
    """The template opens <think>; SmolLM2 never closes it by itself, so budget_tokens does: the thought ends
    within its budget (the closer forced) and the text block follows (tests/structured/test_thought_watch.py
    checks the count)."""
    c = claude_for(thinking_server)
    fields = dict(model="SmolLM2-135M-Instruct.Q4_1", max_tokens=12, messages=HI, extra_body=GREEDY)
    message = c.messages.create(**fields, thinking={"type": "enabled", "budget_tokens": 6})
    assert [b.type for b in message.content] == ["thinking", "text"], message.content
    assert message.content[0].thinking.strip() and message.content[1].text
    assert message.stop_reason == "max_tokens"
    with c.messages.stream(**fields, thinking={"type": "enabled", "budget_tokens": 6}) as stream:
        kinds = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert kinds[0] == "thinking_delta" and set(kinds) == {"thinking_delta", "text_delta"}
    assert [b.model_dump(include={"type", "thinking", "text"}) for b in final.content] == [
        b.model_dump(include={"type", "thinking", "text"}) for b in message.content
    ]
    plain = c.messages.create(**fields, thinking={"type": "disabled"})
    assert [b.type for b in plain.content] == ["text"] and plain.content[0].text
    hidden = c.messages.create(**fields, thinking={"type": "enabled", "budget_tokens": 4, "display": "omitted"})
    # the thought's text is left out (greedy here may take another path: the prefix cache changes the numerics)
    assert all(b.thinking == "" for b in hidden.content if b.type == "thinking") and hidden.content[-1].type == "text"
    counts = {
        kind: c.messages.count_tokens(model=fields["model"], messages=HI, thinking={"type": kind, **extra}).input_tokens
        for kind, extra in (("enabled", {"budget_tokens": 4}), ("disabled", {}))
    }
    assert counts["enabled"] > counts["disabled"]  # the opened thought is part of the prompt


def test_other_methods_are_405_in_anthropics_shape(server):
    status, body, headers = http("GET", server.url + "/v1/messages", headers={"x-api-key": API_KEY})
    assert status == 405 and "POST" in headers["Allow"]
    assert_anthropic_error(body, status, "invalid_request_error")


BASE = {"max_tokens": 4, "messages": HI}
MALFORMED = [
    ({"messages": HI}, "max_tokens"),
    ({**BASE, "max_tokens": 0}, "max_tokens"),
    ({**BASE, "max_tokens": "4"}, "max_tokens"),
    ({"max_tokens": 4}, "messages"),
    ({**BASE, "messages": []}, "messages"),
    ({**BASE, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({**BASE, "messages": [{"role": "user", "content": "x", "name": "n"}]}, "messages[0].name"),
    ({**BASE, "messages": [{"role": "user", "content": []}]}, "messages[0].content"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "extra": 1}]}]},
     "messages[0].content[0].extra"),
    ({**BASE, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
     "messages[0].content[0].type"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages[0].content[0].type"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}]},
     "messages[0].content[0].tool_use_id"),
    ({**BASE, "messages": [*HI, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}]}, "messages[1].content[0].id"),
    ({**BASE, "messages": [*HI, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": "[1]"}]}]}, "messages[1].content[0].input"),
    ({**BASE, "system": 3}, "system"),
    ({**BASE, "system": [{"type": "image"}]}, "system[0]"),
    ({**BASE, "temperature": 1.5}, "temperature"),
    ({**BASE, "top_p": -1}, "top_p"),
    ({**BASE, "top_k": 1.5}, "top_k"),
    ({**BASE, "stop_sequences": "x"}, "stop_sequences"),
    ({**BASE, "stop_sequences": [""]}, "stop_sequences"),
    ({**BASE, "stream": "yes"}, "stream"),
    ({**BASE, "metadata": {"user_id": "u", "session": "s"}}, "metadata.session"),
    ({**BASE, "metadata": {"user_id": 7}}, "metadata.user_id"),
    ({**BASE, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({**BASE, "thinking": {"type": "enabled", "budget_tokens": 4}}, "thinking"),
    ({**BASE, "thinking": {"type": "sometimes"}}, "thinking.type"),
    ({**BASE, "thinking": {"type": "disabled", "budget_tokens": 9}}, "thinking.budget_tokens"),
    ({**BASE, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({**BASE, "tools": [{"name": "f", "input_schema": {"type": "array"}}]}, "tools[0].input_schema"),
    ({**BASE, "tools": [{"name": "bad name", "input_schema": {"type": "object"}}]}, "tools[0].name"),
    ({**BASE, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({**BASE, "tools": [{"name": "f", "input_schema": {"type": "object"}, "defer_loading": True}]},
     "tools[0].defer_loading"),
    ({**BASE, "tool_choice": {"type": "any"}}, "tool_choice"),
    ({**BASE, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool"}},
     "tool_choice.name"),
    ({**BASE, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice.name"),
    ({**BASE, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": "auto"}, "tool_choice"),
    ({**BASE, "tool_choice": {"type": "none", "disable_parallel_tool_use": True}},
     "tool_choice.disable_parallel_tool_use"),
    ({**BASE, "cache_control": {"type": "persistent"}}, "cache_control"),
    ({**BASE, "model": "claude-opus-4"}, "model"),
    ({**BASE, "service_tier": "auto"}, "service_tier"),
    ({**BASE, "output_config": {"effort": "low"}}, "output_config"),
    ({**BASE, "n": 2}, "n"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), MALFORMED, ids=[field for _, field in MALFORMED])
def test_malformed_bodies_are_4xx_in_anthropics_shape_naming_the_field(server, body, field):
    status, reply, _ = post(server, body)
    assert 400 <= status < 500, (status, reply)
    assert_anthropic_error(reply, status, "invalid_request_error")
    assert field in reply["error"]["message"], reply


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": HI, "max_tokens": 3}, "max_tokens"),
        ({"messages": HI, "stream": True}, "stream"),
        ({"messages": HI, "temperature": 0}, "temperature"),
        ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages[0].content[0].type"),
        ({}, "messages"),
    ],
)
def test_count_tokens_takes_only_what_shapes_the_prompt(server, body, field):
    status, reply, _ = post(server, body, "/v1/messages/count_tokens")
    assert status == 400
    assert_anthropic_error(reply, status, "invalid_request_error")
    assert field in reply["error"]["message"]


def test_a_body_that_is_not_json_or_too_large(server):
    status, reply, _ = post(server, b"{not json")
    assert status == 400
    assert_anthropic_error(reply, status, "invalid_request_error")
    status, reply, _ = post(server, b'{"messages": "' + b"x" * (9 << 20) + b'"}')
    assert status == 413
    assert_anthropic_error(reply, status, "request_too_large")
