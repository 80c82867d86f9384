"""One Responses API answer built from engine events: output items, the stream's typed events, usage.

Both the whole body and the stream come from the same builder, so a streamed response's final
`response.completed` object is exactly what the non-streaming route returns. Output events open
items in order: reasoning (a `<think>` block, with --reasoning-format auto), the assistant message,
and a `function_call` item per verified call (its arguments sent whole, as one delta, once the call
has been checked). A response without calls always has a message item, empty when generation
stopped inside the thinking, so `output_text` is defined for every plain answer.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from lexi.chat.output import OutputEvent
from lexi.chat.tool_calls import ToolCall
from lexi.engine.request import CompletionDelta
from lexi.engine.sampling import SamplingParams
from lexi.http.responses.request import ResponsesRequest


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
        self.completed_at: int | None = None
        self._seq = 0
        self._open: dict[str, Any] | None = None  # the item text is going into

    def event(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type, **fields, "sequence_number": self._seq}
        self._seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        return [
            self.event("response.created", response=self.body()),
            self.event("response.in_progress", response=self.body()),
        ]

    def feed(self, event: OutputEvent, logprobs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The stream events an output event causes; `logprobs`: entries of the text's tokens (when included)."""
        if event.kind == "tool_call":
            return self._close("completed") + self._call(event.call)
        kind, text = event.kind, event.text
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
        extra = {}
        if wanted == "message":
            extra = {"logprobs": logprobs or []}
            part["logprobs"] += logprobs or []
        events.append(self.event(name, item_id=item["id"], output_index=index, content_index=0, delta=text, **extra))
        return events

    def finish(self, last: CompletionDelta, reasoning_tokens: int) -> list[dict[str, Any]]:
        """Close the open item (adding an empty message if the answer had none), then the final lifecycle event."""
        length = last.finish_reason == "length"
        status = "incomplete" if length else "completed"
        events = self._close(status)
        if not self._has("message") and not self._has("function_call"):
            events += self._add("message") + self._close(status)
        self.status = status
        self.completed_at = int(time.time()) if status == "completed" else None
        self.incomplete_details = {"reason": "max_output_tokens"} if length else None
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

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        """A verified call: its item opens, its arguments arrive as one delta, then everything is done."""
        item = {
            "id": _id("fc"), "type": "function_call", "status": "in_progress",
            "arguments": "", "call_id": call.id, "name": call.name,
        }  # fmt: skip
        index = len(self.output)
        events = [self.event("response.output_item.added", output_index=index, item=_copy(item))]
        head = {"item_id": item["id"], "output_index": index}
        events.append(self.event("response.function_call_arguments.delta", **head, delta=call.arguments))
        events.append(self.event("response.function_call_arguments.done", **head, arguments=call.arguments))
        item.update(arguments=call.arguments, status="completed")
        self.output.append(item)
        events.append(self.event("response.output_item.done", output_index=index, item=_copy(item)))
        return events

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
            done = self.event("response.output_text.done", **head, text=part["text"], logprobs=part["logprobs"])
        item["status"] = status
        return [
            done,
            self.event("response.content_part.done", **head, part=_copy(part)),
            self.event("response.output_item.done", output_index=index, item=_copy(item)),
        ]

    def body(self) -> dict[str, Any]:
        """The `response` object as it stands: in progress at the start, final after `finish()`."""
        req = self.req
        tools = req.conversation.tools
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "error": None,
            "incomplete_details": self.incomplete_details,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": _copy(self.output),
            "parallel_tool_calls": req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": req.conversation.reasoning_effort, "summary": None},
            "store": req.store,
            "temperature": self.params.temperature,
            "presence_penalty": self.params.presence_penalty,
            "frequency_penalty": self.params.frequency_penalty,
            "top_logprobs": req.top_logprobs or 0,  # a number, never null (the Open Responses schema)
            "max_tool_calls": req.max_tool_calls,
            **req.identifiers,
            "text": {"format": _format_entry(req.conversation.response_format)},
            "tool_choice": req.tool_choice,
            "tools": [_tool_entry(t) for t in tools.tools] if tools else [],
            "top_p": self.params.top_p,
            "truncation": "disabled",
            "usage": self.usage,
            "metadata": req.metadata,
            "background": False,
        }


def _format_entry(fmt) -> dict[str, Any]:
    if fmt is None or fmt.kind != "json_schema":
        return {"type": fmt.kind if fmt is not None else "text"}
    return {
        "type": "json_schema", "name": fmt.name, "description": fmt.description,
        "schema": fmt.schema, "strict": fmt.strict,
    }  # fmt: skip


def _tool_entry(tool) -> dict[str, Any]:
    return {
        "type": "function", "name": tool.name, "description": tool.description,
        "parameters": tool.parameters, "strict": tool.strict,
    }  # fmt: skip


def _copy(value: Any) -> Any:
    """Events carry snapshots: the builder keeps appending to its own items."""
    return json.loads(json.dumps(value))
