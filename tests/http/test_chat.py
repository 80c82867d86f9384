"""Chat completions on real servers: content forms, template kwargs, reasoning, history, usage, sampling."""

from __future__ import annotations

import openai
import pytest

USER = [{"role": "user", "content": "What is the capital of France?"}]


def chat(server, **fields):
    body = {"messages": USER, "max_tokens": 4, "temperature": 0, **fields}
    return server.post("/v1/chat/completions", body)


def ok(server, **fields):
    status, body, _ = chat(server, **fields)
    assert status == 200, body
    return body


def test_string_and_text_part_content_give_the_same_prompt(server):
    """Text parts reach the model apart, joined with a newline as vLLM joins them ("What is" + "the best book"
    never becomes "What isthe best book"); the bundled ChatML template does not read parts itself."""
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": "of France?"}],
        }
    ]
    joined = [{"role": "user", "content": "What is the capital\nof France?"}]
    # The second request hits the prefix cache; the server runs --deterministic, so the greedy text is the same.
    a, b = ok(server, messages=joined), ok(server, messages=parts)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
    status, prompt, _ = server.post("/apply-template", {"messages": parts})
    _, plain, _ = server.post("/apply-template", {"messages": joined})
    assert status == 200 and "What is the capital\nof France?" in prompt["prompt"]
    assert prompt["prompt"] == plain["prompt"]


def test_usage_prompt_tokens_is_the_rendered_prompt(server):
    body = ok(server)
    _, prompt, _ = server.post("/apply-template", {"messages": USER})
    _, tokens, _ = server.post("/tokenize", {"content": prompt["prompt"]})
    assert body["usage"]["prompt_tokens"] == len(tokens["tokens"])
    assert prompt["prompt"].startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt["prompt"].endswith("<|im_start|>assistant\n")
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


