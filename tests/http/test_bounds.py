"""Counted bounds over real servers: a forced call in each form, at temperature 1.0 over several seeds, keeps
the bounds the constraint writes out (a string under 12 characters, an integer range, 3 to 20 items) and
validates (no 422). The JSON form comes from the engine's own tool prompt (the GGUF's ChatML template does
not render tools), the function form from a Qwen3-Coder-style template. Lengths past what the DFA writes
out (`maxLength: 40`, `minLength: 20`) are counted beside it: the same, at temperature 1 and a budget that
leaves room to close, and so are item counts past it (18..24 tags)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai
import pytest
from server_process import Server

SEEDS = range(6)
TEMPLATES = Path(__file__).with_name("templates")
LABEL = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "minLength": 2, "maxLength": 11},
        "score": {"type": "integer", "minimum": -37, "maximum": 1234},
        "levels": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 99},
            "minItems": 3,
            "maxItems": 20,
        },
    },
    "required": ["code", "score", "levels"],
}


@pytest.fixture(scope="module")
def clients():
    """form -> (client, model): a server per call form, both launched before either is waited for."""
    servers = {
        "json": Server("--parallel", "3"),
        "function": Server("--chat-template-file", str(TEMPLATES / "coder_tools.jinja"), "--parallel", "3"),
    }
    for server in servers.values():
        server.launch()
    try:
        made = {}
        for form, server in servers.items():
            server.wait_ready()
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)
            made[form] = (client, client.models.list().data[0].id)
        yield made
    finally:
        for server in servers.values():
            server.stop()


def forced_arguments(client, model: str, prompt: str, name: str, schema: dict, tool_choice, max_tokens: int):
    """The arguments of the one call each seed's forced request returns at temperature 1 (three at a time)."""

    def call(seed):
        return client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            tools=[{"type": "function", "function": {"name": name, "parameters": schema}}],
            tool_choice=tool_choice,
            parallel_tool_calls=False,
            temperature=1.0,
            seed=seed,
            max_tokens=max_tokens,
        )

    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(call, SEEDS))
    out = []
    for seed, reply in zip(SEEDS, replies, strict=True):
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice)
        (tool_call,) = choice.message.tool_calls
        out.append(json.loads(tool_call.function.arguments))
    return out


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_forced_call_keeps_counted_bounds_at_temperature_one(clients, form):
    client, model = clients[form]
    prompt = "Label this parcel for shipping: a short code, a score, levels."
    named = {"type": "function", "function": {"name": "label"}}
    # max_tokens 200: room to close, this test does not lean on budget-aware closing
    for arguments in forced_arguments(client, model, prompt, "label", LABEL, named, 200):
        jsonschema.validate(arguments, LABEL)
        assert 2 <= len(arguments["code"]) <= 11 and 3 <= len(arguments["levels"]) <= 20, (form, arguments)


TITLE = {
    "type": "object",
    "properties": {"title": {"type": "string", "minLength": 20, "maxLength": 40}},
    "required": ["title"],
}


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_forced_call_keeps_a_40_character_maximum_at_temperature_one(clients, form):
    client, model = clients[form]
    prompt = "Write a long, detailed title for a novel about the sea."
    for arguments in forced_arguments(client, model, prompt, "name_book", TITLE, "required", 120):
        jsonschema.validate(arguments, TITLE)  # 20..40 characters: the 422 of a widened bound is gone


TAGS = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 18, "maxItems": 24}
    },
    "required": ["tags"],
}


@pytest.mark.parametrize("form", ["json", "function"])
def test_a_forced_call_keeps_counted_item_bounds_at_temperature_one(clients, form):
    """18..24 items: past what the DFA writes out (widened to "16 or more" before), counted beside it now."""
    client, model = clients[form]
    prompt = "Tag this photo of a beach at sunset with many short tags."
    for arguments in forced_arguments(client, model, prompt, "tag_photo", TAGS, "required", 240):
        jsonschema.validate(arguments, TAGS)
