"""Chat completion bodies and stream chunks, for any number of choices (the envelope: lexi.http.envelope)."""

from __future__ import annotations

from typing import Any

from lexi.chat.tool_calls import ToolCall
from lexi.engine.request import CompletionDelta
from lexi.http.envelope import Envelope, StreamChunks
from lexi.http.generation.sampling import finish_reason, usage


def reply_tool_call(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    """A call as chat returns it; in a stream each call also carries its `index`."""
    entry: dict[str, Any] = {} if index is None else {"index": index}
    entry.update(id=call.id, type="function", function={"name": call.name, "arguments": call.arguments})
    return entry


def chat_finish_reason(last: CompletionDelta, calls: list[ToolCall]) -> str:
    reason = finish_reason(last)
    return "tool_calls" if calls and reason == "stop" else reason


def chat_usage(lasts: list[CompletionDelta], reasoning_tokens: int) -> dict[str, Any]:
    return {**usage([lasts]), "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}


class ChatChunks(StreamChunks):
    def __init__(self, model: str, fingerprint: str, include_usage: bool = False) -> None:
        super().__init__("chatcmpl", "chat.completion.chunk", model, fingerprint, include_usage)

    def chunk(self, index: int, delta: dict[str, Any], finish: str | None = None, logprobs=None) -> dict[str, Any]:
        return self.body(choices=[{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}])

    def usage_chunk(self, lasts: list[CompletionDelta], reasoning_tokens: int) -> dict[str, Any]:
        return self.body(choices=[], usage=chat_usage(lasts, reasoning_tokens))


def chat_body(
    model: str, fingerprint: str, choices: list[dict[str, Any]], lasts: list[CompletionDelta], reasoning_tokens: int
) -> dict[str, Any]:
    return Envelope("chatcmpl", "chat.completion", model, fingerprint).body(
        choices=choices, usage=chat_usage(lasts, reasoning_tokens)
    )


def chat_choice(
    index: int, reasoning: str, content: str, calls: list[ToolCall], last: CompletionDelta, logprobs: dict | None
) -> dict[str, Any]:
    """content is null when the answer is calls alone, as OpenAI returns it."""
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [reply_tool_call(call) for call in calls]
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": chat_finish_reason(last, calls)}
