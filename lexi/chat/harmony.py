"""gpt-oss's harmony output split by channel: a pure streaming parser.

The prompt ends with `<|start|>assistant`; the model then writes messages, each a header and a body:
    <|channel|>analysis<|message|>THOUGHT<|end|>
    <|start|>assistant<|channel|>final<|message|>ANSWER                                   (then <|return|>)
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}   (then <|call|>)
    <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}
The recipient (`to=`) may stand before or after the channel. <|return|> and <|call|> end generation (they are
not text); written as text, they end a message as <|end|> does (a call's, outside its JSON strings). A message
goes where its header says:
- a recipient other than the assistant: a call, its body held whole and read elsewhere (`tool_calls.py`);
- `final`, and `commentary` without a recipient (a preamble the user is meant to see): content;
- `analysis`, any other or missing channel, and a message in another role's name (a tool result the model
  makes up, `<|start|>functions.NAME to=assistant...`): reasoning, so none of it reaches content.
Headers are framing, never text. A body is released as it arrives, less what may still be the start of a
terminator. Output that opens no message within MAX_HEADER characters is not harmony: it is content as written.
With `keep_frame` (--reasoning-format none) nothing is split: every message but a call is content, framing
included, so the content is the generated text as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lexi.chat.call_end import CallEnd
from lexi.held_back import held_back_length

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
TERMINATORS = (END, CALL, RETURN)
TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN)
MAX_HEADER = 256  # a real header (role, channel, recipient, content type) is under ~120 characters
FUNCTIONS = "functions."

_CHANNEL = re.compile(r"<\|channel\|>([^\s<]*)")
_RECIPIENT = re.compile(r"(?:^|\s|>)to=([^\s<]+)")
_ROLE = re.compile(r"\s*<\|start\|>([^\s<]*)")


@dataclass(frozen=True, slots=True)
class HarmonyCall:
    """A message addressed to a tool: `name` is the function it calls (None: a recipient outside `functions.`)."""

    recipient: str
    name: str | None
    body: str  # the arguments as written
    raw: str  # header and body as written: the assistant's text again if the call is not valid
    closed: bool  # a terminator was written as text; else the output ended in the body (<|call|> is not text: the
    # finish reason tells the usual stop from a cut by max_tokens)
    lead: str = ""  # (ChatOutput reads a call block's lead: a harmony call has none)


@dataclass(frozen=True, slots=True)
class HarmonyPiece:
    kind: str  # "reasoning" | "content" | "call"
    text: str = ""
    call: HarmonyCall | None = None


def route_of(header: str) -> str:
    """Where a message with this header goes: "call", "content" or "reasoning"."""
    role = _ROLE.match(header)
    if role is not None and role.group(1) not in ("", "assistant"):
        return "reasoning"
    recipient = _recipient(header)
    if recipient is not None and recipient != "assistant":
        return "call"
    channels = _CHANNEL.findall(header)
    # the last channel counts: gpt-oss sometimes writes a stray `<|channel|>commentary` before `<|channel|>analysis`
    return "content" if channels and channels[-1] in ("final", "commentary") else "reasoning"


def _recipient(header: str) -> str | None:
    found = _RECIPIENT.findall(header)
    return found[-1] if found else None


def opened_message(prompt: str) -> str | None:
    """The header of the message the prompt leaves open (continue_final_message), else None: the output starts with
    a header."""
    at = prompt.rfind(START)
    tail = prompt[at + len(START) :] if at >= 0 else ""
    header, sep, body = tail.partition(MESSAGE)
    if not sep or any(t in body for t in TERMINATORS):
        return None
    return header


class HarmonyParser:
    """States: "header" (framing held until <|message|>), "body", "plain" (not harmony: content as written)."""

    __slots__ = ("_state", "_buffer", "_header", "_route", "_keep_frame", "_said", "_fresh", "_call_end")

    def __init__(self, opened: str | None = None, keep_frame: bool = False) -> None:
        """`opened`: the header of a message the prompt opened (the output starts in its body)."""
        self._keep_frame = keep_frame
        self._buffer = ""  # held: the header so far, a body's possible terminator start, or a call's whole body
        self._said: set[str] = set()  # kinds that earlier messages wrote text of
        self._fresh = True  # the current message has written no text yet
        self._state, self._header, self._route = "header", "", ""
        self._call_end = CallEnd(TERMINATORS)  # a call's body ends outside its JSON strings (call_end)
        if opened is not None:
            self._state, self._header, self._route = "body", opened, route_of(opened)

    @property
    def thinking(self) -> bool:
        """Inside a thought's body: text fed now is reasoning."""
        return self._state == "body" and self._route == "reasoning"

    def feed(self, text: str) -> list[HarmonyPiece]:
        out: list[HarmonyPiece] = []
        self._buffer += text
        while self._buffer:
            if self._state == "plain":
                self._text(out, "content", self._buffer)
                self._buffer = ""
            elif self._state == "header":
                at = self._buffer.find(MESSAGE)
                if at >= 0:
                    header, self._buffer = self._buffer[:at], self._buffer[at + len(MESSAGE) :]
                    self._state, self._header, self._route, self._fresh = "body", header, route_of(header), True
                    self._call_end = CallEnd(TERMINATORS)
                    if self._keep_frame and self._route != "call":
                        self._text(out, "content", header + MESSAGE)
                    continue
                if len(self._buffer) > MAX_HEADER:
                    self._state, self._fresh = "plain", True
                    continue
                break
            else:
                cut, terminator = (
                    self._call_end.find(self._buffer) if self._route == "call" else _first_terminator(self._buffer)
                )
                if cut >= 0:
                    self._close(out, self._buffer[:cut], terminator)
                    self._buffer = self._buffer[cut + len(terminator) :]
                    continue
                if self._route != "call":
                    keep = held_back_length(self._buffer, TERMINATORS)
                    self._text(out, self._route, self._buffer[: len(self._buffer) - keep])
                    self._buffer = self._buffer[len(self._buffer) - keep :]
                break
        return out

    def finish(self) -> list[HarmonyPiece]:
        """The rest: an open body ends here (a call with closed=False: the end of generation, <|call|>, is not text,
        so whether it was cut short is the finish reason's to say); an unfinished header is framing, dropped, unless
        it holds no harmony at all (then the output was plain text)."""
        out: list[HarmonyPiece] = []
        buffer, self._buffer = self._buffer, ""
        if self._state == "body":
            self._close(out, buffer, None)
        elif self._state == "plain" or self._keep_frame or not _looks_like_header(buffer):
            self._text(out, "content", buffer)
        self._state = "header"
        return out

    def _close(self, out: list[HarmonyPiece], body: str, terminator: str | None) -> None:
        if self._route == "call":
            recipient = _recipient(self._header) or ""
            name = recipient[len(FUNCTIONS) :] if recipient.startswith(FUNCTIONS) else None
            raw = self._header + MESSAGE + body
            out.append(HarmonyPiece("call", call=HarmonyCall(recipient, name, body, raw, terminator is not None)))
        else:
            self._text(out, self._route, body)
            if self._keep_frame and terminator is not None:
                self._text(out, "content", terminator)
        self._state, self._header, self._route = "header", "", ""

    def _text(self, out: list[HarmonyPiece], kind: str, text: str) -> None:
        if not text:
            return
        if self._keep_frame:
            kind = "content"
        elif self._fresh and kind in self._said:
            text = "\n" + text  # messages of one kind are set apart
        self._fresh = False
        self._said.add(kind)
        if out and out[-1].kind == kind:
            out[-1] = HarmonyPiece(kind, out[-1].text + text)
        else:
            out.append(HarmonyPiece(kind, text))


def _looks_like_header(text: str) -> bool:
    return any(t in text for t in TOKENS) or text.lstrip().startswith("to=")


def _first_terminator(text: str) -> tuple[int, str]:
    found = [(at, t) for t in TERMINATORS if (at := text.find(t)) >= 0]
    return min(found) if found else (-1, "")