@pytest.mark.peer
def test_prompt_tokens_match_llama_cpp(server, smollm2_path):
    """The rendered prompt tokenized by llama.cpp (special tokens parsed) has as many tokens as usage says."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(smollm2_path), vocab_only=True, verbose=False)
    for messages in (
        USER,
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Zdravo, ça va? 日本"}],
    ):
        status, body, _ = chat(server, messages=messages, max_tokens=1)
        assert status == 200
        _, prompt, _ = server.post("/apply-template", {"messages": messages})
        ids = llm.tokenize(prompt["prompt"].encode(), add_bos=False, special=True)
        assert body["usage"]["prompt_tokens"] == len(ids)


def test_explicit_zero_temperature_is_deterministic(server, client):
    texts = {
        client.chat.completions.create(model="main", messages=USER, max_tokens=8, temperature=0, seed=s)
        .choices[0]
        .message.content
        for s in (1, 2, 3)
    }
    assert len(texts) == 1


def test_explicit_zero_overrides_server_default_temperature(thinking_server):
    """The thinking server defaults to --temp 1.5 (top-k/p off): seeds differ unless temperature 0 is sent."""
    msgs = [{"role": "user", "content": "Write a long story about a dragon."}]
    hot = {
        ok(thinking_server, messages=msgs, temperature=None, seed=s, max_tokens=12, reasoning_effort="none")["choices"][
            0
        ]["message"]["content"]
        for s in (1, 2, 3)
    }
    assert len(hot) > 1
    cold = {
        ok(thinking_server, messages=msgs, temperature=0, seed=s, max_tokens=12, reasoning_effort="none")["choices"][0][
            "message"
        ]["content"]
        for s in (1, 2, 3)
    }
    assert len(cold) == 1


def test_server_n_predict_default_and_request_override(thinking_server):
    body = ok(
        thinking_server,
        max_tokens=None,
        reasoning_effort="none",
        messages=[{"role": "user", "content": "Tell me a long story."}],
    )
    assert body["usage"]["completion_tokens"] == 3 and body["choices"][0]["finish_reason"] == "length"
    body = ok(
        thinking_server,
        max_tokens=6,
        reasoning_effort="none",
        messages=[{"role": "user", "content": "Tell me a long story."}],
    )
    assert body["usage"]["completion_tokens"] == 6


def test_same_seed_same_text_at_temperature_one(server):
    a = ok(server, temperature=1.0, seed=1234, max_tokens=10)
    b = ok(server, temperature=1.0, seed=1234, max_tokens=10)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


def test_max_completion_tokens_and_finish_length(server):
    body = ok(
        server,
        max_tokens=None,
        max_completion_tokens=3,
        messages=[{"role": "user", "content": "Tell me a long story."}],
    )
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"


def test_stop_string_and_list(server):
    full = ok(server, max_tokens=8)["choices"][0]["message"]["content"]
    word = full.split()[1]  # a word from the middle of the greedy answer
    assert len(full.split()) >= 3, full
    for stop in (word, ["zzz-never", word]):
        body = ok(server, max_tokens=8, stop=stop)
        assert body["choices"][0]["message"]["content"] == full[: full.index(word)]
        assert body["choices"][0]["finish_reason"] == "stop"


def test_logit_bias_by_token_id(server):
    _, first, _ = server.post("/tokenize", {"content": ok(server, max_tokens=1)["choices"][0]["message"]["content"]})
    banned = str(first["tokens"][0])
    body = ok(server, max_tokens=1, logprobs=True, logit_bias={banned: -100})
    assert body["choices"][0]["logprobs"]["content"][0]["token"] != ""
    _, again, _ = server.post("/tokenize", {"content": body["choices"][0]["message"]["content"]})
    assert again["tokens"][:1] != first["tokens"][:1]
    _, forced, _ = server.post("/tokenize", {"content": " banana"})
    body = ok(server, max_tokens=3, logit_bias={str(forced["tokens"][0]): 100})
    assert body["choices"][0]["message"]["content"] == " banana" * 3
    status, body, _ = chat(server, logit_bias={"999999": 1})
    assert status == 400


def test_logprobs_and_top_logprobs(server, client):
    reply = client.chat.completions.create(
        model="main", messages=USER, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
    )
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert "".join(c.token for c in content) == reply.choices[0].message.content
    for item in content:
        assert len(item.top_logprobs) == 3
        assert item.top_logprobs[0].token == item.token  # greedy: the chosen token is the best one
        assert item.top_logprobs[0].logprob == pytest.approx(item.logprob)
        assert item.logprob <= 0
        assert [t.logprob for t in item.top_logprobs] == sorted((t.logprob for t in item.top_logprobs), reverse=True)
    assert ok(server)["choices"][0]["logprobs"] is None


def test_penalties_are_accepted_and_checked(server):
    assert ok(server, presence_penalty=1.5, frequency_penalty=-1)["choices"]
    status, body, _ = chat(server, frequency_penalty=3)
    assert status == 400 and body["error"]["param"] == "frequency_penalty"


@pytest.mark.parametrize("key", ["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"])
def test_reserved_template_kwargs_are_400(server, key):
    status, body, _ = chat(server, chat_template_kwargs={key: "x"})
    assert status == 400 and body["error"]["param"] == "chat_template_kwargs"


@pytest.mark.parametrize("value", [[1], {"a": 1}])
def test_non_scalar_template_kwargs_are_400(server, value):
    status, body, _ = chat(server, chat_template_kwargs={"anything": value})
    assert status == 400 and body["error"]["param"] == "chat_template_kwargs"


def test_template_kwargs_merge_over_server_defaults(thinking_server):
    _, body, _ = thinking_server.post("/apply-template", {"messages": USER})
    assert "[greeting=hello][effort=xhigh]" in body["prompt"] and body["prompt"].endswith("<think>\n")
    _, body, _ = thinking_server.post(
        "/apply-template", {"messages": USER, "chat_template_kwargs": {"greeting": "hey"}}
    )
    assert "[greeting=hey][effort=xhigh]" in body["prompt"] and body["prompt"].endswith("<think>\n")
    _, body, _ = thinking_server.post(
        "/apply-template", {"messages": USER, "chat_template_kwargs": {"enable_thinking": False}}
    )
    assert body["prompt"].endswith("<|im_start|>assistant\n")
    _, body, _ = thinking_server.post("/apply-template", {"messages": USER, "reasoning_effort": "low"})
    assert "[effort=low]" in body["prompt"] and body["prompt"].endswith("<think>\n")
    _, body, _ = thinking_server.post("/apply-template", {"messages": USER, "reasoning_effort": "none"})
    assert "[effort=none]" in body["prompt"] and body["prompt"].endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("level", ["minimal", "low", "medium", "high", "xhigh"])
def test_reasoning_effort_on_a_template_without_a_thinking_switch_is_501(server, level):
    status, body, _ = chat(server, reasoning_effort=level)
    assert status == 501
    assert body["error"]["param"] == "reasoning_effort"
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_reasoning_effort_none_and_bad_value(server):
    assert ok(server, reasoning_effort="none")["choices"]
    status, body, _ = chat(server, reasoning_effort="max")
    assert status == 400 and body["error"]["param"] == "reasoning_effort"


def test_thinking_output_goes_to_reasoning_content(thinking_server, client_for):
    """The template opens <think> in the prompt; SmolLM2 never closes it, so all of it is reasoning."""
    c = client_for(thinking_server)
    reply = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=USER, max_tokens=5, temperature=0)
    message = reply.choices[0].message
    assert message.content == ""
    assert message.reasoning_content and message.reasoning_content.strip()
    plain = c.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=USER, max_tokens=5, temperature=0, reasoning_effort="none"
    )
    assert plain.choices[0].message.content and getattr(plain.choices[0].message, "reasoning_content", None) is None
    stream = c.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=USER, max_tokens=5, temperature=0, stream=True
    )
    chunks = list(stream)
    reasoning = "".join(getattr(ch.choices[0].delta, "reasoning_content", None) or "" for ch in chunks if ch.choices)
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert content == "" and reasoning == message.reasoning_content


def test_reasoning_format_none_keeps_raw_text(queued_server, thinking_server):
    kwargs = {"reasoning_effort": "xhigh", "enable_thinking": True, "greeting": "hello"}  # the thinking server's
    body = {"messages": USER, "max_tokens": 5, "temperature": 0, "chat_template_kwargs": kwargs}
    _, raw, _ = queued_server.post("/v1/chat/completions", body)
    _, split, _ = thinking_server.post("/v1/chat/completions", body)
    assert "reasoning_content" not in raw["choices"][0]["message"]
    # raw keeps the text exactly as generated; the split drops the whitespace just inside <think>
    assert raw["choices"][0]["message"]["content"].strip() == split["choices"][0]["message"]["reasoning_content"]
    assert split["choices"][0]["message"]["content"] == ""


def test_assistant_reasoning_content_is_accepted_and_left_out_of_the_prompt(server):
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "SECRET-THOUGHT"},
        {"role": "user", "content": "How are you?"},
    ]
    status, body, _ = server.post("/apply-template", {"messages": history})
    assert status == 200 and "SECRET-THOUGHT" not in body["prompt"] and "Hello!" in body["prompt"]
    assert ok(server, messages=history)["choices"]
    for role in ("user", "system", "tool"):
        msg = {"role": role, "content": "x", "reasoning_content": "r", "tool_call_id": "1"}
        status, body, _ = chat(server, messages=[msg])
        assert status == 400 and body["error"]["param"] == "messages[0].reasoning_content"


def test_tool_message_with_name_and_tool_call_id(server):
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "sunny"},
    ]
    status, body, _ = server.post("/apply-template", {"messages": history})
    # ChatML renders no tools: the call is written into the assistant turn, the result into a user turn
    call = '<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {}}\n</tool_call><|im_end|>'
    result = "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>"
    assert status == 200 and call + "\n" + result in body["prompt"], body
    assert ok(server, messages=history)["choices"]
    status, body, _ = chat(server, messages=[{"role": "tool", "content": "sunny"}])
    assert status == 400 and body["error"]["param"] == "messages[0].tool_call_id"


def test_n_over_128_is_400(client):
    """Was: n=2 on this one-slot server is 400; choices now queue for slots, and only n past 128 is refused."""
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="main", messages=USER, max_tokens=1, n=129)
    assert info.value.body["param"] == "n"


def test_context_overflow_is_400(server):
    status, body, _ = chat(server, max_tokens=5000)
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
