"""--spec ngram over the real server with the openai client: the same greedy text as a server without it,
fewer engine steps, metrics, the per-request opt-out, and constrained output still valid beside it."""

from __future__ import annotations

import json

import openai
import pytest
from server_process import Server

CODE = (
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
)
COPY = [{"role": "user", "content": "Copy this code exactly, nothing else:\n" + CODE}]


@pytest.fixture(scope="module")
def spec_servers():
    """Both --deterministic (row-independent paths), so their greedy tokens must agree."""
    launched = {
        "on": Server("--alias", "m", "--spec", "ngram", "--spec-max", "8", "--deterministic", "--parallel", "2"),
        "off": Server("--alias", "m", "--deterministic", "--parallel", "2"),
    }
    for server in launched.values():
        server.launch()
    yield {name: server.wait_ready() for name, server in launched.items()}
    for server in launched.values():
        server.stop()


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_greedy_text_is_the_same_with_fewer_steps(spec_servers):
    on, off = spec_servers["on"], spec_servers["off"]
    answers, steps = {}, {}
    for name, server in (("on", on), ("off", off)):
        before = server.metric("lexi_spec_verify_rows")
        reply = client_of(server).chat.completions.create(model="m", messages=COPY, max_tokens=60, temperature=0)
        answers[name] = (reply.choices[0].message.content, reply.usage.completion_tokens)
        steps[name] = server.metric("lexi_spec_verify_rows") - before
    assert answers["on"] == answers["off"]
    assert steps["off"] == 0 and steps["on"] > 0
    accepted, proposed = on.metric("lexi_spec_accepted_tokens"), on.metric("lexi_spec_proposed_tokens")
    assert 0 < accepted <= proposed


def test_streamed_text_with_speculation_is_the_whole_text(spec_servers):
    c = client_of(spec_servers["on"])
    whole = c.chat.completions.create(model="m", messages=COPY, max_tokens=40, temperature=0)
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in c.chat.completions.create(model="m", messages=COPY, max_tokens=40, temperature=0, stream=True)
        if chunk.choices
    ]
    assert "".join(pieces) == whole.choices[0].message.content


def test_a_request_may_opt_out_and_a_bad_value_is_named(spec_servers):
    server = spec_servers["on"]
    c = client_of(server)
    before = server.metric("lexi_spec_verify_rows")
    c.completions.create(
        model="m", prompt=CODE + CODE[:30], max_tokens=30, temperature=0, extra_body={"speculative": False}
    )
    assert server.metric("lexi_spec_verify_rows") == before
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="m", messages=COPY, max_tokens=2, extra_body={"speculative": "no"})
    assert caught.value.body["param"] == "speculative"


def test_a_json_answer_is_valid_with_speculation_on(spec_servers):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"]}
    reply = client_of(spec_servers["on"]).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Give a name as JSON."}],
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    assert isinstance(json.loads(reply.choices[0].message.content)["name"], str)
