"""POST /v1/responses bodies: `input` and `instructions` turned into the chat messages templates read.

The route shares the chat route's template, sampling rules, tool rules and model names; what differs
is the request's shape. Function tools come flat (`{"type": "function", "name", "parameters", ...}`),
and earlier calls and their results arrive as `function_call` / `function_call_output` input items,
which become the chat route's assistant `tool_calls` and `tool` messages. Nothing is stored, so the
fields that only make sense with stored responses (`previous_response_id`, `conversation`,
`background`, `store: true`, ...) and built-in tools are refused with a 400 naming them rather than
silently ignored: a client that relies on them would otherwise get a different answer than it asked
for without knowing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.chat.prompt import Conversation
from lexi.chat.response_format import ResponseFormat, make_format
from lexi.chat.template import REASONING_EFFORTS, check_template_kwargs
from lexi.chat.tools import Tool, ToolSet, ToolSpecError, check_tool_names, make_choice, make_tool
from lexi.http.config import SamplingDefaults
from lexi.http.errors import bad_request
from lexi.http.protocol import Fields, SamplingRequest, parse_sampling
from lexi.http.protocol_chat import tool_call_entry

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
    conversation: Conversation  # messages in template form (instructions first as a system message), tools
    instructions: str | None
    sampling: SamplingRequest
    max_output_tokens: int | None  # as the client sent it (echoed in the response)
    stream: bool
    metadata: dict[str, Any]
    parallel_tool_calls: bool  # as echoed: true unless the client sent false
    tool_choice: str | dict[str, Any]  # as echoed: the client's choice, "auto" when it sent none


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
    tools = _tools(f)
    conversation = Conversation(
        messages=messages,
        tools=tools,
        response_format=_text_format(f),
        template_kwargs=dict(kwargs),
        reasoning_effort=_reasoning_effort(f),
    )
    echo = tools.choice.wire_form(nested=False) if tools else f.data.get("tool_choice", "auto")
    return ResponsesRequest(
        model=model,
        conversation=conversation,
        instructions=instructions,
        sampling=parse_sampling(Fields(sampling_body), defaults, chat=True),
        max_output_tokens=max_output_tokens,
        stream=_stream(f),
        metadata=dict(metadata),
        parallel_tool_calls=f.boolean("parallel_tool_calls", default=True),
        tool_choice=echo,
    )


def _tools(f: Fields) -> ToolSet | None:
    """Function tools in the Responses shape; built-in tools (web_search, file_search, ...) are refused."""
    tools: list[Tool] = []
    try:
        for i, entry in enumerate(f.array("tools") or []):
            where = f"tools[{i}]"
            kind = entry.get("type") if isinstance(entry, dict) else None
            if kind != "function":
                raise ToolSpecError(
                    f'{where} must be a function tool {{"type": "function", "name", "parameters", ...}}; '
                    f"built-in tools are not supported, got type {kind!r}",
                    f"{where}.type",
                )
            unknown = set(entry) - {"type", "name", "description", "parameters", "strict"}
            if unknown:
                raise ToolSpecError(f"{where} has unknown fields: {', '.join(sorted(unknown))}", where)
            tools.append(
                make_tool(
                    entry.get("name"), entry.get("description"), entry.get("parameters"), entry.get("strict"),
                    where, f"{where}.parameters",
                )
            )  # fmt: skip
        check_tool_names(tools, "tools")
        choice = make_choice(f.data.get("tool_choice"), tools, "tool_choice", nested=False)
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None
    return ToolSet(tuple(tools), choice, f.boolean("parallel_tool_calls", default=True)) if tools else None


def _refuse_unsupported(f: Fields) -> None:
    for key, why in UNSUPPORTED.items():
        if f.present(key):
            raise bad_request(f"{key} is not supported: {why}", param=key, code="unsupported_parameter")
    if f.boolean("store", default=False):
        f.fail("store", "true is not supported: this server stores nothing; send store: false or omit it")
    if f.boolean("background"):
        f.fail("background", "true is not supported: responses are answered in the request that asks for them")
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
        if t.string("verbosity", choices=("low", "medium", "high")) not in (None, "medium"):
            t.fail("verbosity", 'is not supported other than "medium"')


def _text_format(f: Fields) -> ResponseFormat | None:
    """text.format: {"type": "text" | "json_object"} or {"type": "json_schema", "name", "schema", "strict", ...}."""
    text = f.obj("text")
    fmt = Fields(text, "text.").obj("format") if text is not None else None
    if fmt is None:
        return None
    try:
        unknown = set(fmt) - {"type", "name", "description", "schema", "strict"}
        if unknown:
            raise ToolSpecError(f"text.format has unknown fields: {', '.join(sorted(unknown))}", "text.format")
        kind = fmt.get("type")
        return make_format(kind, fmt if kind == "json_schema" else None, "text.format", "text.format.schema")
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None


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


def _input(raw: Any) -> list[dict[str, Any]]:
    """Message items as chat messages; function_call items join the assistant turn before them (or open
    one), function_call_output items become tool messages named after their call."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_request("input must be a string or a non-empty array of input items", param="input")
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call_id -> function name, for the results that answer them
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", param=where)
        f = Fields(item, where + ".")
        kind = f.string("type", default="message")
        if kind == "reasoning":
            continue  # accepted and not replayed, as on the chat route
        if kind == "message":
            role = f.string("role")
            if role not in ROLES:
                f.fail("role", f"must be one of {', '.join(ROLES)}")
            messages.append({"role": "system" if role == "developer" else role, "content": _content(f)})
        elif kind == "function_call":
            call_id, name = _required_string(f, "call_id"), _required_string(f, "name")
            names[call_id] = name
            call = tool_call_entry(call_id, name, _required_string(f, "arguments"), f.name("arguments"))
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = _required_string(f, "call_id")
            message = {"role": "tool", "content": _output(f), "tool_call_id": call_id}
            if call_id in names:
                message["name"] = names[call_id]
            messages.append(message)
        else:
            f.fail(
                "type",
                'must be "message", "function_call", "function_call_output" or "reasoning" '
                f"(stored items are not supported), got {kind!r}",
            )
    return messages


def _required_string(f: Fields, key: str) -> str:
    value = f.string(key)
    if value is None:
        f.fail(key, "is required")
    return value


def _output(f: Fields) -> str:
    """A function's result: a string, or input_text parts (other kinds are refused)."""
    value = f.data.get("output")
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "input_text" for p in value):
        if all(isinstance(p.get("text"), str) for p in value):
            return "".join(p["text"] for p in value)
    f.fail("output", "must be a string or an array of input_text parts")


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
