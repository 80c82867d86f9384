"""Anthropic's `system` and `messages` turned into the chat messages templates read.

A user turn's `tool_result` blocks become tool messages (each named after the call it answers) and its
text a user message after them; an assistant turn's `tool_use` blocks become its `tool_calls`; `thinking`
and `redacted_thinking` blocks are checked and not replayed, as chat's `reasoning_content` is. A final
assistant turn with text is a prefill: the answer continues it. Images and documents are refused (the
model reads text), and calls and results are paired as on chat. `cache_control` is taken on every block
without effect: the prefix cache is automatic.

A client passes a response's content back as the next request's assistant turn (the SDKs' tool loop does), so
every field of Anthropic's own blocks is taken, checked for its type, and what is only echo is not read: a text
block's `citations`, a thought's `signature`, a call's `caller` (who made the call) and `toolset_name`. Fields
outside Anthropic's schema are still refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lexi.http.errors import bad_request
from lexi.http.parsing.fields import UNSUPPORTED_VALUE, Fields, refuse_unknown
from lexi.http.parsing.tool_pairing import Step, check_tool_pairing, history_tool_call

ROLES = ("user", "assistant")
BLOCK_FIELDS = {  # what each block may carry, and which role may send it
    "text": ("type", "text", "cache_control", "citations"),
    "tool_result": ("type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"),
    "tool_use": ("type", "id", "name", "input", "cache_control", "caller", "toolset_name"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}
USER_BLOCKS = ("text", "tool_result")
ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")
NOT_TEXT = ("image", "document", "search_result", "container_upload")  # what a text model cannot read
CACHE_TTLS = ("5m", "1h")
ERROR_PREFIX = "Error: "  # a tool_result with is_error: true reaches the model marked, whatever the template


@dataclass(frozen=True, slots=True)
class History:
    messages: list[dict[str, Any]]  # template form
    prefill: bool  # the last message is the assistant's text: the answer continues it


def check_cache_control(value: Any, where: str) -> None:
    """{"type": "ephemeral", "ttl"?}: accepted without effect (prefix reuse needs no marker here)."""
    if value is None:
        return
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise bad_request(f'{where} must be {{"type": "ephemeral"}}', param=where)
    refuse_unknown(value, ("type", "ttl"), f"{where}.")
    if value.get("ttl") is not None and value["ttl"] not in CACHE_TTLS:
        raise bad_request(f"{where}.ttl must be one of {', '.join(CACHE_TTLS)}", param=f"{where}.ttl")


def system_message(raw: Any) -> dict[str, Any] | None:
    """`system`: a string or text blocks; the leading system message (None when empty)."""
    if raw is None or raw == "" or raw == []:
        return None
    if isinstance(raw, str):
        return {"role": "system", "content": raw}
    if not isinstance(raw, list):
        raise bad_request("system must be a string or an array of text blocks", param="system")
    parts = [_text(block, f"system[{i}]", ("text",)) for i, block in enumerate(raw)]
    return {"role": "system", "content": parts}


def history(raw: Any) -> History:
    """`messages` as chat messages, calls paired with their results (a 400 naming the block at fault)."""
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages must be a non-empty array", param="messages")
    messages: list[dict[str, Any]] = []
    steps: list[Step] = []
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that answer them
    prefill = False
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object", param=where)
        refuse_unknown(message, ("role", "content"), f"{where}.")
        f = Fields(message, f"{where}.")
        role = f.string("role")
        if role not in ROLES:
            f.fail("role", f"must be one of {', '.join(ROLES)} (the system prompt goes in the top-level system)")
        content = message.get("content")
        blocks = _blocks(content, f"{where}.content", role)
        final = i == len(raw) - 1
        if not blocks and not (final and role == "assistant"):
            f.fail("content", "must not be empty (only a final assistant message may be)")
        if role == "user" and isinstance(content, str):
            messages.append({"role": "user", "content": content})  # as sent: a template may tell strings from parts
            steps.append(Step("other", where))
        elif role == "user":
            _user_turn(blocks, f"{where}.content", messages, steps, names)
        else:
            steps.append(Step("other", where))  # before its own calls: it closes the calls before it
            turn = _assistant_turn(blocks, f"{where}.content", steps, names)
            if isinstance(content, str):
                turn["content"] = content
            if final and not turn["content"] and not turn.get("tool_calls"):
                continue  # an empty final turn (or thought alone) asks for an ordinary answer
            prefill = final and not turn.get("tool_calls")
            messages.append(turn)
    check_tool_pairing(steps)
    return History(messages, prefill)


def _blocks(value: Any, where: str, role: str) -> list[dict[str, Any]]:
    """The content as checked blocks (a string is one text block)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or an array of content blocks", param=where)
    allowed = USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS
    for i, block in enumerate(value):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            raise bad_request(f'{at} must be a content block {{"type": ...}}', param=at)
        if kind in NOT_TEXT:
            message = f"{at}.type {kind!r} is not supported: this server serves a text model, send text blocks"
            raise bad_request(message, param=f"{at}.type", code=UNSUPPORTED_VALUE)
        if kind not in allowed:
            message = f"{at}.type must be one of {', '.join(allowed)} in a {role} message, got {kind!r}"
            raise bad_request(message, param=f"{at}.type")
        refuse_unknown(block, BLOCK_FIELDS[kind], f"{at}.")
        check_cache_control(block.get("cache_control"), f"{at}.cache_control")
        _check_echo(block, at)
    return value


