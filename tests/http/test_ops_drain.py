"""SIGTERM / SIGINT drain over real server processes with requests in flight, and the load progress bar."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import socket
import struct
import subprocess
import termios
import threading
import time

import openai
import pytest
from server_process import LEXI, Server, free_port, http, port_open

LONG = 1500  # tokens: far more than a second's worth, so a 1 s --shutdown-timeout must stop these


class RawStream:
    """A streamed POST over a plain socket, read as it arrives (what any SSE client sees)."""

    def __init__(self, server: Server, path: str, body: dict) -> None:
        payload = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        self.sock.sendall(head.encode() + payload)
        self.data = b""

    def read_until(self, marker: bytes) -> None:
        while marker not in self.data:
            chunk = self.sock.recv(65536)
            assert chunk, f"the stream ended before {marker!r}: {self.data[-500:]!r}"
            self.data += chunk

    def read_to_end(self) -> tuple[str, list[str]]:
        """(status line, SSE frames) once the server closed the connection."""
        while chunk := self.sock.recv(65536):
            self.data += chunk
        self.sock.close()
        head, _, rest = self.data.partition(b"\r\n\r\n")
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            body, rest = body + rest[:size], rest[size + 2 :]
        text = body.decode()
        assert text.endswith("\n\n"), f"the stream was cut, not ended: {text[-300:]!r}"
        return head.decode().split("\r\n")[0], text[:-2].split("\n\n")


def data_of(frame: str) -> dict | str:
    payload = next(line[6:] for line in frame.split("\n") if line.startswith("data: "))
    return payload if payload == "[DONE]" else json.loads(payload)


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def drain_servers():
    """Launched together, so their model loads overlap; each test ends its own server with a signal."""
    launched = {
        "patient": Server("--alias", "ops", "--shutdown-timeout", "120", "--parallel", "2"),
        "impatient": Server("--shutdown-timeout", "1", "--parallel", "3", "--queue-wait", "120"),
        "hurried": Server("--shutdown-timeout", "300", "--parallel", "1"),
    }
    for server in launched.values():
        server.launch()
    yield launched
    for server in launched.values():
        server.stop()


def test_sigint_lets_a_running_stream_finish_and_refuses_new_requests(drain_servers):
    server = drain_servers["patient"].wait_ready()
    body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 40, "ignore_eos": True}
    stream = RawStream(server, "/v1/chat/completions", {**body, "stream": True, "temperature": 0})
    stream.read_until(b'"content"')
    server.proc.send_signal(signal.SIGINT)

    wait_for(lambda: http("GET", server.url + "/health")[0] == 503)
    status, health, _ = http("GET", server.url + "/health")
    assert health["error"]["code"] == "server_shutting_down"
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="ops", messages=body["messages"], max_tokens=2)
    assert refused.value.status_code == 503 and refused.value.body["code"] == "server_shutting_down"
    status, answer, _ = http("POST", server.url + "/v1/responses", {"input": "Hi", "max_output_tokens": 2})
    assert status == 503 and answer["error"]["type"] == "unavailable_error"
    status, _, _ = http("GET", server.url + "/v1/models")
    assert status == 200  # what generates nothing is still answered while the stream finishes

    line, frames = stream.read_to_end()
    assert line.endswith("200 OK") and frames[-1] == "data: [DONE]"
    chunks = [data_of(f) for f in frames[:-1]]
    assert not any("error" in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert server.proc.wait(60) == 0
    out = server.output()
    assert "SIGINT: shutting down" in out and "stopped" in out


def test_sigterm_past_the_timeout_ends_every_request_with_an_error_it_can_read(drain_servers):
    server = drain_servers["impatient"].wait_ready()
    long = {"max_tokens": LONG, "ignore_eos": True, "temperature": 0}
    messages = [{"role": "user", "content": "Hi"}]
    chat = RawStream(server, "/v1/chat/completions", {"messages": messages, **long, "stream": True})
    responses = RawStream(
        server, "/v1/responses", {"input": "Hi", "max_output_tokens": LONG, "ignore_eos": True, "stream": True}
    )
    chat.read_until(b'"content"')
    responses.read_until(b"response.output_text.delta")
    answers = {}

    def whole(name: str, path: str, body: dict) -> None:
        answers[name] = http("POST", server.url + path, body, timeout=120)

    threads = [  # one running, one waiting in the queue (--parallel 3)
        threading.Thread(target=whole, args=("completion", "/v1/completions", {"prompt": "Once", **long})),
        threading.Thread(target=whole, args=("queued", "/v1/completions", {"prompt": "Twice", **long})),
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: server.metric("lexi_slots_busy") == 3 and server.metric("lexi_queue_depth") == 1)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)

    line, frames = chat.read_to_end()
    assert line.endswith("200 OK") and "[DONE]" not in frames[-1]
    error = data_of(frames[-1])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] == "unavailable_error"
    assert all("finish_reason" not in f or '"finish_reason":null' in f for f in frames[:-1])
    _, frames = responses.read_to_end()
    assert frames[-1].startswith("event: error\n") and data_of(frames[-1])["code"] == "server_shutting_down"
    for thread in threads:
        thread.join(60)
    for name in ("completion", "queued"):
        status, body, _ = answers[name]
        assert status == 503 and body["error"]["code"] == "server_shutting_down", (name, body)
    assert server.proc.wait(60) == 0
    assert time.monotonic() - started < 30
    assert "stopped 4 request(s) still running" in server.output()


def test_a_second_signal_stops_running_requests_at_once(drain_servers):
    server = drain_servers["hurried"].wait_ready()
    body = {"prompt": "Once upon a time", "max_tokens": LONG, "ignore_eos": True, "stream": True}
    stream = RawStream(server, "/v1/completions", body)
    stream.read_until(b'"text"')
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "shutting down" in server.output())
    server.proc.send_signal(signal.SIGINT)
    _, frames = stream.read_to_end()
    assert data_of(frames[-1])["error"]["code"] == "server_shutting_down"
    assert server.proc.wait(60) == 0
    assert time.monotonic() - started < 30  # not the 300 s of --shutdown-timeout
    assert "SIGINT again: stopping the running requests now" in server.output()


def test_a_signal_while_the_model_loads_stops_the_server_cleanly():
    server = Server().launch()
    try:
        wait_for(lambda: port_open(server.port), timeout=120)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(60) == 0
        assert "SIGTERM: shutting down" in server.output()
    finally:
        server.stop()


def test_progress_bar_on_a_terminal_and_sigterm_when_idle():
    """On a TTY the load draws a tqdm bar over the tensors; an idle server stops at once on SIGTERM."""
    port = free_port()
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a width
    proc = subprocess.Popen(
        [LEXI, "serve", "--port", str(port)], stdin=child, stdout=child, stderr=child, env={**os.environ}
    )
    os.close(child)
    output = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:  # the terminal closed with the process
                return
            if not data:
                return
            output.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: b"ready" in output, timeout=300)
        assert port_open(port)
        text = output.decode(errors="replace")
        assert "\rloading SmolLM2-135M-Instruct.Q4_1.gguf:" in text
        assert "/272 [" in text and "tensor/s]" in text and "%|" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
        os.close(main)
    assert "SIGTERM: shutting down" in output.decode(errors="replace")
