"""POST /v1/responses bodies: `input` and `instructions` turned into the chat messages templates read.

The route shares the chat route's template, sampling rules, tool rules and model names; what differs
is the request's shape. Function tools come flat (`{"type": "function", "name", "parameters", ...}`),
and earlier calls and their results arrive as `function_call` / `function_call_output` input items,
which become the chat route's assistant `tool_calls` and `tool` messages. A request that continues a
stored response (`previous_response_id`) is parsed as if its history (that response's input items, then
its output items) came before its own input, so tool pairing spans both; its `instructions` are not
carried over, as OpenAI documents. Fields that need what this server does not keep (`conversation`,
stored `prompt`s, `background`) and built-in tools are refused with a 400 naming them rather than
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
from lexi.http.errors import bad_request
from lexi.http.ops.config import SamplingDefaults
from lexi.http.parsing.fields import (
    NO_EFFECT,
    UNSUPPORTED_PARAMETER,
    UNSUPPORTED_VALUE,
    Fields,
    SamplingRequest,
    parse_sampling,
    refuse_unknown,
)
from lexi.http.responses.input import input_items, input_messages

# request fields read by the shared sampling parser under the same names (llama.cpp-style extras included)
SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repeat_penalty", "repetition_penalty", "logit_bias", "ignore_eos",
    "speculative",
)  # fmt: skip
RESPONSES_FIELDS = (
    "model", "input", "instructions", "max_output_tokens", "stream", "stream_options", "metadata", "store",
    "background", "tools", "tool_choice", "parallel_tool_calls", "max_tool_calls", "text", "reasoning", "include",
    "top_logprobs", "truncation", "chat_template_kwargs", "service_tier", "previous_response_id", "conversation",
    "prompt", *SAMPLING_FIELDS, *NO_EFFECT,
)  # fmt: skip
LOGPROBS_INCLUDE = "message.output_text.logprobs"
UNSUPPORTED = {
    "conversation": "conversations are not stored; send the whole conversation in input, or previous_response_id",
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
    logprobs: bool  # include: ["message.output_text.logprobs"]
    top_logprobs: int | None  # as echoed
    max_tool_calls: int | None
    identifiers: dict[str, Any]  # user, safety_identifier, prompt_cache_key, service_tier: echoed as sent
    store: bool  # keep the response (default true, as OpenAI's; false on a server that stores nothing)
    previous_response_id: str | None  # as echoed
    items: list[dict[str, Any]]  # the continued response's history, then this input: what a stored response keeps


def previous_response_id(body: dict[str, Any], storing: bool) -> str | None:
    """The id a request continues, checked before it is looked up (the lookup needs the store, the parse does not)."""
    f = Fields(body)
    response_id = f.string("previous_response_id")
    if response_id is not None and not storing:
        f.fail(
            "previous_response_id",
            "is not supported: this server keeps no responses (--responses-store 0); send the whole conversation "
            "in input",
            code=UNSUPPORTED_PARAMETER,
        )
    return response_id


def parse_responses_request(
    body: dict[str, Any],
    defaults: SamplingDefaults,
    history: list[dict[str, Any]] | None = None,
    storing: bool = True,
) -> ResponsesRequest:
    """`history`: the items of the response named by previous_response_id (StoredResponse.history()), already
    looked up; `storing`: whether this server keeps responses at all (--responses-store > 0)."""
    refuse_unknown(body, RESPONSES_FIELDS)
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    _refuse_unsupported(f)
    store = _store(f, storing)
    instructions = f.string("instructions")
    items = [*(history or []), *input_items(body.get("input"))]
    messages = _messages(instructions, items, len(history or []))
    max_output_tokens = f.integer("max_output_tokens", 1, 1 << 20)
    logprobs, top_logprobs = _logprobs(f)
    kwargs = f.obj("chat_template_kwargs") or {}
    try:
        check_template_kwargs(kwargs, "chat_template_kwargs")
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None
    metadata = _metadata(f)
    max_tool_calls = f.integer("max_tool_calls", 1, 1 << 10)
    tools = _tools(f, max_tool_calls)
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
        sampling=_sampling(body, defaults, max_output_tokens, (top_logprobs or 0) if logprobs else None),
        max_output_tokens=max_output_tokens,
        stream=_stream(f),
        metadata=metadata,
        parallel_tool_calls=f.boolean("parallel_tool_calls", default=True),
        tool_choice=echo,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        max_tool_calls=max_tool_calls,
        identifiers={key: f.string(key) for key in ("user", "safety_identifier", "prompt_cache_key")}
        | {"service_tier": _service_tier(f)},
        store=store,
        previous_response_id=previous_response_id(body, storing),
        items=items,
    )


def _messages(instructions: str | None, items: list[dict[str, Any]], continued: int) -> list[dict[str, Any]]:
    """The instructions as a leading system message, then the items (the first `continued` the stored history's)."""
    messages = [{"role": "system", "content": instructions}] if instructions is not None else []
    messages += input_messages(items, continued)
    if not messages:
        raise bad_request("input holds no message", param="input")
    return messages


def _sampling(
    body: dict[str, Any], defaults: SamplingDefaults, max_output_tokens: int | None, top_logprobs: int | None
) -> SamplingRequest:
    """The sampling fields under chat's names, read by chat's parser (`top_logprobs` None: no logprobs asked)."""
    sampling_body = {key: body[key] for key in SAMPLING_FIELDS if key in body}
    sampling_body["max_tokens"] = max_output_tokens
    if top_logprobs is not None:
        sampling_body.update(logprobs=True, top_logprobs=top_logprobs)
    return parse_sampling(Fields(sampling_body), defaults, chat=True)


def _store(f: Fields, storing: bool) -> bool:
    """store defaults to true, as on OpenAI; a server started with --responses-store 0 keeps nothing, so an
    explicit true is refused there and an omitted one reads false."""
    if not storing and f.boolean("store"):
        f.fail(
            "store",
            "true is not supported: this server keeps no responses (--responses-store 0); send store: false or omit it",
            code=UNSUPPORTED_VALUE,
        )
    return f.boolean("store", default=storing)


def _metadata(f: Fields) -> dict[str, str]:
    """metadata, echoed on the response: OpenAI's limits (16 pairs, keys up to 64 characters, string values
    up to 512)."""
    metadata = f.obj("metadata") or {}
    if len(metadata) > 16:
        f.fail("metadata", f"may hold at most 16 key-value pairs, got {len(metadata)}")
    for key, value in metadata.items():
        if len(key) > 64:
            f.fail("metadata", f"keys may be at most 64 characters long, got one of {len(key)}")
        if not isinstance(value, str) or len(value) > 512:
            f.fail(f"metadata.{key}", "must be a string of at most 512 characters")
    return dict(metadata)


def _logprobs(f: Fields) -> tuple[bool, int | None]:
    """include: only "message.output_text.logprobs"; top_logprobs (0-20) goes with it."""
    include = f.array("include") or []
    for i, item in enumerate(include):
        if item != LOGPROBS_INCLUDE:
            f.fail(
                f"include[{i}]",
                f'may only be "{LOGPROBS_INCLUDE}" (nothing else can be included), got {item!r}',
                code=UNSUPPORTED_VALUE,
            )
    top = f.integer("top_logprobs", 0, 20)
    if top and not include:
        f.fail("top_logprobs", f'needs include: ["{LOGPROBS_INCLUDE}"]')
    return bool(include), top


def _service_tier(f: Fields) -> str:
    tier = f.string("service_tier", default="auto")
    if tier not in ("auto", "default"):
        f.fail("service_tier", 'may only be "auto" or "default": this server has one tier')
    return "default"


def _tools(f: Fields, max_calls: int | None) -> ToolSet | None:
    """Function tools in the Responses shape; built-in tools (web_search, file_search, ...) are refused."""
    tools: list[Tool] = []
    try:
        for i, entry in enumerate(f.tools(empty_is_none=True)):
            where = f"tools[{i}]"
            kind = entry.get("type") if isinstance(entry, dict) else None
            if kind != "function":
                raise ToolSpecError(
                    f'{where} must be a function tool {{"type": "function", "name", "parameters", ...}}; '
                    f"built-in tools are not supported, got type {kind!r}",
                    f"{where}.type",
                )
            if "function" in entry:
                raise ToolSpecError(
                    f'{where} nests a "function" object, as chat does; the Responses API takes the tool flat: '
                    '{"type": "function", "name", "parameters", ...}',
                    where,
                )
            refuse_unknown(entry, ("type", "name", "description", "parameters", "strict"), f"{where}.")
            tools.append(
                make_tool(
                    entry.get("name"), entry.get("description"), entry.get("parameters"), entry.get("strict"),
                    where, f"{where}.parameters",
                )
            )  # fmt: skip
        check_tool_names(tools, "tools")
        choice_value = f.data.get("tool_choice")
        if not tools and choice_value in (None, "auto", "none"):  # `tools: []` with nothing to choose: no tools
            f.boolean("parallel_tool_calls", default=True)
            return None
        choice = make_choice(choice_value, tools, "tool_choice", nested=False)
        if isinstance(choice_value, dict):
            refuse_unknown(choice_value, ("type", "name"), "tool_choice.")
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None
    parallel = f.boolean("parallel_tool_calls", default=True)
    return ToolSet(tuple(tools), choice, parallel, max_calls) if tools else None


def _refuse_unsupported(f: Fields) -> None:
    for key, why in UNSUPPORTED.items():
        if f.present(key):
            f.fail(key, f"is not supported: {why}", code=UNSUPPORTED_PARAMETER)
    if f.boolean("background"):
        f.fail(
            "background",
            "true is not supported: responses are answered in the request that asks for them",
            code=UNSUPPORTED_VALUE,
        )
    if f.string("truncation", choices=("auto", "disabled")) == "auto":
        f.fail(
            "truncation",
            '"auto" is not supported: an input that does not fit the context is a 400',
            code=UNSUPPORTED_VALUE,
        )
    text = f.obj("text")
    if text is not None:
        t = Fields(text, "text.")
        refuse_unknown(text, ("format", "verbosity"), "text.")
        if t.string("verbosity", choices=("low", "medium", "high")) not in (None, "medium"):
            t.fail("verbosity", 'is not supported other than "medium"', code=UNSUPPORTED_VALUE)


def _text_format(f: Fields) -> ResponseFormat | None:
    """text.format: {"type": "text" | "json_object"} or {"type": "json_schema", "name", "schema", "strict", ...}."""
    text = f.obj("text")
    fmt = Fields(text, "text.").obj("format") if text is not None else None
    if fmt is None:
        return None
    try:
        refuse_unknown(fmt, ("type", "name", "description", "schema", "strict"), "text.format.")
        kind = fmt.get("type")
        schema = fmt.get("schema") if kind == "json_object" else None  # llama.cpp's json_object with a schema
        return make_format(kind, fmt if kind == "json_schema" else None, "text.format", "text.format.schema", schema)
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None


def _stream(f: Fields) -> bool:
    stream = f.boolean("stream")
    options = f.obj("stream_options")
    if options is not None:
        if not stream:
            f.fail("stream_options", "is only allowed with stream: true")
        refuse_unknown(options, ("include_obfuscation",), "stream_options.")
        if Fields(options, "stream_options.").boolean("include_obfuscation"):
            f.fail("stream_options", "include_obfuscation true is not supported: events carry no obfuscation")
    return stream


def _reasoning_effort(f: Fields) -> str | None:
    reasoning = f.obj("reasoning")
    if reasoning is None:
        return None
    r = Fields(reasoning, "reasoning.")
    for key in ("summary", "generate_summary"):
        if r.present(key):
            why = "is not supported: the model's reasoning is returned as it is, not summarized"
            r.fail(key, why, UNSUPPORTED_PARAMETER)
    refuse_unknown(reasoning, ("effort", "summary", "generate_summary"), "reasoning.")
    return r.string("effort", choices=REASONING_EFFORTS)
