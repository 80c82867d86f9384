"""Request fields other servers take, over a real two-slot server and the official client.

n past --parallel (the choices queue for slots; the prompt is computed once), seed and tools at OpenAI's
bounds, json_schema without a name, llama.cpp's json_object with a schema, draft-07 tuple `items`, and
vLLM's repetition_penalty, structured_outputs and guided_* fields on the chat and completions routes.
"""

from __future__ import annotations

import json
import re
import uuid

import jsonschema
import openai
import pytest
from server_process import Server

BLOCK = 16  # the KV block size (EngineConfig.block_size; serve has no option for it)


@pytest.fixture(scope="module")
def fields_server():
    # --deterministic: a request gives the same tokens whatever shares its steps (choices are compared with single
    # runs); float32 alone gave that only by luck (its matmuls' sums depend on the batch) at 2.4x the time
    server = Server("--alias", "fields", "--parallel", "2", "--deterministic").launch()
    yield server.wait_ready()
    server.stop()


@pytest.fixture(scope="module")
def client(fields_server):
    return openai.OpenAI(base_url=fields_server.url + "/v1", api_key="none", max_retries=0, timeout=300)


def user(text: str = "Name a colour.") -> list[dict]:
    return [{"role": "user", "content": text}]


def bad_request(call) -> dict:
    with pytest.raises(openai.BadRequestError) as info:
        call()
    return info.value.body


# ---- n past the slots ----


def test_n_past_the_slots_queues_its_choices_and_computes_the_prompt_once(client, fields_server):
    """n=3 on two slots: three choices; usage counts the prompt once; /metrics shows it was computed once
    (the queued choice, like the second, takes the prompt's full blocks from the prefix cache)."""
    messages = user(f"Describe a quiet harbour at dawn in one sentence, please. ({uuid.uuid4().hex})")
    before = (fields_server.metric("lexi_prefill_tokens"), fields_server.metric("lexi_cached_prompt_tokens"))
    reply = client.chat.completions.create(
        model="fields", messages=messages, n=3, max_tokens=5, temperature=1.0, seed=7
    )
    prefill = fields_server.metric("lexi_prefill_tokens") - before[0]
    cached = fields_server.metric("lexi_cached_prompt_tokens") - before[1]
    assert sorted(c.index for c in reply.choices) == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)
    prompt = reply.usage.prompt_tokens
    one = client.chat.completions.create(model="fields", messages=messages, max_tokens=1)
    assert prompt == one.usage.prompt_tokens  # the prompt once, not three times
    assert 3 <= reply.usage.completion_tokens <= 15  # every choice generated, none past max_tokens
    full = (prompt - 1) // BLOCK * BLOCK  # what a follower finds in the cache (its last token is always computed)
    assert full > 0
    assert cached == 2 * full and prefill == prompt + 2 * (prompt - full)
    # the same through the stream: every index finishes
    finished = {}
    for chunk in client.chat.completions.create(
        model="fields", messages=messages, n=3, max_tokens=3, temperature=1.0, seed=7, stream=True,
        stream_options={"include_usage": True},
    ):  # fmt: skip
        if chunk.usage:
            assert chunk.usage.prompt_tokens == prompt
        for c in chunk.choices:
            if c.finish_reason:
                finished[c.index] = c.finish_reason
    assert set(finished) == {0, 1, 2}


def test_n_choices_past_the_slots_draw_their_own_seeds(client):
    """Choice i draws from seed + i, whether it took a slot at once or waited for one."""
    fields = dict(model="fields", messages=user(), max_tokens=6, temperature=1.0)
    many = client.chat.completions.create(**fields, n=4, seed=40)
    alone = [client.chat.completions.create(**fields, seed=40 + i).choices[0].message.content for i in range(4)]
    assert [c.message.content for c in sorted(many.choices, key=lambda c: c.index)] == alone


