"""Streaming shape, busy slots (429 or the FIFO wait), and a client that disconnects mid-stream."""

from __future__ import annotations

import json
import socket
import threading
import time

from server_process import API_KEY

USER = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]


def raw_stream(server, body, path="/v1/chat/completions"):
    """The SSE lines of one streamed request, read over a plain socket (what any client sees)."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        f"Authorization: Bearer {server.api_key or ''}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(head.encode() + payload)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode(), rest


def sse_events(rest: bytes) -> list[str]:
    """Undo chunked transfer-encoding, then split the frames."""
    body, buf = b"", rest
    while buf:
        size_line, _, buf = buf.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        body, buf = body + buf[:size], buf[size + 2 :]
    frames = body.decode().split("\n\n")
    assert frames[-1] == ""
    for frame in frames[:-1]:
        assert_no_empty_text_delta(frame)
    return [f for f in frames[:-1]]


def assert_no_empty_text_delta(frame: str) -> None:
    """A chat chunk carries text only when there is text (llama.cpp's own stream check refuses `"content": ""`)."""
    data = next((line[6:] for line in frame.split("\n") if line.startswith("data: {")), None)
    for choice in json.loads(data).get("choices") or [] if data else []:
        for key in ("content", "reasoning_content"):
            assert (choice.get("delta") or {}).get(key) != "", f"an empty {key} delta: {frame}"


def test_chat_stream_shape_over_raw_http(server):
    body = {
        "messages": USER,
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    head, rest = raw_stream(server, body)
    assert head.startswith("HTTP/1.1 200") and "text/event-stream" in head
    frames = sse_events(rest)
    assert all(f.startswith("data: ") for f in frames)
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}  # no text yet: no empty text
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])  # OpenAI: null until the last chunk
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-2]["choices"][0]["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-2])
    _, whole, _ = server.post("/v1/chat/completions", {**body, "stream": False, "stream_options": None})
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]


def test_chat_stream_with_the_openai_client(client):
    stream = client.chat.completions.create(
        model="client-main", messages=USER, max_tokens=5, temperature=0, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 1
    assert all(c.usage is None for c in chunks)  # no include_usage, no usage chunk


def test_stream_stops_with_finish_reason_stop(client):
    whole = (
        client.chat.completions.create(model="main", messages=USER, max_tokens=8, temperature=0)
        .choices[0]
        .message.content
    )
    word = whole.split()[2]
    chunks = list(
        client.chat.completions.create(
            model="main", messages=USER, max_tokens=8, temperature=0, stream=True, stop=[word]
        )
    )
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole[: whole.index(word)]


def _stream_until_first_token(server, body):
    """Open a streaming request and return the socket once its first content chunk has arrived."""
    payload = json.dumps({**body, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    sock.sendall(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nAuthorization: Bearer {server.api_key or ''}\r\n\r\n"
        ).encode()
        + payload
    )
    data = b""
    while data.count(b"data: ") < 2:
        data += sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 200"), data[:300]
    return sock


def test_all_slots_busy_is_429_inference_busy(server):
    sock = _stream_until_first_token(server, {"messages": USER, "max_tokens": 400, "temperature": 0})
    try:
        status, body, _ = server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 2})
        assert status == 429
        assert body["error"]["type"] == "inference_busy"
        assert set(body["error"]) == {"message", "type", "param", "code"}
        status, body, _ = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 429 and body["error"]["type"] == "inference_busy"
        assert server.metric("lexi_slots_busy") == 1
    finally:
        sock.close()


def test_disconnect_mid_stream_frees_the_slot_at_once(server):
    before = server.metric("lexi_requests_total")
    sock = _stream_until_first_token(server, {"messages": USER, "max_tokens": 2000, "temperature": 0})
    sock.close()
    deadline = time.monotonic() + 3.0
    while server.metric("lexi_slots_busy") != 0:
        assert time.monotonic() < deadline, "the aborted request still holds its slot"
        time.sleep(0.05)
    started = time.monotonic()
    status, body, _ = server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 2, "temperature": 0})
    assert status == 200, body
    assert time.monotonic() - started < 30
    assert server.metric("lexi_requests_total") > before


def test_disconnect_of_a_non_streaming_request_frees_the_slot(server):
    payload = json.dumps({"messages": USER, "max_tokens": 2000, "temperature": 0}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nAuthorization: Bearer {server.api_key}\r\n\r\n"
        ).encode()
        + payload
    )
    deadline = time.monotonic() + 30
    while server.metric("lexi_slots_busy") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sock.close()
    deadline = time.monotonic() + 3.0
    while server.metric("lexi_slots_busy") != 0:
        assert time.monotonic() < deadline, "the abandoned request still holds its slot"
        time.sleep(0.05)
    assert server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 1})[0] == 200


def test_queue_wait_answers_simultaneous_requests_one_after_the_other(queued_server):
    results: list = [None, None]
    barrier = threading.Barrier(2)

    def send(i):
        barrier.wait()
        started = time.monotonic()
        status, body, _ = queued_server.post(
            "/v1/chat/completions", {"messages": USER, "max_tokens": 6, "temperature": 0}, timeout=200
        )
        results[i] = (status, body, time.monotonic() - started)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0] for r in results] == [200, 200], results
    assert results[0][1]["choices"][0]["message"] == results[1][1]["choices"][0]["message"]
    assert all(r[1]["usage"]["completion_tokens"] == 6 for r in results)


def test_queue_wait_is_first_come_first_served(queued_server):
    """A long request holds the one slot; two more queue up and are admitted in arrival order."""
    done: list[str] = []
    lock = threading.Lock()

    def send(name, max_tokens, delay):
        time.sleep(delay)
        status, _, _ = queued_server.post(
            "/v1/chat/completions", {"messages": USER, "max_tokens": max_tokens, "temperature": 0}, timeout=200
        )
        assert status == 200
        with lock:
            done.append(name)

    plan = [("first", 24, 0.0), ("second", 2, 0.4), ("third", 2, 0.8)]
    threads = [threading.Thread(target=send, args=p) for p in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done == ["first", "second", "third"]


def test_a_request_that_waits_past_queue_wait_is_429(short_wait_server):
    sock = _stream_until_first_token(short_wait_server, {"messages": USER, "max_tokens": 2000, "temperature": 0})
    try:
        started = time.monotonic()
        status, body, _ = short_wait_server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 2})
        waited = time.monotonic() - started
        assert status == 429 and body["error"]["type"] == "inference_busy"
        assert 1.4 <= waited < 10, waited
    finally:
        sock.close()
    deadline = time.monotonic() + 3.0
    while short_wait_server.metric("lexi_slots_busy") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert short_wait_server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 2})[0] == 200


def test_without_queue_wait_one_of_two_simultaneous_requests_is_429(server):
    results: list = [None, None]
    barrier = threading.Barrier(2)

    def send(i):
        barrier.wait()
        results[i] = server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 40, "temperature": 0})[:2]

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r[0] for r in results) == [200, 429], results
    busy = next(r[1] for r in results if r[0] == 429)
    assert busy["error"]["type"] == "inference_busy"


def test_completions_stream(server):
    body = {
        "prompt": "The capital of France is",
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    head, rest = raw_stream(server, body, "/v1/completions")
    frames = sse_events(rest)
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens"] == 5 and chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    _, whole, _ = server.post("/v1/completions", {**body, "stream": False, "stream_options": None})
    assert text == whole["choices"][0]["text"]


def test_api_key_constant(server):
    assert server.api_key == API_KEY
