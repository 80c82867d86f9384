"""One request's token constraint: its plan's phases walked token by token on the engine thread.

Before each sample the engine asks `mask_key()`, a name for the allowed set (None when nothing is
restricted), and calls `fill_mask(row)` to write that set's bits into a packed int32 row only the
first time it meets the key; then `advance(token)` with what was sampled; it stops the request with
"stop" once `is_finished()`. Keys are (compiled index, guide state, whether the output may end
here) or a free phase's marker state: equal keys name equal sets across requests. Plain data in,
plain data out: no torch here. End-of-generation tokens are allowed exactly when the output may end: in a free
phase that allows it, at the start of an optional phase, and where the guide accepts. Where the
guide allows the hole (a container nested past what the regex writes out), any container opener is
allowed too, and opening one there frees the rest of the output; verification still checks it.
"""

from __future__ import annotations

import numpy as np
from outlines_core import Guide, Index

from lexi.chat.constraint_plan import ConstraintPlan, FreeText, Guided
from lexi.chat.constraint_vocab import ConstraintVocabulary


class CompiledIndex:
    """An outlines-core Index, a serial number that keys its masks, and which of its states end the output."""

    __slots__ = ("index", "serial", "_terminal")

    def __init__(self, index: Index, serial: tuple[int, int]) -> None:
        self.index = index
        self.serial = serial
        self._terminal: dict[int, bool] = {}

    def terminal(self, state: int, eos_id: int) -> bool:
        """An accepting state from which nothing but the end of output may follow (computed once per state)."""
        found = self._terminal.get(state)
        if found is None:
            found = self.index.is_final_state(state) and set(self.index.get_allowed_tokens(state) or []) <= {eos_id}
            self._terminal[state] = found
        return found


class TurnConstraint:
    """Walks a compiled plan; every phase after the first starts fresh on the token after its marker."""

    def __init__(self, plan: ConstraintPlan, indexes: dict[str, CompiledIndex], vocab: ConstraintVocabulary) -> None:
        self._plan = plan
        self._indexes = indexes
        self._vocab = vocab
        self._phase = -1
        self._guide: Guide | None = None
        self._tail = b""  # the end of the free text, as long as the marker could still be completing
        self._started = False  # the current guided phase consumed a token
        self._free_rest = False  # a container opened at a hole: nothing is restricted any more
        self._enter(0)

    def mask_key(self) -> tuple | None:
        """A name for the next step's allowed set; None when nothing is restricted."""
        if self._free_rest:
            return None
        phase = self._current
        if isinstance(phase, FreeText):
            held = self._held(phase.marker.encode())
            if phase.may_end and not self._vocab.banned(phase.marker.encode(), held, phase.enter):
                return None
            return ("free", phase.marker, held, phase.enter, phase.may_end)
        may_end = not self._started and phase.may_end_first
        return ("guided", self._compiled.serial, self._guide.get_state(), may_end)

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the set `mask_key` named as bits of `row` (int32 words)."""
        phase = self._current
        if isinstance(phase, FreeText):
            marker = phase.marker.encode()
            banned = list(self._vocab.banned(marker, self._held(marker), phase.enter))
            if not phase.may_end:
                banned += self._vocab.eog_ids
            row.fill(-1)
            _clear_bits(row, banned)
            return
        self._guide.write_mask_into(row.ctypes.data, row.size, 4)
        if (not self._started and phase.may_end_first) or _bit(row, self._vocab.eos_id):
            _set_bits(row, self._vocab.eog_ids)
        hole = self._vocab.hole_id
        if hole is not None and _bit(row, hole):
            _clear_bits(row, [hole])
            _set_bits(row, self._vocab.container_openers)

    def advance(self, token_id: int) -> None:
        if token_id in self._vocab.eog_ids or self._free_rest:
            return
        phase = self._current
        if isinstance(phase, FreeText):
            text = self._tail + self._vocab.token_bytes[token_id]
            marker = phase.marker.encode()
            if phase.enter and marker in text:
                self._enter(self._phase + 1)
            else:
                self._tail = text[-(len(marker) - 1) :] if len(marker) > 1 else b""
            return
        if self._opens_at_hole(token_id):
            self._free_rest = True
            return
        self._guide.advance(token_id, False)  # ValueError for a token the mask did not allow: fails the request
        self._started = True
        if self._compiled.terminal(self._guide.get_state(), self._vocab.eos_id):
            self._enter(self._phase + 1)

    def _opens_at_hole(self, token_id: int) -> bool:
        """A container opener the guide itself would not take, where the guide allows the hole."""
        hole = self._vocab.hole_id
        return (
            hole is not None
            and self._vocab.token_bytes[token_id][:1] in (b"[", b"{")
            and not self._guide.accepts_tokens([token_id])
            and self._guide.accepts_tokens([hole])
        )

    def is_finished(self) -> bool:
        """Nothing but the end of output can follow: the engine stops here."""
        return not self._free_rest and self._phase >= len(self._plan.phases)

    @property
    def _current(self) -> FreeText | Guided:
        return self._plan.phases[self._phase]

    def _enter(self, index: int) -> None:
        if index >= len(self._plan.phases) and self._plan.loop_from is not None:
            index = self._plan.loop_from
        self._phase, self._tail, self._started, self._guide, self._compiled = index, b"", False, None, None
        if index < len(self._plan.phases) and isinstance(self._current, Guided):
            self._compiled = self._indexes[self._current.regex]
            self._guide = Guide(self._compiled.index)

    def _held(self, marker: bytes) -> int:
        """Length of the longest end of the free text that is a proper prefix of the marker."""
        for n in range(min(len(marker) - 1, len(self._tail)), 0, -1):
            if self._tail.endswith(marker[:n]):
                return n
        return 0


def _bit(row: np.ndarray, token_id: int) -> bool:
    return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)


def _set_bits(row: np.ndarray, ids) -> None:
    words = row.view(np.uint32)
    for token_id in ids:
        if token_id >> 5 < words.size:
            words[token_id >> 5] |= np.uint32(1 << (token_id & 31))


def _clear_bits(row: np.ndarray, ids) -> None:
    words = row.view(np.uint32)
    for token_id in ids:
        if token_id >> 5 < words.size:
            words[token_id >> 5] &= np.uint32(~(1 << (token_id & 31)) & 0xFFFFFFFF)
