"""CORS for browser clients, the request id and the JSON access log, over one real server with a key."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from server_process import Server, http, run_refused

from lexi.http.ops.cors import CorsPolicy

KEY = "sk-ops-key"
ORIGIN = "http://localhost:3000"
ORIGINS = ("--allowed-origins", ORIGIN, "--allowed-origins", "https://app.example, http://127.0.0.1:5173/")
PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}


@pytest.fixture(scope="module")
def cors_server():
    args = (*ORIGINS, "--alias", "ops", "--api-key", KEY, "--log-format", "json", "--parallel", "2")
    server = Server(*args, api_key=KEY).launch()
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def options(server, path: str, headers: dict):
    return http("OPTIONS", server.url + path, headers=headers)


def cors_headers(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control-")}


@pytest.mark.parametrize(
    "path, method",
    [("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/v1/responses", "POST"), ("/v1/models", "GET")],
)
def test_preflight_from_an_allowed_origin_is_answered_without_the_key(cors_server, path, method):
    asked = "Authorization, Content-Type, X-Stainless-Retry-Count, OpenAI-Organization"
    headers = {**PREFLIGHT, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": asked}
    status, body, got = options(cors_server, path, headers)
    assert status == 204, body
    assert got["Access-Control-Allow-Origin"] == ORIGIN
    assert method in got["Access-Control-Allow-Methods"].split(", ")
    allowed = got["Access-Control-Allow-Headers"].split(", ")
    assert {"authorization", "content-type", "x-stainless-retry-count", "openai-organization"} <= set(allowed)
    assert int(got["Access-Control-Max-Age"]) > 0
    assert "Origin" in got["Vary"]


@pytest.mark.parametrize("origin", ["https://app.example", "http://127.0.0.1:5173", "https://app.example:443"])
def test_every_listed_origin_is_allowed(cors_server, origin):
    status, _, got = options(cors_server, "/v1/chat/completions", {**PREFLIGHT, "Origin": origin})
    assert status == 204 and got["Access-Control-Allow-Origin"] == origin


@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost:3001", "https://localhost:3000", "null"])
def test_preflight_from_another_origin_is_refused_without_cors_headers(cors_server, origin):
    status, body, got = options(cors_server, "/v1/chat/completions", {**PREFLIGHT, "Origin": origin})
    assert status == 403
    assert body["error"]["code"] == "origin_not_allowed" and body["error"]["type"] == "invalid_request_error"
    assert cors_headers(got) == {}


def test_any_origin_includes_null_and_listed_origins_do_not():
    """`*` allows what a file:// page or a sandboxed frame sends (`Origin: null`); a list never matches it."""
    assert CorsPolicy(("*",)).allows("null") and CorsPolicy(("*",)).allows("chrome-extension://abc")
    assert not CorsPolicy((ORIGIN,)).allows("null") and CorsPolicy((ORIGIN,)).allows(ORIGIN)


def test_private_network_preflight(cors_server):
    headers = {**PREFLIGHT, "Access-Control-Request-Private-Network": "true"}
    status, _, got = options(cors_server, "/v1/chat/completions", headers)
    assert status == 204 and got["Access-Control-Allow-Private-Network"] == "true"


def test_options_without_a_preflight_lists_the_methods(cors_server):
    status, _, got = options(cors_server, "/v1/models", {})
    assert status == 204 and got["Allow"] == "GET, HEAD, OPTIONS"
    assert cors_headers(got) == {}


def test_allowed_origin_gets_cors_headers_on_answers_and_errors(cors_server):
    client = openai.OpenAI(
        base_url=cors_server.url + "/v1", api_key=KEY, default_headers={"Origin": ORIGIN}, max_retries=0
    )
    raw = client.chat.completions.with_raw_response.create(
        model="ops", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0
    )
    assert raw.headers["access-control-allow-origin"] == ORIGIN
    assert "X-Request-Id" in raw.headers["access-control-expose-headers"]
    assert raw.parse().choices[0].message.content is not None
    # a page must be able to read why it was refused
    status, body, got = http("GET", cors_server.url + "/v1/models", headers={"Origin": ORIGIN})
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert got["Access-Control-Allow-Origin"] == ORIGIN


