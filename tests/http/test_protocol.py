"""Request parsing in-process: defaults, explicit zeros, types and ranges, messages into template form."""

from __future__ import annotations

import pytest

from lexi.http.chat.request import parse_chat_request
from lexi.http.completions.request import parse_completion_request
from lexi.http.errors import ApiError
from lexi.http.generation.sampling import sampling_params
from lexi.http.ops.config import SamplingDefaults, ServerConfig
from lexi.http.ops.metrics import Metrics
from lexi.http.ops.names import ModelNames
from lexi.http.parsing.fields import parse_json_body

USER = [{"role": "user", "content": "hi"}]
DEFAULTS = SamplingDefaults(temp=1.5, top_p=0.5, top_k=20, min_p=0.2, n_predict=7)


def chat(**fields):
    return parse_chat_request({"messages": USER, **fields}, DEFAULTS)


def refused(fn, param, **fields):
    with pytest.raises(ApiError) as info:
        fn(**fields)
    assert info.value.status == 400, info.value.message
    assert info.value.param == param, (info.value.param, info.value.message)
    return info.value


def test_server_defaults_apply_when_fields_are_absent():
    s = chat().sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (1.5, 0.5, 20, 0.2)
    assert (s.max_tokens, s.default_max_tokens) == (None, 7)
    params = sampling_params(s, 10, 100)
    assert (params.temperature, params.top_p, params.top_k, params.min_p, params.max_tokens) == (1.5, 0.5, 20, 0.2, 7)
    # --n-predict is a cap on what the client left unset: a prompt leaving less room gets the room, not a 400
    assert sampling_params(s, 96, 100).max_tokens == 4
    with pytest.raises(ApiError, match="leaves no room"):
        sampling_params(s, 100, 100)
    assert sampling_params(chat(max_tokens=20).sampling, 10, 100).max_tokens == 20  # the client's own limit wins


def test_explicit_zeros_override_defaults():
    s = chat(temperature=0, top_p=0, top_k=0, min_p=0, presence_penalty=0, seed=0).sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (0.0, 0.0, 0, 0.0, 0)
    params = sampling_params(s, 10, 100)
    assert params.greedy and params.top_k == 0 and params.top_p == 0.0 and params.min_p == 0.0


def test_engine_defaults_without_server_defaults_and_room_left_as_limit():
    from lexi.engine.sampling import SamplingParams

    s = parse_chat_request({"messages": USER}, SamplingDefaults()).sampling
    params = sampling_params(s, 30, 100)
    engine = SamplingParams()
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (
        engine.temperature,
        engine.top_p,
        engine.top_k,
        engine.min_p,
    )
    assert params.max_tokens == 70
    with pytest.raises(ApiError) as info:
        sampling_params(s, 100, 100)
    assert info.value.code == "context_length_exceeded"


def test_max_completion_tokens_wins_over_max_tokens():
    assert chat(max_tokens=5, max_completion_tokens=3).sampling.max_tokens == 3
    assert chat(max_tokens=5).sampling.max_tokens == 5


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("temperature", 2.01),
        ("temperature", -1),
        ("temperature", "hot"),
        ("temperature", True),
        ("top_p", 1.5),
        ("top_k", -1),
        ("top_k", 1.5),
        ("min_p", 2),
        ("max_tokens", 0),
        ("max_completion_tokens", -3),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -2.5),
        ("seed", "42"),
        ("stop", 3),
        ("stop", [""]),
        ("stop", ["a"] * 17),
        ("logit_bias", {"abc": 1}),
        ("logit_bias", {"5": 101}),
        ("logit_bias", [1]),
        ("top_logprobs", 3),
        ("n", 0),
        ("n", 129),
        ("stream", "yes"),
        ("stream_options", {"include_usage": True}),
        ("reasoning_effort", "max"),
        ("chat_template_kwargs", {"messages": []}),
        ("chat_template_kwargs", {"tools": []}),
        ("chat_template_kwargs", {"add_generation_prompt": False}),
        ("chat_template_kwargs", {"bos_token": "x"}),
        ("chat_template_kwargs", {"eos_token": "x"}),
        ("chat_template_kwargs", {"x": [1]}),
        ("chat_template_kwargs", {"x": {"y": 1}}),
        ("chat_template_kwargs", {"enable_thinking": "yes"}),
        ("chat_template_kwargs", "x"),
        ("model", 3),
        ("tools", "x"),
    ],
)
def test_bad_fields_name_their_param(param, value):
    refused(chat, param, **{param: value})


def test_logprobs_and_stop_forms():
    s = chat(logprobs=True, top_logprobs=3, stop="END").sampling
    assert s.logprobs == 3 and s.stop == ("END",)
    assert chat(logprobs=True).sampling.logprobs == 0
    assert chat(logprobs=False).sampling.logprobs is None
    assert chat(stop=["a", "b"], logit_bias={"12": -100}).sampling.logit_bias == {12: -100.0}
    assert chat(n=1).sampling.default_max_tokens == 7


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hi", "messages"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": "x", "reasoning_content": "r"}], "messages[0].reasoning_content"),
        ([{"role": "system", "content": "x", "reasoning_content": "r"}], "messages[0].reasoning_content"),
        (
            [{"role": "tool", "content": "x", "reasoning_content": "r", "tool_call_id": "1"}],
            "messages[0].reasoning_content",
        ),
        ([{"role": "tool", "content": "42"}], "messages[0].tool_call_id"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "messages[0].tool_calls"),
        ([{"role": "assistant", "content": "x", "reasoning_content": 3}], "messages[0].reasoning_content"),
    ],
)
def test_bad_messages(messages, param):
    with pytest.raises(ApiError) as info:
        parse_chat_request({"messages": messages}, DEFAULTS)
    assert info.value.param == param, info.value.message


