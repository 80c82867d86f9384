"""Finding `<tool_call>...</tool_call>` blocks in streamed assistant text (a pure streaming parser).

`feed(text)` returns what that text releases, in order: plain text (str) and whole call blocks
(`CallBlock`); `finish()` releases the rest. What a block says is read elsewhere (`tool_calls.py`):
this parser only cuts, where the call constraint ends a call (`call_end`: never inside a value). Text
that could still be the start of `<tool_call>` is held back, so an opener split across generation events
never leaks into the content; so is whitespace at the end of plain text, which is dropped when a call or
the end of the output follows it. The same output therefore gives the same pieces however it is cut into
chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexi.chat.call_end import CallEnd, JsonValued
from lexi.held_back import held_back_length

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


@dataclass(frozen=True, slots=True)
class CallBlock:
    body: str  # the text between the tags
    raw: str  # the block as written, tags included: what the client sees if it is not a valid call
    closed: bool  # False when the output ended before </tool_call>
    lead: str = ""  # whitespace written just before the block: content again if the block is not a call


class ToolCallParser:
    __slots__ = ("_buffer", "_in_call", "_space", "_lead", "_json_valued", "_end")

    def __init__(self, json_valued: JsonValued | None = None) -> None:
        """`json_valued`: which function-form parameters hold JSON values (tool_calls.json_valued); None: all text."""
        self._buffer = ""  # text not yet released: a possible opener prefix, or the body of an open call
        self._in_call = False
        self._json_valued = json_valued
        self._end: CallEnd | None = None  # where the open call ends: a new one for each call
        self._space = ""  # trailing whitespace of released text, held until non-space text follows
        self._lead = ""  # the whitespace held when the open call started

    def feed(self, text: str) -> list[str | CallBlock]:
        out: list[str | CallBlock] = []
        self._buffer += text
        while self._buffer:
            if self._in_call:
                end = self._end.find(self._buffer)[0]
                if end < 0:
                    break
                body = self._buffer[:end]
                self._buffer = self._buffer[end + len(CLOSE) :]
                self._in_call = False
                out.append(CallBlock(body, OPEN + body + CLOSE, True, self._lead))
                continue
            start = self._buffer.find(OPEN)
            if start >= 0:
                self._text(out, self._buffer[:start])
                self._lead, self._space = self._space, ""  # whitespace right before a call is not content
                self._buffer = self._buffer[start + len(OPEN) :]
                self._in_call, self._end = True, CallEnd((CLOSE,), self._json_valued)
                continue
            keep = held_back_length(self._buffer, (OPEN,))
            self._text(out, self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            break
        return out

    def finish(self) -> list[str | CallBlock]:
        """The held text: an unclosed call comes out as a block with closed=False; final whitespace is dropped."""
        out: list[str | CallBlock] = []
        buffer, self._buffer = self._buffer, ""
        if self._in_call:
            self._in_call = False
            out.append(CallBlock(buffer, OPEN + buffer, False, self._lead))
        else:
            self._text(out, buffer)
        self._space = ""
        return out

    def _text(self, out: list[str | CallBlock], text: str) -> None:
        if not text:
            return
        body = text.rstrip()
        if body:
            released = self._space + body
            if out and isinstance(out[-1], str):
                out[-1] += released
            else:
                out.append(released)
            self._space = text[len(body) :]
        else:
            self._space += text
