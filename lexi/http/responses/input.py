"""/v1/responses `input` items turned into chat messages: messages (with parts and an assistant's `phase`),
`function_call` items joined to the assistant turn, `function_call_output` items as tool messages, `reasoning`
items accepted and not replayed; every item's fields checked, and calls paired with their results.
"""

from __future__ import annotations

from typing import Any

from lexi.http.errors import bad_request
from lexi.http.parsing.fields import Fields, refuse_unknown
from lexi.http.parsing.tool_pairing import Step, check_tool_pairing, history_tool_call

ROLES = ("user", "system", "developer", "assistant")
# OpenAI's own fields on call items that say who called and where the function lives: typed, then not read (the
# function's name is what pairs and renders a call)
ECHO_FIELDS = ("caller", "namespace")
ITEM_FIELDS = {  # what each input item may carry (ids and statuses come back with items a client echoes)
    "message": ("type", "role", "content", "id", "status", "phase"),
    "function_call": ("type", "call_id", "name", "arguments", "id", "status", *ECHO_FIELDS, "async"),
    "function_call_output": ("type", "call_id", "output", "id", "status", *ECHO_FIELDS, "name"),
    "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status"),
}
PHASES = ("commentary", "final_answer")  # an assistant message's phase: templates that read it get it as "phase"


def input_items(raw: Any) -> list[dict[str, Any]]:
    """`input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_request("input must be a string or a non-empty array of input items", param="input")
    return raw


def _check_echo(f: Fields) -> None:
    f.string("namespace")
    f.string("name")
    f.boolean("async")
    f.tagged("caller")


def input_messages(raw: list[Any], continued: int = 0) -> list[dict[str, Any]]:
    """Message items as chat messages; function_call items join the assistant turn before them (or open
    one), function_call_output items become tool messages named after their call. The first `continued`
    items are the continued response's (checked when it was stored): a fault there names previous_response_id."""
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call_id -> function name, for the results that answer them
    steps: list[Step] = []
    for i, item in enumerate(raw):
        where = f"input[{i - continued}]" if i >= continued else "previous_response_id"
        call_param = f"{where}.call_id" if i >= continued else where  # what a pairing fault names
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object", param=where)
        f = Fields(item, where + ".")
        kind = f.string("type", default="message")
        if kind in ITEM_FIELDS:
            refuse_unknown(item, ITEM_FIELDS[kind], where + ".")
            _check_echo(f)
        if kind == "reasoning":
            continue  # accepted and not replayed, as on the chat route
        if kind == "message":
            role = f.string("role")
            if role not in ROLES:
                f.fail("role", f"must be one of {', '.join(ROLES)}")
            message = {"role": "system" if role == "developer" else role, "content": _content(f)}
            phase = f.string("phase", choices=PHASES)
            if phase is not None:
                if role != "assistant":
                    f.fail("phase", f"is only taken on an assistant message, got one on a {role} message")
                message["phase"] = phase
            messages.append(message)
            steps.append(Step("other", where))
        elif kind == "function_call":
            call_id, name = _required_string(f, "call_id"), _required_string(f, "name")
            steps.append(Step("call", call_param, call_id))
            names[call_id] = name
            call = history_tool_call(call_id, name, _required_string(f, "arguments"), f.name("arguments"))
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = _required_string(f, "call_id")
            steps.append(Step("result", call_param, call_id))
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
    check_tool_pairing(steps)
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


PART_FIELDS = {"input_text": ("type", "text"), "text": ("type", "text"), "refusal": ("type", "refusal"),
               "output_text": ("type", "text", "annotations", "logprobs")}  # fmt: skip


def _content(f: Fields) -> str | list[dict[str, str]]:
    """A string, or text parts (the chat layer joins them, or gives them to a template that reads parts)."""
    value = f.data.get("content")
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        f.fail("content", "must be a string or an array of text parts")
    parts = []
    for i, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        key = "refusal" if kind == "refusal" else "text"
        if kind not in PART_FIELDS or not isinstance(part.get(key), str):
            f.fail(f"content[{i}]", f"must be an input_text or output_text part (no other kind), got {kind!r}")
        refuse_unknown(part, PART_FIELDS[kind], f"{f.prefix}content[{i}].")
        parts.append({"type": "text", "text": part[key]})
    return parts
