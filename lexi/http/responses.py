"""OpenAI response bodies and stream chunks for chat and completions, built from engine events."""

from __future__ import annotations

import time
import uuid
from typing import Any

from lexi.engine.request import CompletionDelta
from lexi.http.generation import chat_logprobs, completion_logprobs, finish_reason, usage


class ChatChunks:
    """The chunks of one streamed chat completion; every chunk shares id, created and model."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: dict | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(), "choices": [choice]}

    def usage_chunk(self, last: CompletionDelta) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": usage(last)}

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}


def chat_body(model: str, merged: CompletionDelta, reasoning: str | None, content: str, tokenizer, logprobs: bool):
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    choice = {
        "index": 0,
        "message": message,
        "logprobs": chat_logprobs(tokenizer, merged.logprobs) if logprobs else None,
        "finish_reason": finish_reason(merged),
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(merged),
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


def model_entry(name: str, created: int, public_id: str) -> dict[str, Any]:
    entry = {"id": name, "object": "model", "created": created, "owned_by": "lexi-engine"}
    if name != public_id:
        entry["parent"] = public_id  # an alias: the same resident model, not a second one
    return entry
