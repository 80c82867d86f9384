"""Splitting chat output that opens with `<think>...</think>` into reasoning and visible content.

The thought-channel form (`<|channel>thought ... <channel|>`, Gemma 4's template) is separated the
same way. A pure streaming parser: `feed(text)` returns the events that text releases, `finish()` the rest.
Text that could still be the start of a delimiter is held back, so a `<think>` or `</think>` split
across generation events never shows up in either field. Whitespace just inside the delimiters
(the newline models write after `<think>` and around `</think>`) is dropped, so a chunked stream
and the whole text give the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from lexi.held_back import held_back_length

OPEN = "<think>"
CLOSE = "</think>"
# (opener, closer) pairs, tried in order at the start of the output
DELIMITERS = ((OPEN, CLOSE), ("<|channel>thought", "<channel|>"))


def opened_in_prompt(prompt: str) -> tuple[str, str] | None:
    """The pair whose opener ends the prompt (a template that forces thinking on), else None."""
    tail = prompt.rstrip()
    return next((pair for pair in DELIMITERS if tail.endswith(pair[0])), None)


@dataclass(frozen=True, slots=True)
class ReasoningEvent:
    kind: str  # "reasoning" | "content"
    text: str


class ReasoningSplitter:
    """States: "start" (might still open a thought), "reasoning", "content".

    `thinking_open=True` (or an explicit `opened` pair) is for a prompt that already ends with the
    opener (a template that forces thinking on): the output starts inside the reasoning.
    """

    __slots__ = ("_state", "_buffer", "_pending_space", "_at_segment_start", "_close")

    def __init__(self, thinking_open: bool = False, opened: tuple[str, str] | None = None) -> None:
        if thinking_open and opened is None:
            opened = DELIMITERS[0]
        self._state = "reasoning" if opened else "start"
        self._close = opened[1] if opened else CLOSE
        self._buffer = ""  # held back: a possible delimiter prefix (or the undecided start)
        self._pending_space = ""  # reasoning's trailing whitespace: dropped if the closer follows
        self._at_segment_start = opened is not None  # leading whitespace of a segment is dropped

    @property
    def thinking(self) -> bool:
        """Inside a thought: text fed now is reasoning (or its closer)."""
        return self._state == "reasoning"

    def feed(self, text: str) -> list[ReasoningEvent]:
        events: list[ReasoningEvent] = []
        self._buffer += text
        while self._buffer:
            if self._state == "start":
                stripped = self._buffer.lstrip()
                if any(len(stripped) < len(o) and o.startswith(stripped) for o, _ in DELIMITERS):
                    return events  # still undecided
                pair = next((p for p in DELIMITERS if stripped.startswith(p[0])), None)
                if pair is not None:
                    self._buffer = stripped[len(pair[0]) :]
                    self._state, self._at_segment_start, self._close = "reasoning", True, pair[1]
                else:
                    self._state = "content"
                continue
            if self._state == "content":
                self._emit(events, "content", self._buffer)
                self._buffer = ""
                break
            # reasoning
            cut = self._buffer.find(self._close)
            if cut >= 0:
                self._emit_reasoning(events, self._buffer[:cut], final=True)
                self._buffer = self._buffer[cut + len(self._close) :]
                self._state, self._at_segment_start = "content", True
                continue
            keep = held_back_length(self._buffer, (self._close,))
            self._emit_reasoning(events, self._buffer[: len(self._buffer) - keep], final=False)
            self._buffer = self._buffer[len(self._buffer) - keep :]
            break
        return events

    def finish(self) -> list[ReasoningEvent]:
        """Everything still held: generation stopped. An unclosed <think> leaves content empty."""
        events: list[ReasoningEvent] = []
        buffer, self._buffer = self._buffer, ""
        if self._state == "start":
            self._emit(events, "content", buffer)
        elif self._state == "reasoning":
            self._emit_reasoning(events, buffer, final=True)
        elif buffer:
            self._emit(events, "content", buffer)
        return events

    def _emit_reasoning(self, events: list[ReasoningEvent], text: str, final: bool) -> None:
        text = self._pending_space + text
        self._pending_space = ""
        if final:
            text = text.rstrip()
        else:
            body = text.rstrip()
            self._pending_space = text[len(body) :]
            text = body
        self._emit(events, "reasoning", text)

    def _emit(self, events: list[ReasoningEvent], kind: str, text: str) -> None:
        if self._at_segment_start:
            text = text.lstrip()
            if not text:
                return
            self._at_segment_start = False
        if not text:
            return
        if events and events[-1].kind == kind:
            events[-1] = ReasoningEvent(kind, events[-1].text + text)
        else:
            events.append(ReasoningEvent(kind, text))


def split_reasoning(text: str, thinking_open: bool = False, opened: tuple[str, str] | None = None) -> tuple[str, str]:
    """(reasoning, content) of a whole output: the non-streaming form of the same rules."""
    splitter = ReasoningSplitter(thinking_open, opened)
    events = splitter.feed(text) + splitter.finish()
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    content = "".join(e.text for e in events if e.kind == "content")
    return reasoning, content
