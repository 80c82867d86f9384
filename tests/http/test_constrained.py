"""Constrained decoding over real servers: at temperature 1.0, over ten seeds, every call and JSON answer validates.

String bounds stay within what the constraint writes out (16); longer ones are widened and only verified.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

SEEDS = range(10)
BOOKING = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2, "maxLength": 16},
        "nights": {"type": "integer", "minimum": 1, "maximum": 14},
        "room": {"enum": ["single", "double", "suite"]},
        "guest": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 18}},
            "required": ["name"],
        },
        "extras": {"type": "array", "items": {"enum": ["breakfast", "parking", "late checkout"]}, "maxItems": 3},
    },
    "required": ["city", "nights", "room", "guest"],
}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
}
CLOSED = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 16},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10},
        "filters": {
            "type": "object",
            "properties": {"lang": {"enum": ["en", "fr"]}, "recent": {"type": "boolean"}},
            "required": ["lang", "recent"],
            "additionalProperties": False,
        },
    },
    "required": ["query", "limit", "filters"],
    "additionalProperties": False,
}


def function(name: str, parameters: dict, strict: bool = False) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters, "strict": strict}}


def per_seed(make, seeds=SEEDS, slots: int = 4):
    """One request per seed, as many at a time as the server has slots."""
    with ThreadPoolExecutor(slots) as pool:
        return list(pool.map(make, seeds))


@pytest.fixture(scope="module")
def tools_client(tools_server, client_for):
    client = client_for(tools_server)
    return client, client.models.list().data[0].id


def check_calls(reply, schemas: dict[str, dict]) -> None:
    choice = reply.choices[0]
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_a_named_tool_with_a_rich_schema_always_validates(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Book me a hotel room in Lisbon for my family."}],
            tools=[function("book_hotel", BOOKING), function("get_weather", WEATHER)],
            tool_choice={"type": "function", "function": {"name": "book_hotel"}},
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=160,
        )
    )
    for reply in replies:
        check_calls(reply, {"book_hotel": BOOKING})
        assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["book_hotel"]
        assert reply.choices[0].finish_reason == "tool_calls"


def test_required_calls_always_validate(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Is it raining in Oslo? And book me a room there."}],
            tools=[function("book_hotel", BOOKING), function("get_weather", WEATHER)],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=160,
        )
    )
    for reply in replies:
        check_calls(reply, {"book_hotel": BOOKING, "get_weather": WEATHER})


def test_a_strict_closed_tool_always_validates(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Find recent French articles about bread."}],
            tools=[function("search", CLOSED, strict=True)],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=120,
        )
    )
    for reply in replies:
        check_calls(reply, {"search": CLOSED})


def test_auto_calls_that_are_made_validate(tools_client):
    client, model = tools_client
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Call the weather tool for Rome in celsius."}],
            tools=[function("get_weather", WEATHER)],
            tool_choice="auto",
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=80,
        )
    )
    for reply in replies:
        for call in reply.choices[0].message.tool_calls or []:
            jsonschema.validate(json.loads(call.function.arguments), WEATHER)
        assert (
            "<tool_call>" not in (reply.choices[0].message.content or "") or reply.choices[0].finish_reason == "length"
        )


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
    },
    "required": ["name", "age"],
}


def test_response_format_json_schema_and_json_object_parse_and_validate(tools_client):
    client, model = tools_client
    ask = [{"role": "user", "content": "Describe a fictional person."}]

    def schema_reply(seed):
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
        return client.chat.completions.create(
            model=model, messages=ask, response_format=fmt, temperature=1.0, seed=seed, max_tokens=120
        )

    def object_reply(seed):
        return client.chat.completions.create(
            model=model,
            messages=ask,
            response_format={"type": "json_object"},
            temperature=1.0,
            seed=seed,
            max_tokens=120,
        )

    for reply in per_seed(schema_reply):
        if reply.choices[0].finish_reason == "stop":
            jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)
    done = [r for r in per_seed(object_reply) if r.choices[0].finish_reason == "stop"]
    assert len(done) >= 5
    assert all(isinstance(json.loads(r.choices[0].message.content), dict) for r in done)


def test_streamed_and_whole_constrained_answers_are_equal(tools_client):
    client, model = tools_client
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    fields = dict(
        model=model, messages=[{"role": "user", "content": "A person, please."}], response_format=fmt, max_tokens=80
    )
    for seed in (3, 4):
        client.chat.completions.create(**fields, seed=seed, temperature=1.0)  # the same prefix cache for both below
        whole = client.chat.completions.create(**fields, seed=seed, temperature=1.0).choices[0].message.content
        chunks = client.chat.completions.create(**fields, seed=seed, temperature=1.0, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == whole and whole


def test_responses_text_format_json_schema(tools_client):
    client, model = tools_client
    r = client.responses.create(
        model=model,
        input="Describe a fictional person.",
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": False}},
        temperature=1.0,
        max_output_tokens=120,
    )
    if r.status == "completed":
        jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema" and r.text.format.name == "person"


def schema_format(**json_schema) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": json_schema}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (schema_format(name="p", schema={"type": 5}), "response_format.json_schema.schema"),
        # was: no name at all is 400; a missing name is now taken (named "response", test_request_fields.py)
        (schema_format(name="a person", schema=PERSON), "response_format.json_schema.name"),
        (schema_format(name="p", schema=PERSON, strict=True), "response_format.json_schema.schema"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"response_format": {"type": "json_object"}, "tools": [function("get_weather", WEATHER)]}, "response_format"),
        (schema_format(name="p", schema=False), "response_format"),
    ],
)
def test_bad_response_formats_are_400(tools_client, fields, param):
    client, model = tools_client
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=1, **fields)
    assert info.value.body["param"] == param, info.value.body


def test_a_named_tool_on_gemma_validates(gemma_server, client_for):
    """The 262k-token vocabulary: the compiled index and the masks over it."""
    client = client_for(gemma_server)
    model = client.models.list().data[0].id
    replies = per_seed(
        lambda seed: client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "What is the weather like in Madrid?"}],
            tools=[function("get_weather", WEATHER)],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=60,
        ),
        seeds=range(3),
        slots=2,
    )
    for reply in replies:
        check_calls(reply, {"get_weather": WEATHER})
