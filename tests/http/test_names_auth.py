"""Model names, /v1/models, the API key on every route, errors in OpenAI's shape, /health while loading."""

from __future__ import annotations

import json
import socket

import openai
import pytest
from server_process import API_KEY, http

ROUTES = [
    ("GET", "/v1/models"),
    ("GET", "/v1/models/main"),
    ("GET", "/v1/models/client-main"),
    ("GET", "/metrics"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("GET", "/no/such/route"),
    ("POST", "/v1/responses-nope"),
]


def assert_error_shape(body, status_type=None):
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if status_type is not None:
        assert body["error"]["type"] == status_type, body


def test_models_lists_each_alias_separately(server, client):
    status, body, _ = server.get("/v1/models")
    assert status == 200 and body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["main", "client-main"]
    assert [m.id for m in client.models.list().data] == ["main", "client-main"]
    assert client.models.retrieve("client-main").id == "client-main"
    status, body, _ = server.get("/v1/models/SmolLM2-135M-Instruct.Q4_1")
    assert status == 404
    assert_error_shape(body)


@pytest.mark.parametrize("name", ["main", "client-main", None])
def test_declared_names_and_omitted_model_select_the_resident_model(server, name):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    if name is not None:
        body["model"] = name
    status, reply, _ = server.post("/v1/chat/completions", body)
    assert status == 200, reply
    assert reply["model"] == (name or "main")
    assert reply["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("name", ["SmolLM2-135M-Instruct.Q4_1", "smollm2-135m-instruct", "Main", "main ", "gpt-4o", ""])
def test_undeclared_names_are_400(server, client, name):
    for path, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 1}),
    ):
        status, reply, _ = server.post(path, {**body, "model": name})
        assert status == 400
        assert_error_shape(reply, "invalid_request_error")
        assert reply["error"]["message"] == "requested model is not loaded"
        assert reply["error"]["param"] == "model"
    with pytest.raises(openai.BadRequestError, match="requested model is not loaded"):
        client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=1)


def test_file_stem_is_the_id_without_alias(thinking_server):
    status, body, _ = thinking_server.get("/v1/models")
    assert [m["id"] for m in body["data"]] == ["SmolLM2-135M-Instruct.Q4_1"]
    status, reply, _ = thinking_server.post(
        "/v1/completions", {"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Hi", "max_tokens": 1}
    )
    assert status == 200 and reply["model"] == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("header", [None, "Bearer wrong-key", f"Bearer {API_KEY}x", "Basic " + API_KEY, API_KEY])
def test_every_route_but_health_needs_the_key(server, method, path, header):
    headers = {} if header is None else {"Authorization": header}
    body = {"model": "client-main", "messages": [{"role": "user", "content": "x"}]} if method == "POST" else None
    status, reply, got = server.get(path, headers) if method == "GET" else server.post(path, body, headers)
    assert status == 401, (path, reply)
    assert_error_shape(reply, "authentication_error")
    assert got["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("model", ["main", "client-main"])
def test_the_key_works_across_aliases_and_routes(server, model):
    assert server.get("/v1/models")[0] == 200
    assert server.get(f"/v1/models/{model}")[0] == 200
    assert server.get("/metrics")[0] == 200
    assert server.post("/tokenize", {"content": "hi"})[0] == 200
    status, body, _ = server.post("/no/such/route", {})
    assert status == 404
    assert_error_shape(body, "not_found_error")
    bad = {"Authorization": "Bearer nope"}
    req = {"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    assert server.post("/v1/chat/completions", req, bad)[0] == 401
    assert server.post("/v1/chat/completions", req)[0] == 200


def test_openai_client_with_a_wrong_key_is_refused(server):
    wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_health_needs_no_key_and_said_503_while_loading(server):
    status, body, _ = server.get("/health", headers={})
    assert status == 200 and body == {"status": "ok"}
    status, body = server.loading_health
    assert status == 503
    assert_error_shape(body)
    status, body = server.loading_chat
    assert status == 503
    assert_error_shape(body, "unavailable_error")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[]", None),
        (b"", None),
        (json.dumps({"messages": "hi"}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).encode(), "temperature"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "top_p": 3}).encode(), "top_p"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 129}).encode(), "n"),  # was n=2 (1 slot)
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}).encode(), "max_tokens"),
    ],
)
def test_malformed_requests_are_400_in_openai_shape(server, body, param):
    status, reply, _ = server.post("/v1/chat/completions", body)
    assert status == 400
    assert_error_shape(reply, "invalid_request_error")
    assert reply["error"]["param"] == param


def test_method_not_allowed_is_in_openai_shape(server):
    status, reply, headers = server.get("/v1/chat/completions")
    assert status == 405 and headers["Allow"] == "POST, OPTIONS"  # RFC 9110: a 405 names what is allowed
    assert_error_shape(reply)
    status, _, headers = http("DELETE", server.url + "/v1/models", headers=server.auth())
    assert status == 405 and headers["Allow"] == "GET, HEAD, OPTIONS"


def test_head_answers_what_get_answers_without_a_body(server):
    status, body, headers = http("HEAD", server.url + "/health")
    assert status == 200 and body == "" and headers["Content-Type"] == "application/json"
    status, _, _ = http("HEAD", server.url + "/v1/chat/completions", headers=server.auth())
    assert status == 405


def test_body_over_the_limit_is_413(server):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (8 * 1024 * 1024)}]}).encode()
    status, reply, _ = server.post("/v1/chat/completions", big)
    assert status == 413
    assert_error_shape(reply)
    # a chunked body (no Content-Length) is measured as it arrives
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        head = (
            "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n\r\n"
        )
        sock.sendall(head.encode())
        chunk = b"x" * (1024 * 1024)
        for _ in range(9):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        answer = sock.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert '"type": "invalid_request_error"' in answer
    # and the server still answers
    assert server.get("/v1/models")[0] == 200
