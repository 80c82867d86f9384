"""POST /v1/chat/completions bodies: messages checked and turned into what chat templates read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lexi.chat.prompt import Conversation
from lexi.chat.template import REASONING_EFFORTS, check_template_kwargs
from lexi.chat.tools import Tool, ToolSet, ToolSpecError, check_tool_names, make_choice, make_tool
from lexi.http.errors import bad_request
from lexi.http.ops.config import SamplingDefaults
from lexi.http.parsing.fields import (
    CHAT_SAMPLING_FIELDS,
    NO_EFFECT,
    UNSUPPORTED_VALUE,
    Fields,
    SamplingRequest,
    parse_sampling,
    refuse_unknown,
    stream_options,
)
from lexi.http.parsing.guided import GUIDED_FIELDS, parse_guided, parse_response_format
from lexi.http.parsing.tool_pairing import Step, check_tool_pairing, history_tool_call

ROLES = ("system", "developer", "user", "assistant", "tool")
CHAT_FIELDS = (
    "model", "messages", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "chat_template_kwargs", "reasoning_effort", "add_generation_prompt",
    "continue_final_message", "store", "service_tier", "modalities", *CHAT_SAMPLING_FIELDS, *GUIDED_FIELDS,
    *NO_EFFECT,
)  # fmt: skip
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")
# What OpenAI returns on an assistant message and clients send back as they got it: accepted when empty.
ECHOED_EMPTY = ("refusal", "annotations", "audio", "function_call")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str | None
    conversation: Conversation  # messages in template form, tools, template variables
    sampling: SamplingRequest
    stream: bool
    include_usage: bool


def parse_chat_request(body: dict[str, Any], defaults: SamplingDefaults) -> ChatRequest:
    refuse_unknown(body, CHAT_FIELDS)
    f = Fields(body)
    _refuse_without_effect(f)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    raw = f.array("messages")
    if not raw:
        raise bad_request("messages must be a non-empty array", param="messages")
    messages = [_message(m, i) for i, m in enumerate(raw)]
    check_tool_pairing(list(_steps(messages)))
    kwargs = f.obj("chat_template_kwargs") or {}
    try:
        check_template_kwargs(kwargs, "chat_template_kwargs")
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None
    stream, include_usage = stream_options(f)
    add_generation_prompt = f.boolean("add_generation_prompt", default=True)
    continue_final = f.boolean("continue_final_message")
    if continue_final and f.present("add_generation_prompt") and add_generation_prompt:
        f.fail("continue_final_message", "and add_generation_prompt cannot both be true")
    if continue_final and messages[-1]["role"] != "assistant":
        f.fail("continue_final_message", "needs the last message to be the assistant's, to continue it")
    tools = parse_chat_tools(f)
    response_format, guided = parse_guided(f, parse_response_format(f))
    conversation = Conversation(
        messages=messages,
        tools=tools,
        response_format=response_format,
        guided=guided,
        template_kwargs=dict(kwargs),
        reasoning_effort=f.string("reasoning_effort", choices=REASONING_EFFORTS),
        add_generation_prompt=add_generation_prompt and not continue_final,
        continue_final_message=continue_final,
    )
    return ChatRequest(
        model=model,
        conversation=conversation,
        sampling=parse_sampling(f, defaults, chat=True),
        stream=stream,
        include_usage=include_usage,
    )


def _refuse_without_effect(f: Fields) -> None:
    """Fields OpenAI takes that this server cannot honour: refused unless they ask for what it does anyway."""
    if f.boolean("store"):
        f.fail(
            "store",
            "true is not supported: this server stores nothing; send store: false or omit it",
            code=UNSUPPORTED_VALUE,
        )
    if f.string("service_tier") not in (None, "auto", "default"):
        f.fail("service_tier", 'may only be "auto" or "default": this server has one tier', code=UNSUPPORTED_VALUE)
    modalities = f.array("modalities")
    if modalities is not None and modalities != ["text"]:
        f.fail("modalities", 'may only be ["text"]: this server writes text', code=UNSUPPORTED_VALUE)


def parse_chat_tools(f: Fields) -> ToolSet | None:
    """tools ({"type": "function", "function": {...}}), tool_choice and parallel_tool_calls; None without tools."""
    raw = f.tools()
    tools: list[Tool] = []
    try:
        for i, entry in enumerate(raw):
            where = f"tools[{i}]"
            function = entry.get("function") if isinstance(entry, dict) else None
            if not isinstance(function, dict) or entry.get("type") != "function":
                raise ToolSpecError(f'{where} must be {{"type": "function", "function": {{"name", ...}}}}', where)
            refuse_unknown(entry, ("type", "function"), f"{where}.")
            refuse_unknown(function, ("name", "description", "parameters", "strict"), f"{where}.function.")
            tools.append(
                make_tool(
                    function.get("name"), function.get("description"), function.get("parameters"),
                    function.get("strict"), f"{where}.function", f"{where}.function.parameters",
                )
            )  # fmt: skip
        check_tool_names(tools, "tools")
        choice = make_choice(f.data.get("tool_choice"), tools, "tool_choice", nested=True)
        _refuse_unknown_in_choice(f.data.get("tool_choice"))  # after the shape check, whose message says more
    except ToolSpecError as exc:
        raise bad_request(str(exc), param=exc.param) from None
    parallel = f.boolean("parallel_tool_calls", default=True)
    return ToolSet(tuple(tools), choice, parallel) if tools else None


def _refuse_unknown_in_choice(choice: Any) -> None:
    """A named tool_choice {"type": "function", "function": {"name"}} carries nothing else."""
    if isinstance(choice, dict) and choice.get("type") == "function":
        refuse_unknown(choice, ("type", "function"), "tool_choice.")
        if isinstance(choice.get("function"), dict):
            refuse_unknown(choice["function"], ("name",), "tool_choice.function.")


def _message(raw: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object", param=where)
    f = Fields(raw, where + ".")
    refuse_unknown(raw, (*MESSAGE_FIELDS, *ECHOED_EMPTY), where + ".")
    for key in ECHOED_EMPTY:
        if raw.get(key) not in (None, []):
            f.fail(key, "is accepted only empty (as a client echoes it back); this server does not take it")
    role = f.string("role")
    if role is None or role not in ROLES:
        f.fail("role", f"must be one of {', '.join(ROLES)}")
    if "reasoning_content" in raw and role != "assistant":
        f.fail("reasoning_content", "is only accepted on assistant messages")
    if role == "assistant":
        f.string("reasoning_content")  # accepted (type-checked) and left out of the prompt
    message: dict[str, Any] = {"role": "system" if role == "developer" else role}
    tool_calls = raw.get("tool_calls") if role == "assistant" else None
    if "tool_calls" in raw and role != "assistant":
        f.fail("tool_calls", "is only accepted on assistant messages")
    message["content"] = _content(f, allow_missing=role == "assistant" and bool(tool_calls))
    if role == "tool":
        tool_call_id = f.string("tool_call_id")
        if not tool_call_id:
            f.fail("tool_call_id", "is required on tool messages")
        message["tool_call_id"] = tool_call_id
    name = f.string("name")
    if name is not None:
        message["name"] = name
    if tool_calls is not None:
        message["tool_calls"] = _tool_calls(tool_calls, where)
    return message


def _steps(messages: list[dict[str, Any]]) -> Iterator[Step]:
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message["role"] == "tool":
            yield Step("result", f"{where}.tool_call_id", message["tool_call_id"])
            continue
        yield Step("other", where)  # an assistant message with calls also closes the calls before it
        for j, call in enumerate(message.get("tool_calls") or []):
            yield Step("call", f"{where}.tool_calls[{j}]" + (".id" if call["id"] else ""), call["id"])


def _content(f: Fields, allow_missing: bool) -> str | list[dict[str, str]]:
    """A string, or text parts as given: the chat layer joins them, or hands them to a template that reads parts."""
    value = f.data.get("content")
    if value is None:
        if allow_missing:
            return ""
        f.fail("content", "is required")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        f.fail("content", "must be a string or an array of text parts")
    parts = []
    for i, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            f.fail(
                f"content[{i}]", 'must be a text part {"type": "text", "text": "..."} (other kinds are not supported)'
            )
        refuse_unknown(part, ("type", "text"), f"{f.prefix}content[{i}].")
        parts.append({"type": "text", "text": part["text"]})
    return parts


def _tool_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    """Templates read `function.arguments` as a mapping, as published templates expect: a JSON string is parsed."""
    if not isinstance(raw, list):
        raise bad_request(f"{where}.tool_calls must be an array", param=f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(raw):
        param = f"{where}.tool_calls[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            shape = '{"type": "function", "function": {"name", "arguments"}}'
            raise bad_request(f"{param} must be {shape}", param=param)
        if call.get("id") is not None and not isinstance(call.get("id"), str):
            raise bad_request(f"{param}.id must be a string", param=f"{param}.id")
        refuse_unknown(call, ("id", "type", "function"), f"{param}.")
        refuse_unknown(function, ("name", "arguments"), f"{param}.function.")
        if call.get("type", "function") != "function":
            raise bad_request(f'{param}.type must be "function"', param=f"{param}.type")
        arguments = function.get("arguments", {})
        calls.append(history_tool_call(call.get("id"), function["name"], arguments, f"{param}.function.arguments"))
    return calls
