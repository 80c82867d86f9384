"""`lexi-engine serve --replicas 2 --parallel 1` on a real local Ray: the same API as one server, from two
replicas, each with its own engine and one slot; a replica killed mid-request is replaced by Ray."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from replica_server import RayServer
from server_process import http as request

KEY = "sk-ray-key"
USER = [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]
LONG = {"messages": USER, "max_tokens": 400, "ignore_eos": True, "temperature": 0, "stream": True}


@pytest.fixture(scope="module")
def ray_server():
    server = RayServer(
        "--replicas", "2", "--parallel", "1", "--queue-wait", "0",
        "--alias", "main", "--alias", "client-main", "--api-key", KEY, "--log-format", "json", api_key=KEY,
    ).launch()  # fmt: skip
    try:
        yield server.wait_ready()
    finally:
        status, output = server.stop_cleanly()
    assert status == 0 and "lexi-engine: stopped" in output, output[-3000:]


@pytest.fixture(scope="module")
def client(ray_server):
    return openai.OpenAI(base_url=ray_server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def replicas(server) -> dict[str, int]:
    """replica id -> pid, from every replica's `lexi_replica_info` series in /metrics."""
    _, text, _ = server.get("/metrics")
    found = re.findall(r'lexi_replica_info\{pid="(\d+)",replica="([^"]+)"\}', text)
    return {replica: int(pid) for pid, replica in found}


class Stream:
    """A streamed chat request read on a thread: its replica, and how it ended."""

    def __init__(self, server, body=LONG) -> None:
        self.server, self.body = server, body
        self.started = threading.Event()
        self.ended = threading.Event()
        self.replica = self.status = self.error = None
        self.frames: list[str] = []
        self.hang_up = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
        try:
            connection.request("POST", "/v1/chat/completions", json.dumps(self.body), headers)
            reply = connection.getresponse()
            self.status, self.replica = reply.status, reply.getheader("x-lexi-replica")
            while line := reply.readline():
                if line.startswith(b"data: "):
                    self.frames.append(line[6:].decode().strip())
                    self.started.set()
                if self.hang_up.is_set():
                    return
        except Exception as exc:  # what a client sees when its replica dies
            self.error = exc
        finally:
            connection.close()
            self.started.set()
            self.ended.set()


