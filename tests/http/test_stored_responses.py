"""Stored Responses on real servers: store, previous_response_id, GET and DELETE /v1/responses/{id}, the owner
check, the --responses-store bound; and the Response object's top_logprobs and assistant `phase` items.

A continuation is checked against the same conversation sent whole: the same prompt tokens and (greedy, on the
--deterministic main server) the same text, so the stored history is exactly what reaches the template.
"""

from __future__ import annotations

import json

import openai
import pytest
from server_process import Server, http

STORY = "Tell me a story about a lighthouse keeper."
NAME = "My name is Ada and I keep the lighthouse."
KEY_A, KEY_B = "sk-owner-a", "sk-owner-b"
PHASE_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.phase is defined %}[phase={{ m.phase }}]{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PING = {"type": "function", "name": "ping", "parameters": {"type": "object", "additionalProperties": False}}


@pytest.fixture(scope="module")
def store_servers(tmp_path_factory):
    """Two keys and room for two responses (with a template that renders `phase`); and one that stores none."""
    template = tmp_path_factory.mktemp("phase") / "phase.jinja"
    template.write_text(PHASE_TEMPLATE)
    launched = {
        "two": Server(
            "--api-key", KEY_A, "--api-key", KEY_B, "--responses-store", "2", "--parallel", "1",
            "--chat-template-file", str(template), api_key=KEY_A,
        ),
        "none": Server("--responses-store", "0", "--parallel", "1"),
    }  # fmt: skip
    for server in launched.values():
        server.launch()
    yield launched
    for server in launched.values():
        server.stop()


@pytest.fixture(scope="module")
def two(store_servers):
    return store_servers["two"].wait_ready()


@pytest.fixture(scope="module")
def no_store(store_servers):
    return store_servers["none"].wait_ready()


def create(server, key: str | None = None, **fields):
    body = {"input": STORY, "max_output_tokens": 3, "temperature": 0, **fields}
    headers = {"Authorization": f"Bearer {key or server.api_key}"} if (key or server.api_key) else {}
    return http("POST", server.url + "/v1/responses", body, headers)


def stored(server, method: str, response_id: str, key: str | None = None):
    headers = {"Authorization": f"Bearer {key or server.api_key}"} if (key or server.api_key) else {}
    return http(method, f"{server.url}/v1/responses/{response_id}", headers=headers)


def sse_responses(text: str) -> list[dict]:
    """The `data` objects of a raw Responses stream."""
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


# ---- top_logprobs and phase ----


def test_top_logprobs_is_a_number_in_replies_and_every_lifecycle_event(server):
    status, body, _ = create(server)
    assert status == 200 and body["top_logprobs"] == 0, body
    status, text, _ = create(server, stream=True)
    events = sse_responses(text)
    embedded = [e for e in events if "response" in e]
    assert [e["type"] for e in embedded] == ["response.created", "response.in_progress", "response.incomplete"]
    assert all(e["response"]["top_logprobs"] == 0 for e in embedded)
    status, text, _ = create(server, stream=True, max_output_tokens=40, stop=["e"])  # ends "completed"
    final = sse_responses(text)[-1]
    assert final["type"] == "response.completed" and final["response"]["top_logprobs"] == 0
    status, body, _ = create(server, include=["message.output_text.logprobs"], top_logprobs=2)
    assert status == 200 and body["top_logprobs"] == 2


def test_the_client_parses_top_logprobs_as_an_int(client):
    r = client.responses.create(model="main", input=STORY, max_output_tokens=2, temperature=0)
    assert r.top_logprobs == 0 and isinstance(r.top_logprobs, int)


def assistant(text: str, phase: str | None = None) -> dict:
    item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
    return item | ({"phase": phase} if phase is not None else {})


def test_an_assistant_phase_is_accepted_and_a_template_that_ignores_it_renders_as_before(client):
    def tokens(phase):
        items = [{"role": "user", "content": "Hi"}, assistant("Hello!", phase), {"role": "user", "content": STORY}]
        r = client.responses.create(model="main", input=items, max_output_tokens=2, temperature=0)
        return r.usage.input_tokens, r.output_text

    plain = tokens(None)
    assert tokens("commentary") == plain == tokens("final_answer")


@pytest.mark.parametrize(
    ("item", "param"),
    [
        (assistant("Hello!", "final"), "input[1].phase"),
        (assistant("Hello!", 3), "input[1].phase"),
        ({"role": "user", "content": "Hi", "phase": "commentary"}, "input[1].phase"),
    ],
)
def test_a_bad_phase_is_400_naming_it(server, item, param):
    status, body, _ = create(server, input=[{"role": "user", "content": "Hi"}, item])
    assert status == 400 and body["error"]["param"] == param, body


def test_the_phase_reaches_a_template_that_reads_it(two):
    def tokens(phase):
        items = [{"role": "user", "content": "Hi"}, assistant("Hello!", phase), {"role": "user", "content": STORY}]
        status, body, _ = create(two, input=items, store=False)
        assert status == 200, body
        return body["usage"]["input_tokens"]

    assert tokens("commentary") > tokens(None)


# ---- store, GET, DELETE ----


def test_store_defaults_to_true_and_get_returns_the_object_as_returned(server, client):
    status, body, _ = create(server)
    assert status == 200 and body["store"] is True and body["previous_response_id"] is None
    status, again, _ = stored(server, "GET", body["id"])
    assert status == 200 and again == body
    r = client.responses.create(model="main", input=STORY, max_output_tokens=2, temperature=0)
    assert client.responses.retrieve(r.id).model_dump() == r.model_dump()


def test_store_false_is_not_kept(server):
    status, body, _ = create(server, store=False)
    assert status == 200 and body["store"] is False
    status, error, _ = stored(server, "GET", body["id"])
    assert status == 404 and error["error"]["param"] == "response_id"


def test_a_streamed_response_is_stored_when_it_completes(server):
    status, text, _ = create(server, stream=True)
    final = sse_responses(text)[-1]["response"]
    status, body, _ = stored(server, "GET", final["id"])
    assert status == 200 and body == final and body["status"] == "incomplete" and body["store"] is True


def test_delete_returns_the_deletion_object_then_get_and_delete_are_404(server, client):
    _, body, _ = create(server)
    status, deleted, _ = stored(server, "DELETE", body["id"])
    assert status == 200 and deleted == {"id": body["id"], "object": "response", "deleted": True}
    for method in ("GET", "DELETE"):
        status, error, _ = stored(server, method, body["id"])
        assert status == 404 and set(error["error"]) == {"message", "type", "param", "code"}
        assert error["error"]["code"] == "not_found" and body["id"] in error["error"]["message"]
    r = client.responses.create(model="main", input=STORY, max_output_tokens=2, temperature=0)
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_unknown_ids_and_methods(server):
    status, error, _ = stored(server, "GET", "resp_unknown")
    assert status == 404 and error["error"]["type"] == "invalid_request_error"
    status, _, headers = stored(server, "POST", "resp_unknown")
    assert status == 405 and headers["Allow"] == "GET, HEAD, DELETE, OPTIONS"
    assert stored(server, "GET", "resp_unknown", key="wrong")[0] == 401


# ---- previous_response_id ----


def test_a_continuation_sees_the_stored_input_and_output_but_not_the_instructions(server, client):
    first = client.responses.create(
        model="main", input=NAME, instructions="Answer in French.", max_output_tokens=8, temperature=0
    )
    second = client.responses.create(
        model="main", input="What is my name?", previous_response_id=first.id, max_output_tokens=6, temperature=0
    )
    whole = client.responses.create(
        model="main",
        input=[
            {"role": "user", "content": NAME},
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"role": "user", "content": "What is my name?"},
        ],
        max_output_tokens=6,
        temperature=0,
        store=False,
    )
    assert second.previous_response_id == first.id and second.instructions is None
    assert second.usage.input_tokens == whole.usage.input_tokens
    assert second.output_text == whole.output_text
    chat = client.chat.completions.create(
        model="main",
        messages=[
            {"role": "user", "content": NAME},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "What is my name?"},
        ],
        max_tokens=6,
        temperature=0,
    )
    assert chat.usage.prompt_tokens == second.usage.input_tokens  # no system message: the instructions stayed behind
    third = client.responses.create(
        model="main", input="And where?", previous_response_id=second.id, max_output_tokens=2, temperature=0
    )
    added = client.responses.create(
        model="main", input="And where?", previous_response_id=first.id, max_output_tokens=2, temperature=0
    )
    assert third.usage.input_tokens > added.usage.input_tokens  # a chain carries every turn, not just the last


