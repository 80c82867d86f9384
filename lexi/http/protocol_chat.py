"""POST /v1/chat/completions bodies: messages checked and turned into what chat templates read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lexi.chat.template import REASONING_EFFORTS, check_template_kwargs
from lexi.http.config import SamplingDefaults
from lexi.http.errors import bad_request
from lexi.http.protocol import Fields, SamplingRequest, parse_sampling, stream_options

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str | None
    messages: list[dict[str, Any]]  # template form: content is a string, reasoning_content dropped
    tools: list[dict[str, Any]] | None
    sampling: SamplingRequest
    stream: bool
    include_usage: bool
    template_kwargs: dict[str, Any]
    reasoning_effort: str | None


def parse_chat_request(body: dict[str, Any], defaults: SamplingDefaults) -> ChatRequest:
    f = Fields(body)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        f.fail("model", "must be a string")
    raw = f.array("messages")
    if not raw:
        raise bad_request("messages must be a non-empty array", param="messages")
    messages = [_message(m, i) for i, m in enumerate(raw)]
    kwargs = f.obj("chat_template_kwargs") or {}
    try:
        check_template_kwargs(kwargs, "chat_template_kwargs")
    except ValueError as exc:
        raise bad_request(str(exc), param="chat_template_kwargs") from None
    tools = f.array("tools")
    if tools is not None and any(not isinstance(t, dict) for t in tools):
        f.fail("tools", "must be an array of objects")
    stream, include_usage = stream_options(f)
    return ChatRequest(
        model=model,
        messages=messages,
        tools=tools or None,
        sampling=parse_sampling(f, defaults, chat=True),
        stream=stream,
        include_usage=include_usage,
        template_kwargs=dict(kwargs),
        reasoning_effort=f.string("reasoning_effort", choices=REASONING_EFFORTS),
    )


def _message(raw: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object", param=where)
    f = Fields(raw, where + ".")
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


def _content(f: Fields, allow_missing: bool) -> str:
    value = f.data.get("content")
    if value is None:
        if allow_missing:
            return ""
        f.fail("content", "is required")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        f.fail("content", "must be a string or an array of text parts")
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            f.fail(
                f"content[{i}]", 'must be a text part {"type": "text", "text": "..."} (other kinds are not supported)'
            )
        texts.append(part["text"])
    return "".join(texts)


def _tool_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    """Templates read `function.arguments` as an object, so a JSON string is parsed (kept as text if not JSON)."""
    if not isinstance(raw, list):
        raise bad_request(f"{where}.tool_calls must be an array", param=f"{where}.tool_calls")
    calls = []
    for i, call in enumerate(raw):
        param = f"{where}.tool_calls[{i}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(
                f"{param} must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}", param=param
            )
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass
        calls.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return calls
