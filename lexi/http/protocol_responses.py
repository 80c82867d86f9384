"""POST /v1/responses bodies: `input` and `instructions` turned into the chat messages templates read.

The route shares the chat route's template, sampling rules and model names; what differs is the
request's shape. Nothing is stored, and there are no tools, so the fields that only make sense with
stored responses or tools (`previous_response_id`, `conversation`, `background`, `store: true`,
`tools`, ...) are refused with a 400 naming them rather than silently ignored: a client that relies
on them would otherwise get a different answer than it asked for without knowing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.chat.template import REASONING_EFFORTS, check_template_kwargs
from lexi.http.config import SamplingDefaults
from lexi.http.errors import bad_request
from lexi.http.protocol import Fields, SamplingRequest, parse_sampling

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
# request fields read by the shared sampling parser under the same names (llama.cpp-style extras included)
SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repeat_penalty", "logit_bias", "ignore_eos",
)  # fmt: skip
UNSUPPORTED = {
    "previous_response_id": "responses are not stored, so there is no earlier response to continue; send the "
    "whole conversation in input",
    "conversation": "conversations are not stored; send the whole conversation in input",
    "prompt": "stored prompt templates are not supported; send the prompt in input",
}


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    model: str | None
    messages: list[dict[str, Any]]  # template form: instructions first as a system message
    instructions: str | None
    sampling: SamplingRequest
    max_output_tokens: int | None  # as the client sent it (echoed in the response)
    stream: bool
    template_kwargs: dict[str, Any]
    reasoning_effort: str | None
    metadata: dict[str, Any]
    parallel_tool_calls: bool
    tool_choice: str


def parse_responses_request(body: dict[str, Any], defaults: SamplingDefaults) -> ResponsesRequest:
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    _refuse_unsupported(f)
    instructions = f.string("instructions")
    messages = [{"role": "system", "content": instructions}] if instructions is not None else []
    messages += _input(body.get("input"))
    if not messages:
        raise bad_request("input holds no message", param="input")
    max_output_tokens = f.integer("max_output_tokens", 1, 1 << 20)
    sampling_body = {key: body[key] for key in SAMPLING_FIELDS if key in body}
    sampling_body["max_tokens"] = max_output_tokens
    kwargs = f.obj("chat_template_kwargs") or {}
    try:
        check_template_kwargs(kwargs, "chat_template_kwargs")
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None
    metadata = f.obj("metadata") or {}
    return ResponsesRequest(
        model=model,
        messages=messages,
        instructions=instructions,
        sampling=parse_sampling(Fields(sampling_body), defaults, chat=True),
        max_output_tokens=max_output_tokens,
        stream=_stream(f),
        template_kwargs=dict(kwargs),
        reasoning_effort=_reasoning_effort(f),
        metadata=dict(metadata),
        parallel_tool_calls=f.boolean("parallel_tool_calls", default=True),
        tool_choice=_tool_choice(f),
    )


def _refuse_unsupported(f: Fields) -> None:
    for key, why in UNSUPPORTED.items():
        if f.present(key):
            raise bad_request(f"{key} is not supported: {why}", param=key, code="unsupported_parameter")
    if f.boolean("store", default=False):
        f.fail("store", "true is not supported: this server stores nothing; send store: false or omit it")
    if f.boolean("background"):
        f.fail("background", "true is not supported: responses are answered in the request that asks for them")
    tools = f.array("tools")
    if tools:
        f.fail("tools", "are not supported on /v1/responses; use /v1/chat/completions for tool calls")
    include = f.array("include")
    if include:
        f.fail("include", f"is not supported (nothing extra can be included), got {include!r}")
    if f.present("top_logprobs") and f.integer("top_logprobs", 0, 20) != 0:
        f.fail("top_logprobs", "is not supported on /v1/responses; use /v1/chat/completions for logprobs")
    if f.string("truncation", choices=("auto", "disabled")) == "auto":
        f.fail("truncation", '"auto" is not supported: an input that does not fit the context is a 400')
    text = f.obj("text")
    if text is not None:
        t = Fields(text, "text.")
        fmt = t.obj("format")
        if fmt is not None and fmt.get("type") != "text":
            t.fail("format", f'must be {{"type": "text"}} (structured output is not supported), got {fmt!r}')
        if t.string("verbosity", choices=("low", "medium", "high")) not in (None, "medium"):
            t.fail("verbosity", 'is not supported other than "medium"')


def _stream(f: Fields) -> bool:
    stream = f.boolean("stream")
    if f.present("stream_options") and not stream:
        f.fail("stream_options", "is only allowed with stream: true")
    return stream


def _reasoning_effort(f: Fields) -> str | None:
    reasoning = f.obj("reasoning")
    if reasoning is None:
        return None
    r = Fields(reasoning, "reasoning.")
    for key in ("summary", "generate_summary"):
        if r.present(key):
            r.fail(key, "is not supported: the model's reasoning is returned as it is, not summarized")
    return r.string("effort", choices=REASONING_EFFORTS)


def _tool_choice(f: Fields) -> str:
    value = f.data.get("tool_choice")
    if value is None:
        return "auto"
    if value not in ("auto", "none"):
        f.fail("tool_choice", f'must be "auto" or "none": there are no tools on /v1/responses, got {value!r}')
    return value


def _input(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_request("input must be a string or a non-empty array of message items", param="input")
    messages = []
    for i, item in enumerate(raw):
        message = _item(item, f"input[{i}]")
        if message is not None:
            messages.append(message)
    return messages


def _item(raw: Any, where: str) -> dict[str, Any] | None:
    """A message item, else None for a reasoning item (accepted and not replayed, as on the chat route)."""
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object", param=where)
    f = Fields(raw, where + ".")
    kind = f.string("type", default="message")
    if kind == "reasoning":
        return None
    if kind != "message":
        f.fail("type", f'must be "message" or "reasoning" (there are no tools or stored items), got {kind!r}')
    role = f.string("role")
    if role not in ROLES:
        f.fail("role", f"must be one of {', '.join(ROLES)}")
    return {"role": "system" if role == "developer" else role, "content": _content(f)}


def _content(f: Fields) -> str:
    value = f.data.get("content")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        f.fail("content", "must be a string or an array of text parts")
    texts = []
    for i, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            continue
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            f.fail(f"content[{i}]", f"must be an input_text or output_text part (no other kind), got {kind!r}")
        texts.append(part["text"])
    return "".join(texts)