def test_n_128_is_taken_and_129_is_400(client):
    reply = client.completions.create(model="fields", prompt="One, two,", n=128, max_tokens=1, temperature=1.0)
    assert sorted(c.index for c in reply.choices) == list(range(128))
    assert reply.usage.completion_tokens == 128
    single = client.completions.create(model="fields", prompt="One, two,", max_tokens=1)
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens
    body = bad_request(lambda: client.chat.completions.create(model="fields", messages=user(), n=129, max_tokens=1))
    assert body["param"] == "n"


# ---- seed and tools at OpenAI's bounds ----


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 2**64 - 1])
def test_seed_outside_int64_is_400(client, seed):
    body = bad_request(lambda: client.chat.completions.create(model="fields", messages=user(), seed=seed, max_tokens=1))
    assert body["param"] == "seed" and "seed" in body["message"]


def test_seed_at_the_int64_bounds_is_taken(client):
    for seed in (2**63 - 1, -(2**63)):
        fields = dict(model="fields", messages=user(), seed=seed, max_tokens=4, temperature=1.0)
        first = client.chat.completions.create(**fields).choices[0].message.content
        assert first == client.chat.completions.create(**fields).choices[0].message.content  # it is the seed


def test_empty_tools_is_400_naming_tools(client):
    body = bad_request(lambda: client.chat.completions.create(model="fields", messages=user(), tools=[], max_tokens=1))
    assert body["param"] == "tools" and body["code"] == "empty_array"


def test_empty_tools_on_responses_is_no_tools_and_a_forced_choice_still_needs_one(client):
    """The Responses route takes `tools: []` as no tools (OpenAI's Responses API does, unlike its chat route); a
    choice that needs a tool is refused in the route's error shape."""
    assert client.responses.create(model="fields", input="Name a colour.", tools=[], max_output_tokens=1).id
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model="fields", input="Name a colour.", tools=[], tool_choice="required", max_output_tokens=1
        )
    assert info.value.status_code == 400
    body = info.value.body
    assert set(body) == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error" and body["param"] == "tool_choice"
    assert "needs tools" in body["message"]
    # one tool is taken
    tool = {"type": "function", "name": "pick", "parameters": {"type": "object", "properties": {}}}
    assert client.responses.create(model="fields", input="Name a colour.", tools=[tool], max_output_tokens=1).id


# ---- JSON answers ----

TUPLE = {  # draft-07 tuple validation: a position-by-position array, nothing after
    "type": "array",
    "items": [{"type": "integer", "minimum": 1, "maximum": 9}, {"enum": ["north", "south"]}],
    "additionalItems": False,
    "minItems": 2,
}
COLOUR = {"type": "object", "properties": {"colour": {"enum": ["teal", "mauve"]}}, "required": ["colour"]}


def answers(reply) -> list:
    return [json.loads(c.message.content) for c in reply.choices]


def test_json_schema_without_a_name_is_taken_and_enforced(client):
    reply = client.chat.completions.create(
        model="fields", messages=user(), max_tokens=20, temperature=1.0, seed=1, n=3,
        response_format={"type": "json_schema", "json_schema": {"schema": COLOUR}},
    )  # fmt: skip
    for value in answers(reply):
        jsonschema.validate(value, COLOUR)


def test_json_object_with_a_schema_enforces_that_schema(client):
    reply = client.chat.completions.create(
        model="fields", messages=user(), max_tokens=20, temperature=1.0, seed=2, n=3,
        response_format={"type": "json_object", "schema": COLOUR},
    )  # fmt: skip
    for value in answers(reply):
        jsonschema.validate(value, COLOUR)
    body = bad_request(
        lambda: client.chat.completions.create(
            model="fields",
            messages=user(),
            max_tokens=1,
            response_format={"type": "json_schema", "json_schema": {"schema": COLOUR}, "schema": COLOUR},
        )  # fmt: skip
    )
    assert body["param"] == "response_format.schema"