def test_a_tool_result_continues_the_stored_call(server, client):
    first = client.responses.create(
        model="main", input="Ping the server.", tools=[PING], tool_choice="required", parallel_tool_calls=False,
        max_output_tokens=40, temperature=0,
    )  # fmt: skip
    (call,) = [item for item in first.output if item.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "pong"}
    second = client.responses.create(
        model="main", input=[result], previous_response_id=first.id, tools=[PING], tool_choice="none",
        max_output_tokens=6, temperature=0,
    )  # fmt: skip
    whole = client.responses.create(
        model="main",
        input=[{"role": "user", "content": "Ping the server."}, call.model_dump(exclude_none=True), result],
        tools=[PING], tool_choice="none", max_output_tokens=6, temperature=0, store=False,
    )  # fmt: skip
    assert second.usage.input_tokens == whole.usage.input_tokens and second.output_text == whole.output_text
    status, body, _ = create(server, input="Hi", previous_response_id=first.id)  # the call left unanswered
    assert status == 400 and body["error"]["param"] == "previous_response_id", body


def test_an_unknown_previous_response_is_openais_400(server):
    status, body, _ = create(server, previous_response_id="resp_unknown")
    assert status == 400 and body["error"]["code"] == "previous_response_not_found", body
    assert body["error"]["param"] == "previous_response_id" and "resp_unknown" in body["error"]["message"]
    assert create(server, previous_response_id=5)[1]["error"]["param"] == "previous_response_id"


