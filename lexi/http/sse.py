"""Server-sent events: OpenAI's `data: {json}` frames and `data: [DONE]`, and frames that name their event."""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]\n\n"
HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def named_frame(event: dict[str, Any]) -> bytes:
    """`event: <type>` then `data: {json}`: streams that name each event (Anthropic's; OpenAI's Responses)."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