def test_draft07_tuple_items_are_taken_and_enforced(client):
    reply = client.chat.completions.create(
        model="fields", messages=user("Give a number and a direction."), max_tokens=20, temperature=1.0, seed=3,
        n=4, response_format={"type": "json_schema", "json_schema": {"name": "pair", "schema": TUPLE}},
    )  # fmt: skip
    values = answers(reply)
    for value in values:
        jsonschema.Draft7Validator(TUPLE).validate(value)
    assert all(len(v) == 2 for v in values)


SPLIT = {  # anyOf of two arrays (their `[` shared) and a tuple with further items, each past the repeat budget
    "type": "object",
    "properties": {
        "marks": {
            "anyOf": [
                {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 18},
                {"type": "array", "items": {"enum": ["x", "o"]}, "minItems": 2, "maxItems": 40},
            ]
        },
        "row": {
            "type": "array",
            "prefixItems": [{"enum": ["north", "south"]}],
            "items": {"type": "boolean"},
            "minItems": 17,
            "maxItems": 20,
        },
    },
    "required": ["marks", "row"],
}


def test_arrays_of_anyof_branches_and_tuple_tails_keep_their_bounds(client):
    """Bounds once widened (anyOf branches that are both arrays; a tuple's further items) hold at temperature 1."""
    reply = client.chat.completions.create(
        model="fields", messages=user("Fill in the board and the row."), max_tokens=400, temperature=1.0, seed=4,
        n=4, response_format={"type": "json_schema", "json_schema": {"name": "board", "schema": SPLIT}},
    )  # fmt: skip
    assert all(c.finish_reason == "stop" for c in reply.choices), reply
    for value in answers(reply):
        jsonschema.validate(value, SPLIT)


def test_responses_text_format_without_a_name(client):
    reply = client.responses.create(
        model="fields", input="Name a colour.", max_output_tokens=20,
        text={"format": {"type": "json_schema", "schema": COLOUR}},
    )  # fmt: skip
    jsonschema.validate(json.loads(reply.output_text), COLOUR)
    again = client.responses.create(
        model="fields", input="Name a colour.", max_output_tokens=20,
        text={"format": {"type": "json_object", "schema": COLOUR}},
    )  # fmt: skip
    jsonschema.validate(json.loads(again.output_text), COLOUR)


# ---- vLLM's fields ----

CODE = "[0-9]{3}-[a-z]{2}"
CHOICES = ["alpha", "beta", "gamma"]


def chat_texts(client, finished: bool = True, max_tokens: int = 24, **extra) -> list[str]:
    """Two answers; each must have ended on its own (the constraint's end) unless `finished` is False."""
    reply = client.chat.completions.create(
        model="fields", messages=user("Say something."), max_tokens=max_tokens, temperature=1.0, seed=5, n=2,
        extra_body=extra,
    )  # fmt: skip
    assert not finished or all(c.finish_reason == "stop" for c in reply.choices), reply
    return [c.message.content for c in reply.choices]


def completion_texts(client, finished: bool = True, max_tokens: int = 24, **extra) -> list[str]:
    reply = client.completions.create(
        model="fields", prompt="The answer:", max_tokens=max_tokens, temperature=1.0, seed=5, n=2, extra_body=extra
    )
    assert not finished or all(c.finish_reason == "stop" for c in reply.choices), reply
    return [c.text for c in reply.choices]


@pytest.mark.parametrize("texts", [chat_texts, completion_texts], ids=["chat", "completions"])
def test_regex_and_choice_constrain_the_answer(client, texts):
    for extra in ({"guided_regex": CODE}, {"structured_outputs": {"regex": CODE}}):
        assert all(re.fullmatch(CODE, t) for t in texts(client, **extra)), extra
    for extra in ({"guided_choice": CHOICES}, {"structured_outputs": {"choice": CHOICES}}):
        assert all(t in CHOICES for t in texts(client, **extra)), extra
    choice = ["a.b", "(x)"]  # literal text, not regex syntax
    assert all(t in choice for t in texts(client, guided_choice=choice))


