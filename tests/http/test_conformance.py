"""What OpenAI clients and conformance suites check: unknown fields, logprobs, n, batch prompts, fingerprints,
continuing a message, and the Responses object's fields. Real servers, the official openai client where it
supports the field, raw HTTP where it does not."""

from __future__ import annotations

import json

import openai
import pytest

USER = [{"role": "user", "content": "What is the capital of France?"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


def called(call_extra: dict, function_extra: dict | None = None) -> list[dict]:
    """A user turn, an assistant call `c1` (with extra keys) and its result."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}", **(function_extra or {})}}
    return [*USER, {"role": "assistant", "tool_calls": [{**call, **call_extra}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]  # fmt: skip


def post(server, path, body):
    return server.post(path, body)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": USER, "frobnicate": 1}, "frobnicate"),
        ("/v1/chat/completions", {"messages": [{**USER[0], "colour": "red"}]}, "messages[0].colour"),
        ("/v1/chat/completions", {"messages": USER, "functions": []}, "functions"),
        ("/v1/chat/completions", {"messages": USER, "stream": True, "stream_options": {"x": 1}}, "stream_options.x"),
        ("/v1/chat/completions", {"messages": USER, "store": True}, "store"),
        ("/v1/chat/completions", {"messages": USER, "modalities": ["audio"]}, "modalities"),
        ("/v1/completions", {"prompt": "x", "messages": USER}, "messages"),
        ("/v1/completions", {"prompt": "x", "best_of": 3}, "best_of"),
        ("/v1/responses", {"input": "x", "temperatur": 1}, "temperatur"),
        ("/v1/responses", {"input": [{"role": "user", "content": "x", "extra": 1}]}, "input[0].extra"),
        ("/tokenize", {"content": "x", "parse": True}, "parse"),
        # unknown keys nested in tools, tool_choice, earlier calls and formats: the same 400, the full path
        ("/v1/chat/completions", {"messages": USER, "tools": [{**TOOL, "foo": 1}]}, "tools[0].foo"),
        ("/v1/chat/completions", {"messages": USER, "tools": [{"type": "function", "function": {**TOOL["function"],
         "foo": 1}}]}, "tools[0].function.foo"),
        ("/v1/chat/completions", {"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function",
         "function": {"name": "f", "x": 1}}}, "tool_choice.function.x"),
        ("/v1/chat/completions", {"messages": USER, "tools": [TOOL], "tool_choice": {"type": "function",
         "function": {"name": "f"}, "x": 1}}, "tool_choice.x"),
        ("/v1/chat/completions", {"messages": called({"x": 1})}, "messages[1].tool_calls[0].x"),
        ("/v1/chat/completions", {"messages": called({}, {"x": 1})}, "messages[1].tool_calls[0].function.x"),
        ("/v1/chat/completions", {"messages": USER, "response_format": {"type": "text", "foo": 1}},
         "response_format.foo"),
        ("/v1/chat/completions", {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {
         "name": "a", "schema": {}, "x": 1}}}, "response_format.json_schema.x"),
        ("/v1/responses", {"input": "x", "reasoning": {"effort": "none", "foo": 1}}, "reasoning.foo"),
        ("/v1/responses", {"input": "x", "tools": [{"type": "function", "name": "f", "foo": 1}]}, "tools[0].foo"),
        ("/v1/responses", {"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {
         "type": "function", "name": "f", "x": 1}}, "tool_choice.x"),
        ("/v1/responses", {"input": "x", "text": {"format": {"type": "text", "x": 1}}}, "text.format.x"),
    ],
)  # fmt: skip
def test_fields_a_route_does_not_take_are_400_naming_them(server, path, body, param):
    extra = {"max_tokens": 1} if path in ("/v1/chat/completions", "/v1/completions") else {}
    status, reply, _ = post(server, path, {**extra, **body})
    assert status == 400 and reply["error"]["param"] == param, reply
    assert reply["error"]["code"] in ("unknown_parameter", "unsupported_value", "unsupported_parameter"), reply


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": [*USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
         "messages[1].tool_call_id"),
        ("/v1/chat/completions", {"messages": [*called({})[:2], {"role": "tool", "tool_call_id": "call_XYZ",
         "content": "x"}]}, "messages[2].tool_call_id"),
        ("/v1/chat/completions", {"messages": [*called({})[:2], *USER]}, "messages[1].tool_calls[0].id"),
        ("/v1/chat/completions", {"messages": called({})[:2]}, "messages[1].tool_calls[0].id"),
        ("/v1/chat/completions", {"messages": [*called({}), {"role": "tool", "tool_call_id": "c1", "content": "y"}]},
         "messages[3].tool_call_id"),  # answered twice
        ("/v1/responses", {"input": [{"role": "user", "content": "x"}, {"type": "function_call_output",
         "call_id": "c9", "output": "x"}]}, "input[1].call_id"),
        ("/v1/responses", {"input": [{"role": "user", "content": "x"}, {"type": "function_call", "call_id": "c1",
         "name": "f", "arguments": "{}"}]}, "input[1].call_id"),
    ],
)  # fmt: skip
def test_tool_results_must_answer_the_calls_before_them(server, path, body, param):
    """OpenAI's rule: a tool result answers an earlier call by id, and every call gets its result."""
    extra = {"max_tokens": 1} if path == "/v1/chat/completions" else {"max_output_tokens": 1}
    status, reply, _ = post(server, path, {**extra, **body})
    assert status == 400 and reply["error"]["param"] == param, reply


def test_paired_calls_and_results_are_accepted(server):
    status, reply, _ = post(server, "/v1/chat/completions", {"messages": [*called({}), *USER], "max_tokens": 1})
    assert status == 200, reply
    items = [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
    ]
    status, reply, _ = post(server, "/v1/responses", {"input": items, "max_output_tokens": 1})
    assert status == 200, reply


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        ("/v1/chat/completions", {"messages": USER, "store": True}, "store", "unsupported_value"),
        ("/v1/responses", {"input": "x", "background": True}, "background", "unsupported_value"),
        ("/v1/responses", {"input": "x", "truncation": "auto"}, "truncation", "unsupported_value"),
        ("/v1/responses", {"input": "x", "include": ["file_search_call.results"]}, "include[0]", "unsupported_value"),
        ("/v1/responses", {"input": "x", "reasoning": {"summary": "auto"}}, "reasoning.summary",
         "unsupported_parameter"),
        ("/v1/responses", {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id",
         "previous_response_not_found"),
        ("/v1/responses", {"input": "x", "conversation": "conv_1"}, "conversation", "unsupported_parameter"),
        ("/v1/responses", {"input": "x", "metadata": {"a": 1}}, "metadata.a", None),
        ("/v1/responses", {"input": "x", "metadata": {str(i): "v" for i in range(17)}}, "metadata", None),
    ],
)  # fmt: skip
def test_what_the_server_cannot_honour_has_one_code(server, path, body, param, code):
    extra = {"max_tokens": 1} if path == "/v1/chat/completions" else {"max_output_tokens": 1}
    status, reply, _ = post(server, path, {**extra, **body})
    assert status == 400 and reply["error"]["param"] == param and reply["error"]["code"] == code, reply


def test_what_clients_echo_back_and_no_effect_fields_are_accepted(server):
    history = [
        *USER,
        {"role": "assistant", "content": "Paris.", "refusal": None, "annotations": [], "audio": None},
        {"role": "user", "content": "And Spain?"},
    ]
    body = {"messages": history, "max_tokens": 1, "user": "u1", "safety_identifier": "s", "service_tier": "auto"}
    status, reply, _ = post(server, "/v1/chat/completions", {**body, "store": False, "prompt_cache_key": "k"})
    assert status == 200, reply
    assert reply["system_fingerprint"].startswith("fp_") and reply["usage"]["prompt_tokens_details"] == {
        "cached_tokens": reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    }


def test_chat_logprobs_spell_the_content_exactly(client, server):
    """No end-of-turn token, nothing of a stop string: the entries' bytes are the content's."""
    for stop in (None, [" is"]):
        reply = client.chat.completions.create(
            model="main", messages=USER, max_tokens=12, temperature=0, logprobs=True, top_logprobs=2, stop=stop
        )
        content = reply.choices[0].message.content
        entries = reply.choices[0].logprobs.content
        assert bytes(b for e in entries for b in e.bytes).decode() == content, (content, [e.token for e in entries])
        assert all(len(e.top_logprobs) == 2 for e in entries)
    chunks = client.chat.completions.create(
        model="main", messages=USER, max_tokens=12, temperature=0, logprobs=True, stream=True
    )
    text, spelled = "", b""
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
            spelled += bytes(b for e in chunk.choices[0].logprobs.content for b in e.bytes)
    assert spelled.decode() == text and text


def test_completion_logprobs_hold_the_sampled_token_and_echo_covers_the_prompt(server):
    status, reply, _ = post(
        server,
        "/v1/completions",
        {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0, "logprobs": 0},
    )
    assert status == 200, reply
    lp = reply["choices"][0]["logprobs"]
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert top == {token: value}  # logprobs 0: the sampled token alone
    body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0, "logprobs": 2, "echo": True}
    status, reply, _ = post(server, "/v1/completions", body)
    choice = reply["choices"][0]
    lp = choice["logprobs"]
    _, prompt_ids, _ = post(server, "/tokenize", {"content": "The capital of France is"})
    n_prompt = len(prompt_ids["tokens"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert len(lp["tokens"]) == n_prompt + 3 and choice["text"].startswith("The capital of France is")
    for token, offset in zip(lp["tokens"], lp["text_offset"], strict=True):
        assert choice["text"][offset : offset + len(token)] == token
    assert all(len(top) <= 3 for top in lp["top_logprobs"][1:])  # logprobs + 1 at most


def test_n_choices_queue_past_the_slots_and_over_128_is_400(client):
    """Was: n over --parallel is 400. Now the choices queue for the one slot; only n over 128 (OpenAI's cap) is 400."""
    reply = client.chat.completions.create(model="main", messages=USER, max_tokens=1, n=2)  # one slot
    assert sorted(c.index for c in reply.choices) == [0, 1] and reply.usage.completion_tokens == 2
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="main", messages=USER, max_tokens=1, n=129)
    assert info.value.body["param"] == "n"


@pytest.fixture(scope="module")
def four_slots(tools_server, client_for):
    client = client_for(tools_server)
    return client, client.models.list().data[0].id


def test_n_choices_chat_whole_and_streamed(four_slots):
    client, model = four_slots
    fields = dict(model=model, messages=USER, max_tokens=8, temperature=1.0, seed=11, n=3)
    whole = client.chat.completions.create(**fields)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    again = client.chat.completions.create(**fields)
    assert [c.message.content for c in again.choices] == [c.message.content for c in whole.choices]  # the seed
    assert len({c.message.content for c in whole.choices}) > 1  # each choice its own stream
    assert whole.usage.completion_tokens >= 3 and whole.usage.prompt_tokens < whole.usage.completion_tokens * 10
    one = client.chat.completions.create(**{**fields, "n": 1})
    assert one.choices[0].message.content == whole.choices[0].message.content  # choice 0 draws from the seed
    texts, finished = ["", "", ""], {}
    for chunk in client.chat.completions.create(**fields, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            assert chunk.usage.completion_tokens == whole.usage.completion_tokens
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished[c.index] = c.finish_reason
    assert texts == [c.message.content for c in whole.choices] and set(finished) == {0, 1, 2}


def test_completion_batch_prompts_times_n(four_slots, tools_server):
    client, model = four_slots
    prompts = ["One, two,", "Red, green,"]
    reply = client.completions.create(model=model, prompt=prompts, n=2, max_tokens=3, temperature=1.0, seed=5)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    single = client.completions.create(model=model, prompt=prompts[1], max_tokens=3, temperature=1.0, seed=5)
    assert reply.choices[2].text == single.choices[0].text  # prompt 1, choice 0
    lengths = [len(tools_server.post("/tokenize", {"content": p})[1]["tokens"]) for p in prompts]
    assert reply.usage.prompt_tokens == sum(lengths)  # each prompt once, whatever its n
    assert 4 <= reply.usage.completion_tokens <= 12


def test_streams_carry_the_fingerprint_and_open_with_null_content(server):
    from test_streaming import raw_stream, sse_events

    _, rest = raw_stream(server, {"messages": USER, "max_tokens": 2, "stream": True})
    chunks = [json.loads(f[6:]) for f in sse_events(rest)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["system_fingerprint"] == chunks[0]["system_fingerprint"].strip() for c in chunks)


def test_continue_final_message_and_add_generation_prompt(server):
    prefix = [*USER, {"role": "assistant", "content": "The capital of France is"}]
    status, body, _ = post(server, "/apply-template", {"messages": prefix, "continue_final_message": True})
    assert status == 200 and body["prompt"].endswith("<|im_start|>assistant\nThe capital of France is"), body
    status, body, _ = post(server, "/apply-template", {"messages": USER, "add_generation_prompt": False})
    assert body["prompt"].endswith("France?<|im_end|>\n")
    for bad in ({"continue_final_message": True, "add_generation_prompt": True, "messages": prefix},
                {"continue_final_message": True, "messages": USER}):  # fmt: skip
        status, body, _ = post(server, "/v1/chat/completions", {**bad, "max_tokens": 1})
        assert status == 400 and body["error"]["param"] == "continue_final_message"
    status, body, _ = post(
        server, "/v1/chat/completions",
        {"messages": prefix, "continue_final_message": True, "max_tokens": 3, "temperature": 0},
    )  # fmt: skip
    assert status == 200 and not body["choices"][0]["message"]["content"].startswith("The capital")


def test_responses_objects_carry_every_required_field(client):
    r = client.responses.create(
        model="main", input="Hi", max_output_tokens=4, temperature=0,
        include=["message.output_text.logprobs"], top_logprobs=2, safety_identifier="s1", prompt_cache_key="k",
    )  # fmt: skip
    body = r.model_dump()
    for key in ("completed_at", "presence_penalty", "frequency_penalty", "top_logprobs", "max_tool_calls",
                "service_tier", "safety_identifier", "prompt_cache_key"):  # fmt: skip
        assert key in body, key
    assert body["top_logprobs"] == 2 and body["safety_identifier"] == "s1" and body["service_tier"] == "default"
    assert (body["completed_at"] is not None) == (r.status == "completed")
    part = r.output[-1].content[0]
    assert part.logprobs and bytes(b for e in part.logprobs for b in e.bytes).decode() == part.text
    assert all(len(e.top_logprobs) == 2 for e in part.logprobs)
    events = list(client.responses.create(
        model="main", input="Hi", max_output_tokens=4, temperature=0, stream=True,
        include=["message.output_text.logprobs"],
    ))  # fmt: skip
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas and all(e.logprobs for e in deltas)
    created = next(e for e in events if e.type == "response.created").response.model_dump()
    assert "completed_at" in created and created["completed_at"] is None


def test_max_tool_calls_caps_the_calls(four_slots):
    """Over 16 seeds the model, uncapped, calls more than twice at least once; with max_tool_calls=2 no seed
    passes two. The tool takes no arguments, so every call is `{}` and the budget cannot run out inside one."""
    client, model = four_slots
    tool = {"type": "function", "name": "ping", "parameters": {"type": "object", "additionalProperties": False}}

    def calls(seed: int, cap: int | None) -> list:
        r = client.responses.create(
            model=model, input="Ping three times.", tools=[tool], tool_choice="required", max_output_tokens=160,
            temperature=1.0, extra_body={"seed": seed}, **({} if cap is None else {"max_tool_calls": cap}),
        )  # fmt: skip
        assert r.max_tool_calls == cap and (cap is None or r.status == "completed")
        made = [item for item in r.output if item.type == "function_call"]
        assert made and all(call.arguments == "{}" for call in made)
        return made

    # One at a time: a seeded request alone in the batch draws the same tokens on every run (batched rows
    # may not), so which seeds go past two calls does not change from run to run (3 of these 16 here).
    uncapped = [len(calls(seed, None)) for seed in range(16)]
    chatty = [seed for seed, made in enumerate(uncapped) if made > 2]
    assert chatty, f"no seed made more than two calls, so the cap went untested: {uncapped}"
    capped = [len(calls(seed, 2)) for seed in chatty]
    assert max(capped) == 2 and min(capped) >= 1, capped
