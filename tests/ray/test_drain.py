"""SIGTERM to `serve --replicas 2` lets a running stream finish (Ray Serve's graceful shutdown, within
--shutdown-timeout) before the command stops Ray and exits 0."""

from __future__ import annotations

import http.client
import json
import threading

from replica_server import RayServer

BODY = {
    "messages": [{"role": "user", "content": "Tell me a story."}],
    "max_tokens": 160, "ignore_eos": True, "temperature": 0, "stream": True,
}  # fmt: skip


def test_a_running_stream_finishes_after_sigterm():
    server = RayServer("--replicas", "2", "--parallel", "1", "--shutdown-timeout", "120").launch()
    frames: list[str] = []
    first = threading.Event()

    def stream() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=180)
        try:
            connection.request("POST", "/v1/chat/completions", json.dumps(BODY), {"Content-Type": "application/json"})
            reply = connection.getresponse()
            while line := reply.readline():
                if line.startswith(b"data: "):
                    frames.append(line[6:].decode().strip())
                    first.set()
        finally:
            connection.close()
            first.set()

    try:
        server.wait_ready()
        reader = threading.Thread(target=stream)
        reader.start()
        assert first.wait(120) and frames, "the stream never started"
    finally:
        status, output = server.stop_cleanly(timeout=180)  # SIGTERM while the stream runs
    reader.join(30)
    assert status == 0 and "lexi-engine: stopped" in output, output[-3000:]
    assert frames[-1] == "[DONE]", frames[-3:]
    finishes = [c["finish_reason"] for f in frames[:-1] for c in json.loads(f)["choices"] if c["finish_reason"]]
    assert finishes == ["length"], frames[-3:]  # all 160 tokens, not an error frame