def test_messages_in_template_form():
    req = parse_chat_request(
        {
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "secret",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
                    ],
                },
                {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
            ]
        },
        DEFAULTS,
    )
    assert req.conversation.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},  # joined later
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
    ]


def test_completion_prompt_forms():
    assert parse_completion_request({"prompt": "x"}, DEFAULTS).prompts == ["x"]
    assert parse_completion_request({"prompt": ["x"]}, DEFAULTS).prompts == ["x"]
    assert parse_completion_request({"prompt": [1, 2]}, DEFAULTS).prompts == [[1, 2]]
    assert parse_completion_request({"prompt": ["a", "b"]}, DEFAULTS).prompts == ["a", "b"]  # a batch
    assert parse_completion_request({"prompt": [[1], [2, 3]]}, DEFAULTS).prompts == [[1], [2, 3]]
    assert parse_completion_request({"prompt": "x", "logprobs": 2}, DEFAULTS).sampling.logprobs == 2
    for bad in (None, 3, [-1], [True], ["a", 1], [[1], "b"], [[]], [], ["x"] * 65):
        with pytest.raises(ApiError) as info:
            parse_completion_request({"prompt": bad}, DEFAULTS)
        assert info.value.param == "prompt"
    with pytest.raises(ApiError):
        parse_completion_request({"prompt": "x", "logprobs": 21}, DEFAULTS)


@pytest.mark.parametrize("body", [b"", b"{", b"[1]", b'"x"', b"\xff\xfe"])
def test_malformed_json(body):
    with pytest.raises(ApiError) as info:
        parse_json_body(body)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"


def test_model_names():
    from pathlib import Path

    names = ModelNames.build(("main", "second"), Path("/m/Model.Q4.gguf"))
    assert names.resolve(None) == "main" and names.resolve("second") == "second"
    for bad in ("Model.Q4", "MAIN", "main ", 3):
        with pytest.raises(ApiError) as info:
            names.resolve(bad)
        assert info.value.message == "requested model is not loaded" and info.value.param == "model"
    assert ModelNames.build((), Path("/m/Model.Q4.gguf")).all == ("Model.Q4",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temp": 2.1},
        {"top_p": -0.1},
        {"top_k": 100001},
        {"min_p": 1.1},
        {"n_predict": 0},
        {"n_predict": 131073},
    ],
)
def test_sampling_defaults_ranges(kwargs):
    with pytest.raises(ValueError, match="--" + next(iter(kwargs)).replace("_", "-")):
        SamplingDefaults(**kwargs)


def test_server_config_checks():
    with pytest.raises(ValueError, match="--reasoning-format"):
        ServerConfig(reasoning_format="raw")
    with pytest.raises(ValueError, match="reserved"):
        ServerConfig(chat_template_kwargs={"eos_token": "x"})
    assert ServerConfig(aliases=["a", "b"]).aliases == ("a", "b")


def test_metrics_registries_are_per_app():
    a, b = Metrics(), Metrics()
    a.requests.labels("chat", "200").inc()
    assert b"lexi_requests_total" in a.exposition()
    assert b'lexi_requests_total{route="chat",status="200"} 1.0' in a.exposition()
    assert b'route="chat"' not in b.exposition()


def test_chat_and_http_import_neither_torch_nor_triton():
    import subprocess
    import sys

    code = (
        "import sys, lexi.http.tornado.app, lexi.http.tornado.server, lexi.chat.template, lexi.chat.reasoning,"
        " lexi.chat.prompt;"
        "bad = [m for m in ('torch', 'triton') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_model_without_an_embedded_template_gets_chatml(gemma3_path):
    from lexi.engine.config import EngineConfig
    from lexi.http.state import prepare_state

    state, f = prepare_state(ServerConfig(model=str(gemma3_path)), SamplingDefaults(), EngineConfig())
    assert "tokenizer.chat_template" not in f.metadata
    assert state.template.origin == "the ChatML default"
    assert state.extra_stop == ("<|im_end|>",)  # not a token of Gemma's vocabulary: stopped on as text
    assert state.template.bos_token == "<bos>"
    prompt = state.template.render([{"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert state.names.public_id == gemma3_path.stem


def test_the_embedded_template_is_used_and_a_file_overrides_it(smollm2_path, tmp_path):
    from lexi.engine.config import EngineConfig
    from lexi.http.state import prepare_state

    state, _ = prepare_state(ServerConfig(), SamplingDefaults(), EngineConfig())
    assert state.template.origin == "the GGUF's tokenizer.chat_template" and state.extra_stop == ()
    assert state.model_path == smollm2_path
    override = tmp_path / "t.jinja"
    override.write_text("{{ messages[0].content }}!")
    state, _ = prepare_state(ServerConfig(chat_template_file=str(override)), SamplingDefaults(), EngineConfig())
    assert state.template.render([{"role": "user", "content": "x"}]) == "x!"
