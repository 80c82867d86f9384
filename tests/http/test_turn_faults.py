"""A turn's faults (lexi/http/generation/turn.py, lexi/http/errors.py TURN_FAULTS): what the template and the turn's
own checks raise on purpose is the request's 400 (or 501) with its message, and anything else, a bug while the turn
is built, is a 500 in the route's error shape, never a 400 that blames chat_template_kwargs.

Over the real routes (lexi.http.routes: the transport-independent layer the Tornado adapter hands its bytes to) in
this process, on the bundled SmolLM2's template, tokenizer, model and engine. The bug is the tokenizer's `encode`
raising a ValueError, as any stray bug on the turn's path would; nothing here reaches the engine, which is built
but never started.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from lexi.chat.prompt import Conversation
from lexi.engine.config import EngineConfig
from lexi.engine.engine import Engine
from lexi.gguf.tokenizer import Tokenizer
from lexi.http.errors import ApiError
from lexi.http.exchange import Headers, Request
from lexi.http.generation.turn import chat_turn
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.routes import open_route
from lexi.http.state import Runtime, prepare_state

USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def state(smollm2_model):
    state, f = prepare_state(ServerConfig(), SamplingDefaults(), EngineConfig(parallel=1, ctx_size=512))
    tokenizer = Tokenizer.from_gguf(f)
    engine = Engine(smollm2_model, tokenizer, state.engine_config)
    state.runtime = Runtime(tokenizer, engine, None)  # no constraint is asked for: nothing compiles one
    return state


def answer(state, path: str, body: dict) -> tuple[int, dict]:
    data = json.dumps(body).encode()
    request = Request("POST", path, Headers([("Content-Type", "application/json")]), data, len(data))
    reply = asyncio.run(open_route(state, request).run())
    return reply.status, json.loads(reply.body)


def test_a_bug_while_building_a_turn_is_a_500_that_blames_no_field(state, monkeypatch):
    def stray_bug(*args, **kwargs):
        raise ValueError("a stray bug while encoding the prompt")

    monkeypatch.setattr(state.runtime.tokenizer, "encode", stray_bug)
    with pytest.raises(ValueError, match="stray bug") as info:
        chat_turn(state, Conversation(USER))
    assert not isinstance(info.value, ApiError)
    for path in ("/v1/chat/completions", "/apply-template"):
        status, body = answer(state, path, {"model": state.names.public_id, "messages": USER, "max_tokens": 1})
        print(path, status, body)
        assert status == 500, (path, body)
        assert body["error"]["type"] == "server_error" and body["error"]["param"] is None, (path, body)
        assert "chat_template_kwargs" not in json.dumps(body) and "stray bug" not in json.dumps(body), (path, body)


@pytest.mark.parametrize(
    ("fields", "status", "param", "message"),
    [
        ({"template_kwargs": {"messages": []}}, 400, "chat_template_kwargs",
         "chat_template_kwargs may not set the reserved variable 'messages'"),
        ({"template_kwargs": {"enable_thinking": "yes"}}, 400, "chat_template_kwargs",
         "chat_template_kwargs.enable_thinking must be a boolean"),
        ({"reasoning_effort": "extreme"}, 400, "reasoning_effort", "reasoning_effort must be one of none, "),
        ({"reasoning_effort": "high"}, 501, "reasoning_effort",
         "reasoning_effort 'high' needs a chat template with a thinking switch"),
    ],
)  # fmt: skip
def test_what_the_turn_refuses_on_purpose_is_the_request_fault(state, fields, status, param, message):
    """A conversation the request parsers did not check (they refuse these first): the turn's own checks and the
    template's faults still answer with the field and the message."""
    with pytest.raises(ApiError) as info:
        chat_turn(state, Conversation(USER, **fields))
    error = info.value
    assert (error.status, error.param) == (status, param) and error.message.startswith(message), error.body()