def test_a_continuation_that_streams_is_stored_too(server):
    _, first, _ = create(server, input=NAME)
    status, text, _ = create(server, input="What is my name?", previous_response_id=first["id"], stream=True)
    events = sse_responses(text)
    assert events[0]["response"]["previous_response_id"] == first["id"]
    final = events[-1]["response"]
    status, body, _ = stored(server, "GET", final["id"])
    assert status == 200 and body == final


# ---- owners and the bound ----


def test_another_key_gets_the_answers_of_an_unknown_id(two):
    _, mine, _ = create(two, key=KEY_A)
    response_id = mine["id"]
    for method in ("GET", "DELETE"):
        status, theirs, _ = stored(two, method, response_id, key=KEY_B)
        status_unknown, unknown, _ = stored(two, method, "resp_x", key=KEY_B)
        assert status == status_unknown == 404
        assert theirs["error"] == {
            **unknown["error"],
            "message": unknown["error"]["message"].replace("resp_x", response_id),
        }
    status, theirs, _ = create(two, key=KEY_B, previous_response_id=response_id)
    _, unknown, _ = create(two, key=KEY_B, previous_response_id="resp_x")
    assert status == 400 and theirs["error"]["code"] == unknown["error"]["code"] == "previous_response_not_found"
    assert stored(two, "GET", response_id, key="sk-wrong")[0] == 401
    status, body, _ = stored(two, "GET", response_id, key=KEY_A)  # the other key's DELETE did nothing
    assert status == 200 and body == mine
    assert create(two, key=KEY_A, previous_response_id=response_id)[0] == 200


def test_the_bound_evicts_the_least_recently_used(two):
    ids = [create(two, key=KEY_A)[1]["id"] for _ in range(2)]
    assert stored(two, "GET", ids[0])[0] == 200  # the first is now the more recently used
    ids.append(create(two, key=KEY_A)[1]["id"])
    assert [stored(two, "GET", i)[0] for i in ids] == [200, 404, 200]
    status, body, _ = create(two, key=KEY_A, previous_response_id=ids[1])
    assert status == 400 and body["error"]["code"] == "previous_response_not_found"


def test_a_server_that_stores_nothing(no_store):
    status, body, _ = create(no_store)
    assert status == 200 and body["store"] is False
    assert stored(no_store, "GET", body["id"])[0] == 404
    status, error, _ = create(no_store, store=True)
    assert status == 400 and error["error"]["param"] == "store" and error["error"]["code"] == "unsupported_value"
    status, error, _ = create(no_store, previous_response_id=body["id"])
    assert status == 400 and error["error"]["param"] == "previous_response_id"
    assert error["error"]["code"] == "unsupported_parameter"
    assert create(no_store, store=False)[0] == 200