@pytest.mark.parametrize("texts", [chat_texts, completion_texts], ids=["chat", "completions"])
def test_json_forms_constrain_the_answer(client, texts):
    for extra in ({"guided_json": json.dumps(COLOUR)}, {"structured_outputs": {"json": COLOUR}}):
        for text in texts(client, **extra):
            jsonschema.validate(json.loads(text), COLOUR)
    for text in texts(client, finished=False, max_tokens=4, structured_outputs={"json_object": True}):  # may run long
        assert text.startswith("{")
    for text in texts(client, response_format={"type": "json_schema", "json_schema": {"schema": TUPLE}}):
        jsonschema.Draft7Validator(TUPLE).validate(json.loads(text))


CONFLICTS = [
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a"}, "guided_json": COLOUR}, "guided_json"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": COLOUR}}, "guided_choice": ["a"]},
     "guided_choice"),
]  # fmt: skip
MALFORMED = [
    ({"guided_regex": "(a"}, "guided_regex"),  # outlines-core cannot compile it
    ({"structured_outputs": {"regex": "[z-a]"}}, "structured_outputs.regex"),
    ({"guided_regex": 5}, "guided_regex"),
    ({"guided_regex": ""}, "guided_regex"),
    ({"guided_regex": "a" * 5000}, "guided_regex"),  # past what the compiler is given
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_choice": ["a", 1]}, "guided_choice[1]"),
    ({"guided_choice": "a"}, "guided_choice"),
    ({"guided_json": "not json"}, "guided_json"),
    ({"guided_json": {"type": "nope"}}, "guided_json"),
    ({"guided_json": False}, "guided_json"),  # no value satisfies it
    ({"structured_outputs": "regex"}, "structured_outputs"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"structured_outputs": {"grammar": "root ::= 'a'"}}, "structured_outputs.grammar"),
    ({"structured_outputs": {"pattern": "a"}}, "structured_outputs.pattern"),
    ({"structured_outputs": {"json_object": "yes"}}, "structured_outputs.json_object"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": "high"}, "repetition_penalty"),
    ({"repetition_penalty": 1.2, "repeat_penalty": 1.3}, "repetition_penalty"),
]


@pytest.mark.parametrize(("extra", "param"), CONFLICTS + MALFORMED)
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_conflicting_or_malformed_fields_are_400_naming_the_field(client, route, extra, param):
    if route == "chat":
        call = lambda: client.chat.completions.create(model="fields", messages=user(), max_tokens=2, extra_body=extra)
    else:
        call = lambda: client.completions.create(model="fields", prompt="Hi", max_tokens=2, extra_body=extra)
    body = bad_request(call)
    assert body["param"] == param, body
    assert set(body) == {"message", "type", "param", "code"} and body["type"] == "invalid_request_error"


def test_guided_output_and_callable_tools_are_400(client):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = bad_request(
        lambda: client.chat.completions.create(
            model="fields", messages=user(), tools=[tool], max_tokens=2, extra_body={"guided_regex": "a"}
        )
    )
    assert body["param"] == "guided_regex"


def test_repetition_penalty_is_repeat_penalty(client):
    prompt = "red red red red red red red red red red red red"
    fields = dict(model="fields", prompt=prompt, max_tokens=8, temperature=0)
    plain = client.completions.create(**fields).choices[0].text
    theirs = client.completions.create(**fields, extra_body={"repetition_penalty": 2.0}).choices[0].text
    ours = client.completions.create(**fields, extra_body={"repeat_penalty": 2.0}).choices[0].text
    both = client.completions.create(**fields, extra_body={"repeat_penalty": 2.0, "repetition_penalty": 2.0})
    assert theirs == ours == both.choices[0].text and theirs != plain
    chat = dict(model="fields", messages=user(prompt), max_tokens=8, temperature=0)
    theirs = client.chat.completions.create(**chat, extra_body={"repetition_penalty": 2.0}).choices[0].message.content
    ours = client.chat.completions.create(**chat, extra_body={"repeat_penalty": 2.0}).choices[0].message.content
    assert theirs == ours
