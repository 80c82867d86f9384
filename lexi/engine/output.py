"""Turns one sequence's sampled tokens into visible text: incremental detokenizing, stop strings, finish reasons.

Text that could still turn out to be the start of a stop string is held back, never streamed and then
retracted; when a stop string completes, the text is cut just before it. No torch here.
"""

from __future__ import annotations

from typing import Protocol

from lexi.held_back import held_back_length


class Detokenizer(Protocol):
    def feed(self, token_id: int) -> str: ...

    def finish(self) -> str: ...


class OutputProcessor:
    """Per-sequence state: feed each sampled token, get the text it releases and whether it finished."""

    __slots__ = (
        "_detok",
        "_stops",
        "_eog",
        "_max_tokens",
        "_pending",
        "_released",
        "num_tokens",
        "finish_reason",
        "stop_string",
    )

    def __init__(
        self, detokenizer: Detokenizer, stop: tuple[str, ...], eog_ids: frozenset[int], max_tokens: int
    ) -> None:
        self._detok = detokenizer
        self._stops = stop
        self._eog = eog_ids  # empty when the request ignores EOS
        self._max_tokens = max_tokens
        self._pending = ""  # decoded but not yet released (a possible stop-string start)
        self._released = 0  # characters released so far
        self.num_tokens = 0
        self.finish_reason: str | None = None
        self.stop_string: str | None = None  # the stop string that ended the output (Anthropic's stop_sequence)

    @property
    def decoded(self) -> int:
        """Characters decoded so far, released or held: where the next token's text begins."""
        return self._released + len(self._pending)

    @property
    def visible(self) -> int:
        """Characters released so far; once finished, where the visible text ends (a stop string cut before)."""
        return self._released

    def feed(self, token_id: int, constraint_done: bool = False) -> str:
        """Text released by this token; sets finish_reason when generation ends here."""
        text = self._step(token_id, constraint_done)
        self._released += len(text)
        return text

    def _step(self, token_id: int, constraint_done: bool) -> str:
        assert self.finish_reason is None, "token fed after the sequence finished"
        self.num_tokens += 1
        if token_id in self._eog:
            return self._finish("stop")
        text = self._pending + self._detok.feed(token_id)
        if self._stops:
            cut = self._cut(text)
            if cut >= 0:
                self._pending = ""
                self.finish_reason = "stop"
                return text[:cut]
        if constraint_done:
            self._pending = text
            return self._finish("stop")
        if self.num_tokens >= self._max_tokens:
            self._pending = text
            return self._finish("length")
        keep = held_back_length(text, self._stops) if self._stops else 0
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _finish(self, reason: str) -> str:
        """Release everything held: no stop string completed, and the detokenizer's tail is final."""
        text = self._pending + self._detok.finish()
        self._pending = ""
        if self._stops:
            cut = self._cut(text)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        self.finish_reason = reason
        return text

    def _cut(self, text: str) -> int:
        """Where the earliest stop string in `text` begins (-1: none), noting which one it is."""
        found = [(at, stop) for stop in self._stops if (at := text.find(stop)) >= 0]
        if not found:
            return -1
        at, self.stop_string = min(found, key=lambda pair: pair[0])
        return at