def test_chat_stream_completions_and_responses_through_openai(ray_server, client):
    reply = client.chat.completions.create(model="main", messages=USER, max_tokens=4, temperature=0)
    assert reply.choices[0].message.content and reply.usage.completion_tokens == 4
    chunks = list(client.chat.completions.create(model="main", messages=USER, max_tokens=4, temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
    done = client.completions.create(model="main", prompt="The capital of France is", max_tokens=4, temperature=0)
    assert done.object == "text_completion" and done.usage.completion_tokens == 4
    answer = client.responses.create(model="main", input="Say hi.", max_output_tokens=16, temperature=0)
    assert answer.status in ("completed", "incomplete") and answer.output_text is not None
    events = [e.type for e in client.responses.create(model="main", input="Hi", max_output_tokens=16, stream=True)]
    assert events[0] == "response.created" and events[-1] in ("response.completed", "response.incomplete")


def test_aliases_key_models_and_health(ray_server, client):
    assert client.chat.completions.create(model="client-main", messages=USER, max_tokens=2).model == "client-main"
    with pytest.raises(openai.BadRequestError, match="requested model is not loaded"):
        client.chat.completions.create(model="other", messages=USER, max_tokens=2)
    keyless = openai.OpenAI(base_url=ray_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        keyless.chat.completions.create(model="main", messages=USER, max_tokens=2)
    assert [m.id for m in client.models.list()] == ["main", "client-main"]
    status, body, _ = request("GET", ray_server.url + "/health")  # no key needed, as on one server
    assert status == 200 and body == {"status": "ok"}
    if ray_server.loading_health is not None:  # seen while the replicas loaded: 503s, as on one server
        assert ray_server.loading_health[0] == 503, ray_server.loading_health
        status, body = ray_server.loading_chat
        assert status == 503 and body["error"]["code"] == "model_loading", body
    status, body, _ = request("GET", ray_server.url + "/v1/models")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    # a client's request id comes back once, from a replica as from the ingress
    for path, body in (("/v1/models", None), ("/v1/chat/completions", {"messages": USER, "max_tokens": 1})):
        headers = {**ray_server.auth(), "X-Request-Id": "trace-42.a"}
        status, _, got = request("POST" if body else "GET", ray_server.url + path, body, headers)
        assert status == 200 and got.get_all("X-Request-Id") == ["trace-42.a"], got.get_all("X-Request-Id")


def test_anthropic_messages_through_the_ingress(ray_server):
    """Anthropic's key header passes the ingress's own key check, and its refusals keep Anthropic's shape."""
    body = {"model": "main", "max_tokens": 3, "messages": USER, "temperature": 0}
    status, reply, got = request("POST", ray_server.url + "/v1/messages", body, {"x-api-key": KEY})
    assert status == 200 and reply["type"] == "message" and got.get("X-Lexi-Replica"), reply
    _, rest = request("POST", ray_server.url + "/v1/messages", {**body, "stream": True}, {"x-api-key": KEY})[:2]
    assert rest.startswith("event: message_start\n") and rest.rstrip().endswith('data: {"type":"message_stop"}')
    status, reply, _ = request("POST", ray_server.url + "/v1/messages", body, {"x-api-key": "wrong"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"
    status, reply, _ = request("POST", ray_server.url + "/v1/messages/count_tokens", {"messages": USER},
                               {"x-api-key": KEY})  # fmt: skip
    assert status == 200 and reply["input_tokens"] > 0


def test_json_logs_of_the_replicas_are_json_lines(ray_server):
    """--log-format json: each replica's access line reaches the command's output as one JSON object, without
    the `(ServeReplica:... pid=...)` prefix Ray puts on forwarded output, and not folded by Ray's log
    deduplication (two replicas writing lines of one pattern used to come out as one "[repeated 2x]" line)."""
    ids = [f"json-log-{i}" for i in range(2)]

    def complete(request_id: str) -> int:
        headers = {**ray_server.auth(), "X-Request-Id": request_id}
        return request("POST", ray_server.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 8}, headers)[0]

    with ThreadPoolExecutor(2) as pool:  # the two slots at once: one request on each replica
        assert list(pool.map(complete, ids)) == [200, 200]
    deadline, found = time.monotonic() + 30, {}
    while len(found) < len(ids) and time.monotonic() < deadline:  # Ray forwards output about once a second
        lines = ray_server.output().splitlines()
        found = {i: [line for line in lines if f'"{i}"' in line] for i in ids if any(f'"{i}"' in x for x in lines)}
        time.sleep(0.5)
    assert sorted(found) == ids, ray_server.output()[-3000:]
    for request_id, (line,) in found.items():
        entry = json.loads(line)
        assert entry["logger"] == "lexi.access" and entry["request_id"] == request_id and entry["status"] == 200
    assert "(ServeReplica" not in ray_server.output() and "repeated" not in ray_server.output()


def test_metrics_carry_a_replica_label(ray_server, client):
    client.chat.completions.create(model="main", messages=USER, max_tokens=2)
    found = replicas(ray_server)
    assert len(found) == 2, found
    _, text, _ = ray_server.get("/metrics")
    slots = re.findall(r'^lexi_slots_total\{replica="([^"]+)"\} 1\.0$', text, re.M)
    assert sorted(slots) == sorted(found)
    assert text.count("# TYPE lexi_requests_total counter") == 1  # one family, a series per replica


def test_two_requests_at_once_are_both_served_and_a_third_is_429(ray_server):
    first, second = Stream(ray_server), Stream(ray_server)
    assert first.started.wait(120) and second.started.wait(120)
    assert first.status == second.status == 200
    assert {first.replica, second.replica} == set(replicas(ray_server)), "one on each replica"
    status, body, _ = ray_server.post("/v1/chat/completions", {"messages": USER, "max_tokens": 2})
    assert status == 429 and body["error"]["code"] == "inference_busy"
    # both clients hang up: each replica aborts its generation and frees its slot
    first.hang_up.set(), second.hang_up.set()
    assert first.ended.wait(60) and second.ended.wait(60)
    deadline = time.monotonic() + 30
    while ray_server.metric("lexi_slots_busy") > 0:
        assert time.monotonic() < deadline, "the slots were not freed after the clients hung up"
        time.sleep(0.5)
    again = [Stream(ray_server, {**LONG, "max_tokens": 3}) for _ in range(2)]
    assert all(s.ended.wait(120) for s in again)
    assert [s.status for s in again] == [200, 200] and all(s.frames[-1] == "[DONE]" for s in again)


def test_a_killed_replica_is_replaced_and_its_request_fails_clearly(ray_server, client):
    before = replicas(ray_server)
    stream = Stream(ray_server)
    assert stream.started.wait(120) and stream.status == 200
    victim = before[stream.replica]
    os.kill(victim, signal.SIGKILL)
    assert stream.ended.wait(60), "the request on the killed replica hangs"
    # the stream ends with an error frame in OpenAI's shape (and no [DONE]), not a cut connection or a hang
    assert stream.error is None, stream.error
    error = json.loads(stream.frames[-1])["error"]
    assert error["code"] == "replica_failed" and "retry" in error["message"], error
    # the other replica keeps answering while Ray starts a new one
    for _ in range(3):
        assert client.chat.completions.create(model="main", messages=USER, max_tokens=2).choices[0].message
    deadline = time.monotonic() + 240
    while True:
        now = replicas(ray_server)
        if len(now) == 2 and victim not in now.values() and request("GET", ray_server.url + "/health")[0] == 200:
            break
        assert time.monotonic() < deadline, f"no replacement replica: {now}"
        time.sleep(1)
    assert stream.replica not in now  # a new replica, with a new id


def test_stored_responses_are_shared_by_every_replica(ray_server):
    """A chain of continuations, each stored by the replica that answered it and found by whichever answers
    the next (both replicas serve some of them); GET and DELETE are answered by the ingress."""
    headers = {"Authorization": f"Bearer {KEY}"}
    url = ray_server.url + "/v1/responses"
    status, body, got = request("POST", url, {"input": "My name is Ada.", "max_output_tokens": 2}, headers)
    assert status == 200 and body["store"] is True, body
    served, previous = {got["x-lexi-replica"]}, body
    for turn in range(10):
        fields = {"input": f"Turn {turn}.", "max_output_tokens": 2, "previous_response_id": previous["id"]}
        status, body, got = request("POST", url, fields, headers)
        assert status == 200 and body["previous_response_id"] == previous["id"], body
        assert body["usage"]["input_tokens"] > previous["usage"]["input_tokens"]  # the whole chain is replayed
        served.add(got["x-lexi-replica"])
        previous = body
    assert len(served) == 2, served
    status, again, _ = request("GET", f"{url}/{previous['id']}", headers=headers)
    assert status == 200 and again == previous
    status, deleted, _ = request("DELETE", f"{url}/{previous['id']}", headers=headers)
    assert status == 200 and deleted == {"id": previous["id"], "object": "response", "deleted": True}
    assert request("GET", f"{url}/{previous['id']}", headers=headers)[0] == 404
    fields = {"input": "Hi", "max_output_tokens": 2, "previous_response_id": previous["id"]}
    status, body, _ = request("POST", url, fields, headers)
    assert status == 400 and body["error"]["code"] == "previous_response_not_found"
