"""Where one request is in its plan, token by token: the phase, the guide of a guided phase, the end of a free phase's
text, the counted strings and arrays open, the thought. Every phase after the first starts fresh on the token after
its marker; a guided phase ends where nothing but the end of output could follow.

Where the guide allows the hole (a container nested past what the regex writes out), a container opener the guide
would not take itself may be written, and opening one there frees the rest of the output (verification still
checks it).
"""

from __future__ import annotations

import numpy as np
from outlines_core import Guide

from lexi.held_back import held_back_length
from lexi.structured.compiled_index import CompiledIndex
from lexi.structured.counted_state import Items, Run
from lexi.structured.counted_strings import StateScan
from lexi.structured.plan import ConstraintPlan, FreeText, Guided
from lexi.structured.thought_watch import ThoughtWatch
from lexi.structured.vocabulary import ConstraintVocabulary

MAX_ROLLBACK = 64  # tokens a snapshot may be walked past and rolled back (--spec-max's largest draft)


class PlanWalk:
    """A written plan's phases (`plan_regex.written`) walked token by token."""

    __slots__ = ("plan", "indexes", "vocab", "phase", "guide", "compiled", "tail", "started", "free_rest", "run",
                 "items", "thought", "guide_steps", "left_guides")  # fmt: skip

    def __init__(self, plan: ConstraintPlan, indexes: dict[str, CompiledIndex], vocab: ConstraintVocabulary) -> None:
        self.plan = plan
        self.indexes = indexes  # each guided phase's compiled index, by its regex
        self.vocab = vocab
        self.phase = -1
        self.guide: Guide | None = None  # the guided phase's walk through its index
        self.compiled: CompiledIndex | None = None  # the guided phase's index
        self.tail = b""  # the end of the free text, as long as the marker could still be completing
        self.started = False  # the current guided phase consumed a token
        self.free_rest = False  # a container opened at a hole: nothing is restricted any more
        self.run: Run | None = None  # the counted string the guided phase is writing (counted_strings)
        self.items: tuple[Items, ...] = ()  # the counted arrays open in it, innermost last (counted_arrays)
        self.thought = ThoughtWatch(plan.thought) if plan.thought is not None else None
        self.guide_steps = 0  # tokens the current guide advanced (what a restore rolls back)
        self.left_guides: dict[int, int] | None = None  # during a walk: guides left behind -> their steps
        self.enter(0)
        self.free_rest = not plan.phases  # only a thought budget holds the output

    @property
    def finished(self) -> bool:
        """Nothing but the end of output can follow."""
        return not self.free_rest and self.phase >= len(self.plan.phases)

    @property
    def current(self) -> FreeText | Guided:
        return self.plan.phases[self.phase]

    def advance(self, token_id: int) -> None:
        """Walk `token_id`'s bytes (an end-of-generation token moves nothing)."""
        vocab = self.vocab
        if token_id in vocab.eog_ids:
            return
        if self.thought is not None:
            self.thought.advance(vocab.token_bytes[token_id])
        if self.free_rest:
            return
        phase = self.current
        if isinstance(phase, FreeText):
            text = self.tail + vocab.token_bytes[token_id]
            marker = phase.marker.encode()
            if phase.enter and marker in text:
                self.enter(self.phase + 1)
            else:
                self.tail = text[-(len(marker) - 1) :] if len(marker) > 1 else b""
            return
        if self.opens_at_hole(token_id):
            self.free_rest = True
            return
        counted, before = self.compiled.counted, self.guide.get_state()
        self.guide.advance(token_id, False)  # ValueError for a token the mask did not allow: fails the request
        self.guide_steps += 1
        self.started = True
        if counted is not None:
            self.run, self.items = counted.walk(before, vocab.token_bytes[token_id], self.run, self.items)
        if self.compiled.terminal(self.guide.get_state(), vocab.eos_id):
            self.enter(self.phase + 1)

    def enter(self, index: int) -> None:
        """Start phase `index` (past the last: the phase the plan loops back to, if it does)."""
        if index >= len(self.plan.phases) and self.plan.loop_from is not None:
            index = self.plan.loop_from
        if self.left_guides is not None and self.guide is not None:
            self.left_guides[id(self.guide)] = self.guide_steps
        self.phase, self.tail, self.started, self.guide, self.compiled = index, b"", False, None, None
        self.run, self.guide_steps, self.items = None, 0, ()
        if index < len(self.plan.phases) and isinstance(self.current, Guided):
            self.compiled = self.indexes[self.current.pattern]
            self.guide = Guide(self.compiled.index, max_rollback=MAX_ROLLBACK)

    def held(self, marker: bytes) -> int:
        """Length of the longest end of the free text that is a proper prefix of the marker."""
        return held_back_length(self.tail, (marker,))

    def opens_at_hole(self, token_id: int) -> bool:
        """A container opener the guide itself would not take, where the guide allows the hole."""
        hole = self.vocab.hole_id
        return (
            hole is not None
            and self.vocab.token_bytes[token_id][:1] in (b"[", b"{")
            and not self.guide.accepts_tokens([token_id])
            and self.guide.accepts_tokens([hole])
        )

    @property
    def top(self) -> Items | None:
        """The innermost counted array open."""
        return self.items[-1] if self.items else None

    @property
    def need(self) -> int:
        """Commas the innermost counted array open still needs before its `]`."""
        return self.items[-1].pending() if self.items else 0

    @property
    def pending_chars(self) -> int:
        return 0 if self.run is None else self.run.pending_min()

    @property
    def pending_min(self) -> int:
        """Tokens the open counted string and outer arrays still need before they may close, beyond the distance
        (which counts the innermost array's items): a token each character still needed, at worst, and for each
        array around the innermost one, what an item adds at most (`ItemClosing`: a figure where arrays nest)."""
        if len(self.items) < 2:
            return self.pending_chars
        outer = sum(items.pending() for items in self.items[:-1])
        return self.pending_chars + outer * self.compiled.items.per_item

    def scanned(self, state: int) -> np.ndarray:
        """Which of the closing table's tokens at `state` a counted scan walks (its ids are those, in that order)."""
        return self.vocab.text_among(self.compiled.closing.tokens(state))

    def counted_scan(self) -> StateScan:
        """What each token allowed here does to the counted strings and arrays (cached per state and kind of run)."""
        state = self.guide.get_state()

        def ids() -> np.ndarray:
            return self.compiled.closing.tokens(state)[self.scanned(state)].astype(np.int64)

        return self.compiled.counted.scan(state, self.run, ids, self.vocab.all_token_bytes)