def _check_echo(block: dict[str, Any], where: str) -> None:
    """The fields a response's block carries back that say nothing to the model: typed, then not read."""
    f = Fields(block, f"{where}.")
    f.string("toolset_name")
    f.tagged("caller")


def _text(block: Any, where: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """A text block as a chat text part (its citations, echo of a response, are not read)."""
    if not isinstance(block, dict) or block.get("type") not in allowed:
        raise bad_request(f'{where} must be a text block {{"type": "text", "text": "..."}}', param=where)
    refuse_unknown(block, BLOCK_FIELDS["text"], f"{where}.")
    check_cache_control(block.get("cache_control"), f"{where}.cache_control")
    f = Fields(block, f"{where}.")
    f.array("citations")  # a response's citations come back with its text: echo, the text is what is read
    text = f.string("text")
    if text is None:
        f.fail("text", "is required")
    return {"type": "text", "text": text}


def _user_turn(
    blocks: list[dict[str, Any]], where: str, messages: list, steps: list[Step], names: dict[str, str]
) -> None:
    """Tool results first (Anthropic requires them before any text), then the text as one user message."""
    parts: list[dict[str, str]] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        if block["type"] == "text":
            parts.append(_text(block, at, ("text",)))
            continue
        if parts:
            raise bad_request(f"{at}: tool_result blocks must come before any text in a user message", param=at)
        f = Fields(block, f"{at}.")
        call_id = f.string("tool_use_id")
        if not call_id:
            f.fail("tool_use_id", "is required")
        text = _result_text(block.get("content"), f"{at}.content")
        if f.boolean("is_error"):
            text = ERROR_PREFIX + text
        result = {"role": "tool", "tool_call_id": call_id, "content": text}
        if call_id in names:
            result["name"] = names[call_id]
        messages.append(result)
        steps.append(Step("result", f"{at}.tool_use_id", call_id))
    if parts:
        messages.append({"role": "user", "content": parts})
        steps.append(Step("other", where))


def _result_text(value: Any, where: str) -> str:
    """A tool_result's content: absent, a string, or text blocks (joined with a newline)."""
    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, list):
        raise bad_request(f"{where} must be a string or an array of text blocks", param=where)
    parts = []
    for i, block in enumerate(value):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in NOT_TEXT:
            message = f"{where}[{i}].type {kind!r} is not supported: this server serves a text model"
            raise bad_request(message, param=f"{where}[{i}].type", code=UNSUPPORTED_VALUE)
        parts.append(_text(block, f"{where}[{i}]", ("text",))["text"])
    return "\n".join(parts)


def _assistant_turn(blocks: list[dict[str, Any]], where: str, steps: list[Step], names: dict[str, str]) -> dict:
    """Text as the turn's content, tool_use blocks as its tool_calls, thoughts checked and dropped."""
    parts: list[dict[str, str]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        f = Fields(block, f"{at}.")
        kind = block["type"]
        if kind == "text":
            parts.append(_text(block, at, ("text",)))
        elif kind == "thinking":
            f.string("thinking")
            f.string("signature")
        elif kind == "redacted_thinking":
            f.string("data")
        else:
            call_id, name = f.string("id"), f.string("name")
            if not call_id:
                f.fail("id", "is required")
            if not name:
                f.fail("name", "is required")
            if not isinstance(block.get("input"), dict):
                f.fail("input", "must be a JSON object (the call's arguments)")
            calls.append(history_tool_call(call_id, name, block["input"], f"{at}.input"))
            steps.append(Step("call", f"{at}.id", call_id))
            names[call_id] = name
    turn: dict[str, Any] = {"role": "assistant", "content": parts if parts else ""}
    if calls:
        turn["tool_calls"] = calls
    return turn
