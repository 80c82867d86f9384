"""Anthropic's Messages API replies: the message object, the stream events that build it, and errors.

One builder serves both: output events (lexi.chat.output) open content blocks in order, `thinking` (the
reasoning split), `text` and `tool_use` (a verified call, its `input` sent whole as one
`input_json_delta`), so a streamed message's blocks are exactly the non-streamed message's. Usage follows
Anthropic's accounting: `input_tokens` are the prompt tokens computed for this request and
`cache_read_input_tokens` those the prefix cache supplied; their sum is what count_tokens says.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from lexi.chat.output import OutputEvent
from lexi.chat.tool_calls import ToolCall
from lexi.engine.request import CompletionDelta
from lexi.http.errors import ApiError

# Anthropic's error types by status; a status it has no type for keeps the server's own (422 model_output_error,
# 501 not_supported_error). 503 (loading, shutting down) is Anthropic's "temporarily unavailable", overloaded_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_body(error: ApiError, request_id: str) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}, "request_id"}`; the message names the field at fault
    (Anthropic's "field: problem"), since the shape has no `param`."""
    message = error.message
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    kind = ERROR_TYPES.get(error.status, error.type)
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


PING = {"type": "ping"}
_NO_CACHE = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def overloaded(error: BaseException) -> BaseException:
    """A busy server (no slot within --queue-wait, which the OpenAI routes answer 429 inference_busy) is
    Anthropic's 529 overloaded_error: its 429 rate_limit_error speaks of an account's rate limit, which this
    server does not keep. Anthropic's clients retry both."""
    if isinstance(error, ApiError) and error.type == "inference_busy":
        return ApiError(529, error.message, type="overloaded_error", code="overloaded")
    return error


def usage(delta: CompletionDelta) -> dict[str, int]:
    cached = delta.cached_tokens
    return {
        "input_tokens": delta.prompt_tokens - cached,
        "output_tokens": delta.completion_tokens,
        "cache_creation_input_tokens": 0,  # nothing is written on request: every full prompt block is kept
        "cache_read_input_tokens": cached,
    }


def stop_reason(
    last: CompletionDelta, calls: list[ToolCall], stop_sequences: tuple[str, ...]
) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): a template's own stop string ends a turn, the client's is a stop_sequence."""
    if last.finish_reason == "length":
        return "max_tokens", None
    if calls:
        return "tool_use", None
    if last.stop_string is not None and last.stop_string in stop_sequences:
        return "stop_sequence", last.stop_string
    return "end_turn", None


def tool_use_id(call: ToolCall) -> str:
    """Anthropic's `toolu_` ids, made from the verified call's own."""
    return "toolu_" + call.id.removeprefix("call_")


class MessageBuilder:
    """`start(first)`, `feed(event)` and `finish(last, calls)` return the stream events they cause; `body()` is
    the message."""

    def __init__(self, model: str, stop_sequences: tuple[str, ...], show_thinking: bool = True) -> None:
        self.model = model
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.stop_sequences = stop_sequences
        self.show_thinking = show_thinking
        self.content: list[dict[str, Any]] = []
        self.open = False  # the last text or thinking block still takes deltas
        self.stop: tuple[str | None, str | None] = (None, None)
        self.usage: dict[str, int] = {}

    def body(self) -> dict[str, Any]:
        return self._message(self.content)

    def _message(self, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop[0],
            "stop_sequence": self.stop[1],
            "usage": self.usage,
        }

    def start(self, prompt_tokens: int) -> list[dict[str, Any]]:
        """message_start (content empty) and a ping, as Anthropic's stream begins: sent when the engine takes the
        request, before a slot is free, so the prefix cache's share of the prompt is not known yet; the usage
        of message_delta splits it (input_tokens, cache_read_input_tokens), and clients take that."""
        self.usage = {"input_tokens": prompt_tokens, "output_tokens": 0, **_NO_CACHE}
        return [{"type": "message_start", "message": self._message([])}, PING]

    def feed(self, event: OutputEvent) -> list[dict[str, Any]]:
        if event.kind == "tool_call":
            call = event.call
            block = {"type": "tool_use", "id": tool_use_id(call), "name": call.name}
            self.content.append({**block, "input": json.loads(call.arguments)})
            index = len(self.content) - 1
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            return [*self._close(), *self._started(index, {**block, "input": {}}), self._delta(index, delta)] + [
                {"type": "content_block_stop", "index": index}
            ]
        thinking = event.kind == "reasoning"
        text = event.text if self.show_thinking or not thinking else ""
        kind, key = ("thinking", "thinking") if thinking else ("text", "text")
        events: list[dict[str, Any]] = []
        if not (self.open and self.content[-1]["type"] == kind):
            events += self._close()
            self.content.append({"type": kind, key: "", **({"signature": ""} if thinking else {})})
            events += self._started(len(self.content) - 1, dict(self.content[-1]))
            self.open = True
        if text:
            self.content[-1][key] += text
            events.append(self._delta(len(self.content) - 1, {"type": f"{kind}_delta", key: text}))
        return events

    def finish(self, last: CompletionDelta, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """The open block closed, then message_delta (stop_reason, final usage) and message_stop."""
        self.stop = stop_reason(last, calls, self.stop_sequences)
        self.usage = usage(last)
        delta = {"stop_reason": self.stop[0], "stop_sequence": self.stop[1]}
        return [
            *self._close(),
            {"type": "message_delta", "delta": delta, "usage": self.usage},
            {"type": "message_stop"},
        ]

    def _started(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "content_block_start", "index": index, "content_block": block}]

    def _delta(self, index: int, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": delta}

    def _close(self) -> list[dict[str, Any]]:
        if not self.open:
            return []
        self.open = False
        return [{"type": "content_block_stop", "index": len(self.content) - 1}]
