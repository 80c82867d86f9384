"""One streamed request as a browser or SDK would make it, over a plain asyncio socket (no client library).

A plain socket lets the soak see exactly what went over the wire (status, each SSE frame, where the
stream ended) and close the connection mid-stream the way a client that goes away does.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

FINISHED_EVENTS = ("response.completed", "response.incomplete")  # the Responses stream's last event


@dataclass(slots=True)
class Result:
    route: str
    status: int = 0  # HTTP status; 0 when the connection failed before one came
    finished: bool = False  # a finish_reason (chat, completions) or response.completed/incomplete (responses)
    disconnected: bool = False  # this client hung up on purpose, mid-stream
    error: str | None = None  # an error frame, a broken connection, or a refused request's message
    token_times: list[float] = field(default_factory=list)  # arrival of each frame carrying text
    sent: float = 0.0
    ended: float = 0.0

    @property
    def lost(self) -> bool:
        """A stream the server accepted that ended without its finish (and not because the client left)."""
        return self.status == 200 and not self.disconnected and not self.finished

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.sent if self.token_times else None

    def gaps(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]


class _Chunked:
    """Incremental HTTP/1.1 chunked-transfer decoding."""

    def __init__(self) -> None:
        self.raw = b""
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self.raw += data
        out = b""
        while not self.done:
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.raw[:line_end].split(b";")[0], 16)
            if size == 0:
                self.done = True
                break
            if len(self.raw) < line_end + 2 + size + 2:
                break
            out += self.raw[line_end + 2 : line_end + 2 + size]
            self.raw = self.raw[line_end + 2 + size + 2 :]
        return out


def _frame_facts(route: str, frame: str) -> tuple[bool, bool, str | None]:
    """(carries text, is the finish, error message) of one SSE frame."""
    event, data = None, None
    for line in frame.split("\n"):
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
    if data is None or data == "[DONE]":
        return False, False, None
    payload = json.loads(data)
    if event == "error" or "error" in payload:
        error = payload.get("error", payload)
        return False, False, str(error.get("message") if isinstance(error, dict) else error)
    if route == "responses":
        return event == "response.output_text.delta" and bool(payload.get("delta")), event in FINISHED_EVENTS, None
    choices = payload.get("choices") or []
    if not choices:
        return False, False, None
    choice = choices[0]
    delta = choice.get("delta") or {}
    text = choice.get("text") if route == "completions" else (delta.get("content") or delta.get("reasoning_content"))
    return bool(text), choice.get("finish_reason") is not None, None


async def stream_request(
    url: str, route: str, path: str, body: dict, api_key: str | None, hang_up_after: int | None, timeout: float
) -> Result:
    """POST `body` with stream=true; `hang_up_after` text frames, close the socket (a client going away)."""
    result = Result(route)
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Connection: close",
    ]
    if api_key:
        head.append(f"Authorization: Bearer {api_key}")
    result.sent = time.monotonic()
    writer = None
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        await asyncio.wait_for(_read(reader, result, hang_up_after), timeout)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        result.error = result.error or f"{type(exc).__name__}: {exc}"
    except TimeoutError:
        result.error = f"no end within {timeout:g} s"
    finally:
        result.ended = time.monotonic()
        if writer is not None:
            writer.close()
    return result


async def _read(reader: asyncio.StreamReader, result: Result, hang_up_after: int | None) -> None:
    status_line = await reader.readline()
    result.status = int(status_line.split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    if result.status != 200:
        result.error = (await reader.read()).decode("utf-8", "replace")[-300:]
        return
    chunked, pending = _Chunked(), b""
    while not chunked.done:
        data = await reader.read(65536)
        if not data:
            break
        pending += chunked.feed(data)
        while b"\n\n" in pending:  # whole frames only: a read may end inside a UTF-8 sequence
            frame, pending = pending.split(b"\n\n", 1)
            has_text, finish, error = _frame_facts(result.route, frame.decode("utf-8"))
            if error is not None:
                result.error = error
            if finish:
                result.finished = True
            if has_text:
                result.token_times.append(time.monotonic())
                if hang_up_after is not None and len(result.token_times) >= hang_up_after:
                    result.disconnected = True
                    return
