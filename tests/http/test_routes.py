"""/v1/completions, llama.cpp's /tokenize, /detokenize, /apply-template, and /metrics."""

from __future__ import annotations

import pytest


def test_completion_text_echo_and_token_prompt(server, client):
    reply = client.completions.create(model="main", prompt="The capital of France is", max_tokens=4, temperature=0)
    text = reply.choices[0].text
    assert reply.object == "text_completion" and reply.usage.completion_tokens == 4 and text.strip()
    _, ids, _ = server.post("/tokenize", {"content": "The capital of France is"})
    by_ids = client.completions.create(model="main", prompt=ids["tokens"], max_tokens=4, temperature=0)
    assert by_ids.choices[0].text == text
    assert by_ids.usage.prompt_tokens == len(ids["tokens"]) == reply.usage.prompt_tokens
    echoed = client.completions.create(
        model="main", prompt="The capital of France is", max_tokens=4, temperature=0, echo=True
    )
    assert echoed.choices[0].text == "The capital of France is" + text


def test_completion_logprobs(client):
    reply = client.completions.create(model="main", prompt="1, 2, 3,", max_tokens=3, temperature=0, logprobs=2)
    lp = reply.choices[0].logprobs
    assert "".join(lp.tokens) == reply.choices[0].text
    assert len(lp.token_logprobs) == 3 and all(len(t) == 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert max(top.values()) == pytest.approx(logprob) and top[token] == pytest.approx(logprob)


def test_tokenize_detokenize_round_trip(server, smollm2_tokenizer):
    text = "Hello world, ça va? <|im_start|>"
    status, body, _ = server.post("/tokenize", {"content": text})
    assert status == 200 and body["tokens"] == smollm2_tokenizer.encode(text, special=True)
    assert smollm2_tokenizer.token_to_id("<|im_start|>") in body["tokens"]
    _, pieces, _ = server.post("/tokenize", {"content": "Hello world", "with_pieces": True})
    assert "".join(p["piece"] for p in pieces["tokens"]) == "Hello world"
    # a token holding part of a UTF-8 character comes back as its bytes (llama.cpp's shape), not as U+FFFD
    _, pieces, _ = server.post("/tokenize", {"content": "é😀", "with_pieces": True})
    raw = b"".join(bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces["tokens"])
    assert raw.decode() == "é😀" and any(isinstance(p["piece"], list) for p in pieces["tokens"]), pieces
    status, back, _ = server.post("/detokenize", {"tokens": body["tokens"]})
    assert status == 200 and back["content"] == text
    status, bad, _ = server.post("/detokenize", {"tokens": [10**9]})
    assert status == 400 and bad["error"]["param"] == "tokens"
    status, bad, _ = server.post("/tokenize", {"text": "x"})
    assert status == 400 and bad["error"]["param"] == "text"  # not a field of /tokenize
    status, bad, _ = server.post("/tokenize", {})
    assert status == 400 and bad["error"]["param"] == "content"


@pytest.mark.peer
def test_tokenize_matches_llama_cpp(server, smollm2_path):
    from llama_cpp import Llama

    llm = Llama(model_path=str(smollm2_path), vocab_only=True, verbose=False)
    for text in ("Hello world", "  spaces\n\nand lines", "日本語とemoji 🎉", "<|im_start|>user\nhi<|im_end|>"):
        _, body, _ = server.post("/tokenize", {"content": text})
        assert body["tokens"] == llm.tokenize(text.encode(), add_bos=False, special=True), text


def test_apply_template(server):
    status, body, _ = server.post(
        "/apply-template", {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}
    )
    assert status == 200
    assert body["prompt"] == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    status, body, _ = server.post("/apply-template", {"messages": [{"role": "user", "content": "U"}], "model": "nope"})
    assert status == 400 and body["error"]["param"] == "model", body  # as chat answers it


def test_metrics_count_requests_tokens_and_slots(server):
    before_prompt = server.metric("lexi_prompt_tokens_total")
    before_ttft = server.metric("lexi_time_to_first_token_seconds_count")
    status, body, _ = server.post(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    )
    assert status == 200
    assert server.metric("lexi_prompt_tokens_total") - before_prompt == body["usage"]["prompt_tokens"]
    assert server.metric("lexi_time_to_first_token_seconds_count") == before_ttft + 1
    _, text, headers = server.get("/metrics")
    assert headers["Content-Type"].startswith("text/plain")
    for name in (
        "lexi_requests_total",
        "lexi_completion_tokens_total",
        "lexi_queue_depth",
        "lexi_slots_busy",
        "lexi_slots_total",
    ):
        assert f"\n{name}" in text, name
    assert 'lexi_requests_total{route="chat_completions",status="200"}' in text
    assert server.metric("lexi_slots_total") == 1 and server.metric("lexi_slots_busy") == 0
