"""Chat completion and text completion bodies and stream chunks, built from engine and output events.

(The Responses API's objects are built in `handlers/responses_events.py`.)
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from lexi.chat.tool_calls import ToolCall
from lexi.engine.request import CompletionDelta
from lexi.http.generation import chat_logprobs, completion_logprobs, finish_reason, usage


def tool_call_entry(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    """A call as chat returns it; in a stream each call also carries its `index`."""
    entry: dict[str, Any] = {} if index is None else {"index": index}
    entry.update(id=call.id, type="function", function={"name": call.name, "arguments": call.arguments})
    return entry


def chat_finish_reason(last: CompletionDelta, calls: list[ToolCall]) -> str:
    reason = finish_reason(last)
    return "tool_calls" if calls and reason == "stop" else reason


def chat_usage(last: CompletionDelta, reasoning_tokens: int) -> dict[str, Any]:
    return {**usage(last), "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}


class ChatChunks:
    """The chunks of one streamed chat completion; every chunk shares id, created and model."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(), "choices": [choice]}

    def usage_chunk(self, last: CompletionDelta, reasoning_tokens: int) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": chat_usage(last, reasoning_tokens)}

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}


def chat_body(
    model: str, merged: CompletionDelta, reasoning: str, content: str, calls: list[ToolCall], reasoning_tokens: int,
    tokenizer, logprobs: bool,
) -> dict[str, Any]:  # fmt: skip
    """content is null when the answer is calls alone, as OpenAI returns it."""
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [tool_call_entry(call) for call in calls]
    choice = {
        "index": 0,
        "message": message,
        "logprobs": chat_logprobs(tokenizer, merged.logprobs) if logprobs else None,
        "finish_reason": chat_finish_reason(merged, calls),
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chat_usage(merged, reasoning_tokens),
    }


class CompletionChunks:
    def __init__(self, model: str) -> None:
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def chunk(self, text: str, finish: str | None = None, logprobs: dict | None = None) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(), "choices": [choice]}

    def usage_chunk(self, last: CompletionDelta) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": usage(last)}

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model}


def completion_body(model: str, merged: CompletionDelta, prefix: str, tokenizer, logprobs: bool) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": prefix + merged.text,
        "logprobs": completion_logprobs(tokenizer, merged.logprobs, len(prefix)) if logprobs else None,
        "finish_reason": finish_reason(merged),
    }
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(merged),
    }
