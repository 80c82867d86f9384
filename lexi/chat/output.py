"""One output pipeline for every chat-shaped route: text -> reasoning split -> tool calls -> typed events.

The chat and Responses handlers feed each engine event's text here and write the events that come
back; neither splits or parses anything itself. `feed(..., finish_reason=...)` feeds the last text
and then finishes, in that order, so no caller can finish before the final fragment (which would
drop or reorder a delimiter split across the last two events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lexi.chat.harmony import HarmonyCall, HarmonyParser
from lexi.chat.reasoning import ReasoningSplitter
from lexi.chat.response_format import ResponseFormat
from lexi.chat.schema_check import schema_validator, validation_error
from lexi.chat.tool_calls import ToolCall, ToolCallReader, json_valued
from lexi.chat.tool_parser import OPEN, CallBlock, ToolCallParser
from lexi.chat.tools import ToolSet


@dataclass(frozen=True, slots=True)
class OutputEvent:
    kind: str  # "reasoning" | "content" | "tool_call"
    text: str = ""
    call: ToolCall | None = None


class OutputError(ValueError):
    """The answer is not what the request demanded (the request fails rather than return it as if it were)."""

    param = "tool_choice"
    code = "invalid_tool_call"


class ToolCallError(OutputError):
    """tool_choice required a call and the model did not write a valid one (never a fake call)."""


class AnswerFormatError(OutputError):
    """response_format asked for JSON (of a schema) and the finished answer is not that."""

    param = "response_format"
    code = "invalid_json_output"


class ChatOutput:
    """One generation's output; `reasoning_tokens` counts the tokens generated inside the thought."""

    def __init__(
        self,
        splitter: ReasoningSplitter | None,
        tools: ToolSet | None,
        response_format: ResponseFormat | None = None,
        unsplit_thought: tuple[str, str] | None = None,
        harmony: HarmonyParser | None = None,
    ) -> None:
        """`unsplit_thought`: the prompt opened this thought and the output is not split (--reasoning-format
        none), so a JSON answer is checked after its closer. `harmony`: the output is gpt-oss's channels, which
        this parser splits in place of `splitter`; its calls are read in place of `<tool_call>` blocks."""
        self._splitter = splitter
        self._harmony = harmony
        self._format = response_format if response_format is not None and response_format.is_json else None
        self._validator = schema_validator(self._format.schema) if self._format and self._format.schema else None
        self._unsplit_thought = unsplit_thought
        self._content: list[str] = []  # kept only to check a JSON answer
        parse = tools is not None and tools.choice.mode != "none"
        self._tools = tools
        self._reader = ToolCallReader(tools) if parse else None
        self._parser = ToolCallParser(json_valued(tools)) if parse and harmony is None else None
        self.calls: list[ToolCall] = []
        self.reasoning_tokens = 0
        self.fed_reasoning = False  # the last feed's tokens were thought (their logprobs are not content's)
        self._reasoned = False  # any reasoning text came out
        self._after_call = False  # whitespace right after a call is framing, not content

    def feed(self, text: str, num_tokens: int = 0, finish_reason: str | None = None) -> list[OutputEvent]:
        """The events `text` releases; with `finish_reason` ("stop", "length", ...) also everything held."""
        final = finish_reason is not None
        if self._harmony is not None:
            events: list[OutputEvent] = []
            self._feed_harmony(events, text, num_tokens, finish_reason)
            return self._finished(events, finish_reason)
        if self._splitter is None:
            pieces = [("content", text)]
        else:
            thinking = self._splitter.thinking
            found = self._splitter.feed(text) + (self._splitter.finish() if final else [])
            self.fed_reasoning = thinking or self._splitter.thinking
            if self.fed_reasoning:
                self.reasoning_tokens += num_tokens
            pieces = [(e.kind, e.text) for e in found]
        events = []
        for kind, piece in pieces:
            if kind == "reasoning":
                self._reasoned = self._reasoned or bool(piece)
                _append(events, OutputEvent("reasoning", piece))
            elif self._parser is None:
                _append(events, OutputEvent("content", piece))
            else:
                self._parsed(events, self._parser.feed(piece), finish_reason)
        if final and self._parser is not None:
            self._parsed(events, self._parser.finish(), finish_reason)
        return self._finished(events, finish_reason)

    def _feed_harmony(self, events: list[OutputEvent], text: str, num_tokens: int, finish_reason: str | None) -> None:
        thinking = self._harmony.thinking
        found = self._harmony.feed(text) + (self._harmony.finish() if finish_reason is not None else [])
        self.fed_reasoning = thinking or self._harmony.thinking
        if self.fed_reasoning:
            self.reasoning_tokens += num_tokens
        for piece in found:
            if piece.kind == "call" and self._reader is not None:
                self._parsed(events, [piece.call], finish_reason)
            elif piece.kind == "call":  # no tool may be called: the look-alike is the assistant's text
                _append(events, OutputEvent("content", piece.call.raw))
            else:
                self._reasoned = self._reasoned or piece.kind == "reasoning"
                _append(events, OutputEvent(piece.kind, piece.text))

    def _finished(self, events: list[OutputEvent], finish_reason: str | None) -> list[OutputEvent]:
        """The checks at the end of the output: a forced call is there, a JSON answer is JSON."""
        final = finish_reason is not None
        if final and self._reader is not None:
            if self._tools.forced and not self.calls and finish_reason != "length":
                raise ToolCallError("tool_choice requires a tool call, and the model's answer holds none")
        if final and not self._reasoned:
            self.reasoning_tokens = 0
        if self._format is not None:
            self._content += [e.text for e in events if e.kind == "content"]
            if final and finish_reason == "stop":
                self._check_answer("".join(self._content))
        return events

    def _check_answer(self, text: str) -> None:
        if self._unsplit_thought is not None:
            text = text.rpartition(self._unsplit_thought[1])[2]
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise AnswerFormatError(f"response_format asks for JSON, and the answer is not JSON ({exc})") from None
        if self._format.kind == "json_object" and not isinstance(value, dict):
            raise AnswerFormatError("response_format json_object asks for a JSON object, and the answer is not one")
        problem = validation_error(self._validator, value) if self._validator is not None else None
        if problem is not None:
            raise AnswerFormatError(f"the answer does not match the response_format schema: {problem}")

    def _parsed(
        self, events: list[OutputEvent], pieces: list[str | CallBlock | HarmonyCall], finish_reason: str | None
    ) -> None:
        for piece in pieces:
            if isinstance(piece, str):
                if self._cut_short_call(finish_reason) and OPEN.startswith(piece.strip()):
                    continue  # the held start of `<tool_call>`: a later call that max_tokens cut short
                if self._after_call:  # the parser releases whitespace only together with the text after it
                    piece = piece.lstrip()
                    self._after_call = False
                _append(events, OutputEvent("content", piece))
                continue
            outcome = self._read(piece, finish_reason)
            if isinstance(outcome, ToolCall):
                self.calls.append(outcome)
                events.append(OutputEvent("tool_call", call=outcome))
                self._after_call = True
                continue
            self._after_call = False
            if not piece.closed and self._cut_short_call(finish_reason):
                continue  # a forced turn's output is only ever calls: a fragment of one is not text
            if self._tools.forced and not self.calls:
                raise ToolCallError(f"tool_choice requires a valid tool call, and {outcome}")
            # a look-alike: the assistant's text
            _append(events, OutputEvent("content", piece.lead + piece.raw))

    def _cut_short_call(self, finish_reason: str | None) -> bool:
        """Under a forced tool_choice the output is only ever calls: if max_tokens ends it, the unfinished rest is
        a call cut short (dropped; finish_reason "length" says so), not text. The constraint closes every call
        that fits the budget, so a first call is cut only when even the shortest one could not fit: then the
        answer is OpenAI's for that case, no call and empty content."""
        return finish_reason == "length" and self._tools.forced

    def _read(self, block: CallBlock | HarmonyCall, finish_reason: str | None) -> ToolCall | str:
        if not block.closed and finish_reason != "stop":
            return "the output ended inside a tool call (max_tokens reached)"
        limit = self._tools.call_limit
        if limit is not None and len(self.calls) >= limit:
            return f"the model wrote more calls than the {limit} allowed (parallel_tool_calls / max_tool_calls)"
        if isinstance(block, CallBlock):
            return self._reader.read(block.body)
        if block.name is None:
            return f"the model addressed {block.recipient!r}, which is not a declared function"
        return self._reader.read_arguments(block.name, block.body)


def _append(events: list[OutputEvent], event: OutputEvent) -> None:
    """Adjacent text of one kind travels as one event."""
    if not event.text:
        return
    if events and events[-1].kind == event.kind and event.kind != "tool_call":
        events[-1] = OutputEvent(event.kind, events[-1].text + event.text)
    else:
        events.append(event)
