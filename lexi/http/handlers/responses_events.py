"""One Responses API answer built from engine events: output items, the stream's typed events, usage.

Both the whole body and the stream come from the same builder, so a streamed response's final
`response.completed` object is exactly what the non-streaming route returns. Splitter output opens
items in order: reasoning (a `<think>` block, with --reasoning-format auto) first, then the
assistant message. The message item is always there, empty when generation stopped inside the
thinking, so `output_text` is defined for every response.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from lexi.engine.request import CompletionDelta
from lexi.engine.sampling import SamplingParams
from lexi.http.protocol_responses import ResponsesRequest


def sse_event(event: dict[str, Any]) -> bytes:
    """`event: <type>` then `data: {json}`: the Responses stream names each event (and sends no [DONE])."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    """`feed(kind, text)` and `finish(last)` return the stream events they cause; `body()` is the object."""

    def __init__(self, req: ResponsesRequest, model: str, params: SamplingParams) -> None:
        self.req = req
        self.model = model
        self.params = params
        self.id = _id("resp")
        self.created_at = int(time.time())
        self.output: list[dict[str, Any]] = []
        self.status = "in_progress"
        self.incomplete_details: dict[str, str] | None = None
        self.usage: dict[str, Any] | None = None
        self._seq = 0
        self._open: dict[str, Any] | None = None  # the item text is going into
        self._done_tokens = 0  # completion tokens seen so far (the engine's counts are running totals)
        self._thinking_tokens = 0  # tokens generated before the first visible content

    def event(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type, **fields, "sequence_number": self._seq}
        self._seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        return [
            self.event("response.created", response=self.body()),
            self.event("response.in_progress", response=self.body()),
        ]

    def count(self, delta: CompletionDelta, kinds: set[str]) -> None:
        """Tokens of a delta that released no content while no content came yet are reasoning tokens."""
        new = delta.completion_tokens - self._done_tokens
        self._done_tokens = delta.completion_tokens
        if "content" not in kinds and not self._has("message"):
            self._thinking_tokens += new

    def feed(self, kind: str, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        wanted = "reasoning" if kind == "reasoning" else "message"
        events = []
        if self._open is None or self._open["type"] != wanted:
            events += self._close("completed")
            events += self._add(wanted)
        item, index = self._open, len(self.output) - 1
        part = item["content"][0]
        part["text"] += text
        name = "response.reasoning_text.delta" if wanted == "reasoning" else "response.output_text.delta"
        extra = {} if wanted == "reasoning" else {"logprobs": []}
        events.append(self.event(name, item_id=item["id"], output_index=index, content_index=0, delta=text, **extra))
        return events

    def finish(self, last: CompletionDelta) -> list[dict[str, Any]]:
        """Close the open item (adding an empty message if none came), then the final lifecycle event."""
        length = last.finish_reason == "length"
        events = []
        if self._open is not None and self._open["type"] == "message":
            events += self._close("incomplete" if length else "completed")
        else:
            events += self._close("incomplete" if length else "completed")
            events += self._add("message")
            events += self._close("incomplete" if length else "completed")
        self.status = "incomplete" if length else "completed"
        self.incomplete_details = {"reason": "max_output_tokens"} if length else None
        reasoning_tokens = self._thinking_tokens if self._has("reasoning") else 0
        self.usage = {
            "input_tokens": last.prompt_tokens,
            "input_tokens_details": {"cached_tokens": last.cached_tokens},
            "output_tokens": last.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, last.completion_tokens)},
            "total_tokens": last.prompt_tokens + last.completion_tokens,
        }
        events.append(self.event(f"response.{self.status}", response=self.body()))
        return events

    def _has(self, kind: str) -> bool:
        return any(item["type"] == kind for item in self.output)

    def _add(self, kind: str) -> list[dict[str, Any]]:
        if kind == "reasoning":
            item = {"id": _id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {"id": _id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        index = len(self.output)
        events = [self.event("response.output_item.added", output_index=index, item=_copy(item))]
        item["content"].append(part)
        self.output.append(item)
        self._open = item
        events.append(
            self.event(
                "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=_copy(part)
            )
        )
        return events

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.output.index(item)
        part = item["content"][0]
        head = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "reasoning":
            done = self.event("response.reasoning_text.done", **head, text=part["text"])
        else:
            done = self.event("response.output_text.done", **head, text=part["text"], logprobs=[])
        item["status"] = status
        return [
            done,
            self.event("response.content_part.done", **head, part=_copy(part)),
            self.event("response.output_item.done", output_index=index, item=_copy(item)),
        ]

    def body(self) -> dict[str, Any]:
        """The `response` object as it stands: in progress at the start, final after `finish()`."""
        req = self.req
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "error": None,
            "incomplete_details": self.incomplete_details,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": _copy(self.output),
            "parallel_tool_calls": req.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": {"effort": req.reasoning_effort, "summary": None},
            "store": False,
            "temperature": self.params.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": req.tool_choice,
            "tools": [],
            "top_p": self.params.top_p,
            "truncation": "disabled",
            "usage": self.usage,
            "metadata": req.metadata,
            "background": False,
        }


def _copy(value: Any) -> Any:
    """Events carry snapshots: the builder keeps appending to its own items."""
    return json.loads(json.dumps(value))
