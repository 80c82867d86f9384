"""A thought held to a token budget (Anthropic's `thinking.budget_tokens`): the constraint's view of it.

The watch follows the output's bytes: where the prompt opened the thought, the output starts inside it;
otherwise it may open one (`<think>`, after leading whitespace) or go straight to the answer, and the
budget then has nothing to hold. Inside, every token counts, the closer included; when the tokens left
in the budget are just enough to write the closer, only the tokens that write it are allowed (the
constraint's mask), so the thought ends within the budget and the answer follows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lexi.held_back import held_back_length
from lexi.structured.plan import ThoughtBudget

_SPACE = b" \t\r\n"


@dataclass(frozen=True, slots=True)
class ForcedCloser:
    """The closer must be written now: `held` of its bytes are written, at most `limit` tokens may follow the
    next one."""

    closer: bytes
    held: int
    limit: int


class ThoughtWatch:
    """States: "start" (the output may still open a thought), "thinking" (counting), "done"."""

    __slots__ = ("_budget", "_state", "_text", "_closer", "_used", "_pairs")

    def __init__(self, budget: ThoughtBudget) -> None:
        self._budget = budget.tokens
        self._pairs = budget.pairs
        self._state = "thinking" if budget.opened else "start"
        self._closer = budget.opened[1].encode() if budget.opened else b""
        self._text = b""  # "start": the output so far; "thinking": its end, while the closer may be completing
        self._used = 0  # thought tokens written, the one that opened it not counted

    def copy(self) -> ThoughtWatch:
        twin = ThoughtWatch.__new__(ThoughtWatch)
        twin._budget, twin._state, twin._text, twin._closer, twin._used, twin._pairs = (
            self._budget, self._state, self._text, self._closer, self._used, self._pairs
        )  # fmt: skip
        return twin

    @property
    def thinking(self) -> bool:
        return self._state == "thinking"

    def advance(self, token: bytes) -> None:
        if self._state == "done":
            return
        if self._state == "start":
            self._opening(token)
            return
        self._used += 1
        text = self._text + token
        if self._closer in text:
            self._state, self._text = "done", b""
        else:
            self._text = text[-(len(self._closer) - 1) :] if len(self._closer) > 1 else b""

    def _opening(self, token: bytes) -> None:
        text = (self._text + token).lstrip(_SPACE)
        for opener, closer in self._pairs:
            start = opener.encode()
            if text.startswith(start):
                self._state, self._closer, self._text = "thinking", closer.encode(), b""
                self._carried(text[len(start) :])
                return
            if start.startswith(text):
                self._text = text
                return
        self._state, self._text = "done", b""

    def _carried(self, rest: bytes) -> None:
        """What the opening token carried past the opener is thought text (it may even close it)."""
        if rest and self._closer in rest:
            self._state = "done"
        elif rest:
            self._text = rest[-(len(self._closer) - 1) :]

    def forced(self, marker_cost: Callable[[bytes], tuple[int, ...]]) -> ForcedCloser | None:
        """The closer to write now, or None while any token leaves room to write it within the budget.

        `marker_cost(closer)[held]`: the fewest tokens that write the closer's rest after `held` of its bytes
        (ConstraintVocabulary.marker_cost). A closer that cannot fit what is left of the budget any more is
        forced by its shortest spelling."""
        if self._state != "thinking":
            return None
        cost = marker_cost(self._closer)
        held = held_back_length(self._text, (self._closer,))
        limit = self._budget - self._used - 1  # tokens that may follow the next one, still within the budget
        if max(cost) <= limit:
            return None
        return ForcedCloser(self._closer, held, max(limit, cost[held] - 1))
