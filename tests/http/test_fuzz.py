"""Hostile bodies on every route: a 4xx in the route's error shape (OpenAI's, or Anthropic's on /v1/messages) or a
200, never a 5xx, and the server lives on.

Bodies are mutations of valid ones (hypothesis): a field's value replaced (types, huge and tiny
numbers, unicode digits, deep nesting, long strings), a field dropped, an unknown field or another
route's field added, at the top or inside nested objects. Generation stays short: the fuzzed server
has a small context, so no mutation can ask for many tokens.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import Server, http

VALID = {
    "/v1/chat/completions": {
        "model": "fuzz", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0,
        "stop": ["x"], "logit_bias": {"15": 1}, "logprobs": True, "top_logprobs": 1, "seed": 3,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "none", "stream": False, "n": 1, "repetition_penalty": 1.1,
        "structured_outputs": {"choice": ["yes", "no"]},
    },
    "/v1/completions": {
        "model": "fuzz", "prompt": "Hello", "max_tokens": 2, "temperature": 0, "logprobs": 1, "echo": False,
        "stream": False, "n": 1, "guided_regex": "[a-z ]{1,8}",
    },
    "/v1/responses": {
        "model": "fuzz", "input": [{"role": "user", "content": "Hi"}], "instructions": "Be brief.",
        "max_output_tokens": 2, "temperature": 0, "metadata": {"k": "v"}, "text": {"format": {"type": "text"}},
        "stream": False, "store": True,
    },
    "/v1/messages": {
        "model": "fuzz", "max_tokens": 2, "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "temperature": 0, "top_k": 5, "stop_sequences": ["x"], "metadata": {"user_id": "u"},
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "none"}, "thinking": {"type": "disabled"},
        "stream": False,
    },
    "/v1/messages/count_tokens": {
        "model": "fuzz", "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    },
    "/tokenize": {"content": "Hello", "add_special": False, "with_pieces": True},
    "/detokenize": {"tokens": [19556, 905]},
    "/apply-template": {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True},
}  # fmt: skip
OTHER_ROUTES_FIELDS = [
    "prompt", "messages", "input", "max_output_tokens", "echo", "tokens", "content", "suffix", "previous_response_id",
    "max_tokens", "system", "stop_sequences", "thinking", "tool_choice",
]  # fmt: skip
ANTHROPIC = ("/v1/messages", "/v1/messages/count_tokens")  # errors in Anthropic's shape

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, -1, 0, 1, 1e308, -1e308, 5e-324, 1e-320]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["²", "٣", "１２", "Ⅻ", "1e5", "0x10", " 7", "NaN", "", "\x00", "a" * 5000]),
    st.lists(st.integers(-5, 5), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["²", "-1", "99999999999999999999", "3"]), st.integers(-200, 200), max_size=2),
)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def mutated(draw, route: str):
    body = json.loads(json.dumps(VALID[route]))
    for _ in range(draw(st.integers(1, 3))):
        target = body
        if draw(st.booleans()):  # sometimes go one level into a nested object or list
            nested = [k for k, v in body.items() if isinstance(v, dict | list) and v]
            if nested:
                key = draw(st.sampled_from(nested))
                inner = body[key]
                target = inner[0] if isinstance(inner, list) and isinstance(inner[0], dict) else inner
        if not isinstance(target, dict):
            continue
        action = draw(st.sampled_from(["replace", "drop", "add", "other-route"]))
        if action == "replace" and target:
            target[draw(st.sampled_from(sorted(target)))] = draw(HOSTILE)
        elif action == "drop" and target:
            del target[draw(st.sampled_from(sorted(target)))]
        elif action == "add":
            target[draw(st.text(min_size=1, max_size=8))] = draw(HOSTILE)
        elif action == "other-route":
            target[draw(st.sampled_from(OTHER_ROUTES_FIELDS))] = draw(HOSTILE)
    return body


@pytest.fixture(scope="module")
def fuzz_server():
    """A small context: a mutation that keeps a generation going cannot ask for more than a few dozen tokens."""
    server = Server("--alias", "fuzz", "--ctx-size", "64", "--n-predict", "4", "--parallel", "2").launch()
    # --ctx-size comes after the default 2048 in argv: the last one wins
    yield server.wait_ready()
    server.stop()


def check(server, route: str, raw: bytes) -> None:
    status, body, _ = http("POST", server.url + route, raw, timeout=120)
    assert status < 500, (route, raw[:300], status, body)
    if status >= 400:
        assert_error_shape(route, body, raw)


def assert_error_shape(route: str, body, raw: bytes) -> None:
    """OpenAI's {"error": {...}} on its routes, Anthropic's {"type": "error", "error": {...}} on its own."""
    assert isinstance(body, dict), (route, raw[:300], body)
    if route in ANTHROPIC:
        assert set(body) == {"type", "error", "request_id"} and body["type"] == "error", (route, raw[:300], body)
        assert set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body) == {"error"}, (route, raw[:300], body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


@pytest.mark.parametrize("route", list(VALID))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_mutated_bodies_never_get_a_5xx(fuzz_server, route, data):
    body = data.draw(mutated(route))
    check(fuzz_server, route, json.dumps(body).encode())


def with_field(route: str, key: str, literal: str) -> bytes:
    """The route's valid body with `key` set to the raw JSON text `literal` (replacing any value it had)."""
    return json.dumps({**VALID[route], key: "__RAW__"}).replace('"__RAW__"', literal).encode()


@pytest.mark.parametrize("route", list(VALID))
def test_known_crashers_are_400s(fuzz_server, route):
    crashers = [
        deep(100_000).encode(),  # nested 100,000 arrays deep
        with_field(route, "wrapped", deep(80)),
        with_field(route, "logit_bias", '{"\\u00b2": 1}'),  # "²": isdigit() yes, int() no
        with_field(route, "temperature", "9" * 400),  # overflows math.isfinite
        with_field(route, "temperature", "NaN"),
        with_field(route, "seed", "1e999"),
        b"\xff\xfe{}",
    ]
    for raw in crashers:
        status, body, _ = http("POST", fuzz_server.url + route, raw, timeout=120)
        assert status == 400, (route, raw[:120], status, body)
        assert_error_shape(route, body, raw)
    assert fuzz_server.get("/health")[0] == 200


@pytest.mark.parametrize("route", ANTHROPIC)
def test_the_unmutated_anthropic_bodies_are_answered(fuzz_server, route):
    """The mutations start from bodies the route answers, so they probe the paths behind the checks too."""
    status, body, _ = http("POST", fuzz_server.url + route, json.dumps(VALID[route]).encode(), timeout=120)
    assert status == 200, body