def test_other_origins_get_no_cors_headers_on_answers(cors_server):
    headers = {"Origin": "http://evil.example", "Authorization": f"Bearer {KEY}"}
    status, _, got = http("GET", cors_server.url + "/v1/models", headers=headers)
    assert status == 200 and cors_headers(got) == {}


def test_cors_is_off_by_default(server):
    status, _, got = options(server, "/v1/chat/completions", PREFLIGHT)
    assert status == 403 and cors_headers(got) == {}
    status, _, got = server.get("/v1/models", headers={**server.auth(), "Origin": ORIGIN})
    assert status == 200 and cors_headers(got) == {}


def test_preflight_on_an_unknown_route_is_404_not_401(cors_server):
    status, body, _ = options(cors_server, "/v1/nothing", PREFLIGHT)
    assert status == 404 and body["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "sent, kept",
    [("trace-42.a:b/c+d=e~f", True), ("0f8fad5b-d9cb-469f-a165-70867728950e", True), ("bad id", False),
     ("x" * 129, False), ("", False)],
)  # fmt: skip
def test_request_id_is_the_clients_when_sane(cors_server, sent, kept):
    status, _, got = http("GET", cors_server.url + "/v1/models", headers={"X-Request-Id": sent})
    assert status == 401  # errors carry the id too
    if kept:
        assert got["X-Request-Id"] == sent
    else:
        assert got["X-Request-Id"].startswith("req_") and len(got["X-Request-Id"]) == 36


def test_each_request_gets_its_own_id(cors_server):
    ids = {http("GET", cors_server.url + "/health")[2]["X-Request-Id"] for _ in range(3)}
    assert len(ids) == 3


def full_output(server) -> str:
    server.log.flush()
    return Path(server.log.name).read_text()


def log_lines(server) -> list[dict]:
    """The server's stderr log lines (JSON); stdout's few `lexi-engine:` status lines are not logs."""
    lines = [line for line in full_output(server).splitlines() if line.strip()]
    logs = [line for line in lines if not line.startswith("lexi-engine: ")]
    return [json.loads(line) for line in logs]


def test_json_access_log_line_per_request(cors_server):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}
    headers = {"Authorization": f"Bearer {KEY}", "X-Request-Id": "ops-log-check-1"}
    status, answer, _ = http("POST", cors_server.url + "/v1/chat/completions", body, headers)
    assert status == 200
    entries = [e for e in log_lines(cors_server) if e.get("request_id") == "ops-log-check-1"]
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["logger"] == "lexi.access" and entry["level"] == "info"
    assert entry["route"] == "chat_completions" and entry["status"] == 200 and entry["method"] == "POST"
    assert entry["path"] == "/v1/chat/completions" and entry["latency_ms"] > 0
    assert entry["prompt_tokens"] == answer["usage"]["prompt_tokens"] and entry["completion_tokens"] == 3
    assert entry["time"].endswith("Z")


def test_json_log_has_the_load_lines_and_refusals(cors_server):
    entries = log_lines(cors_server)  # every line parsed: nothing but JSON on stderr
    messages = [e["message"] for e in entries]
    assert any(m.startswith("loading ") and " tensors " in m for m in messages)  # plain lines, no bar
    assert any(m.startswith("weights loaded in") for m in messages)
    assert "\r" not in full_output(cors_server)
    refused = [e for e in entries if e.get("route") == "health" and e.get("status") == 503]
    assert refused and refused[0]["level"] == "info"  # 503 while loading is expected, not an error


@pytest.mark.parametrize(
    "option, value",
    [("--allowed-origins", "http://localhost:3000/app"), ("--allowed-origins", "localhost:3000"),
     ("--shutdown-timeout", "-1"), ("--shutdown-timeout", "3601"), ("--log-format", "xml")],
)  # fmt: skip
def test_bad_ops_options_refused_naming_them(option, value):
    code, out, opened = run_refused(option, value)
    assert code == 2 and option in out and not opened
