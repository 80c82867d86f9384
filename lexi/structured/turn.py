"""One request's token constraint: its plan's phases walked token by token on the engine thread.

Before each sample the engine asks `mask_key()`, a name for the allowed set (None when nothing is
restricted), and calls `fill_mask(row)` to write that set's bits into a packed int32 row only the
first time it meets the key; then `advance(token)` with what was sampled; it stops the request with
"stop" once `is_finished()`. Keys are (compiled index, guide state, whether the output may end
here), a free phase's marker state, or a thought's closer forced by its budget: equal keys name equal
sets across requests. Plain data in,
plain data out: no torch here. End-of-generation tokens are allowed exactly when the output may end: in a free
phase that allows it, at the start of an optional phase, and where the guide accepts. Where the
guide allows the hole (a container nested past what the regex writes out), any container opener is
allowed too, and opening one there frees the rest of the output; verification still checks it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from outlines_core import Guide

from lexi.held_back import held_back_length
from lexi.structured.closing_table import UNREACHABLE
from lexi.structured.compiled_index import CompiledIndex
from lexi.structured.counted_masks import named_set, openers_outside
from lexi.structured.counted_state import Items, Run
from lexi.structured.mask_bits import bit, clear_bits, or_bits, set_bits
from lexi.structured.plan import ConstraintPlan, FreeText, Guided
from lexi.structured.thought_watch import ForcedCloser, ThoughtWatch
from lexi.structured.vocabulary import ConstraintVocabulary

MAX_ROLLBACK = 64  # tokens a snapshot may be walked past and rolled back (--spec-max's largest draft)


class TurnConstraint:
    """Walks a compiled plan; every phase after the first starts fresh on the token after its marker.

    With a budget (the request's max_tokens), a step that could leave the output unable to close in the
    tokens left is narrowed to the tokens that keep it closable (see closing_table): a forced call
    or a JSON answer that fits the budget always closes, a free phase's marker that would open a call
    with no room left to finish is not written, and an optional further call that cannot fit is not begun.
    """

    def __init__(
        self,
        plan: ConstraintPlan,
        indexes: dict[str, CompiledIndex],
        vocab: ConstraintVocabulary,
        budget: int | None = None,
    ) -> None:
        self._plan = plan
        self._indexes = indexes
        self._vocab = vocab
        self._left = budget  # tokens the output may still take; None: no limit is known
        self._after = self._finish_costs()  # _after[i]: fewest tokens to finish the plan from the start of phase i
        self._phase = -1
        self._guide: Guide | None = None
        self._tail = b""  # the end of the free text, as long as the marker could still be completing
        self._started = False  # the current guided phase consumed a token
        self._free_rest = False  # a container opened at a hole: nothing is restricted any more
        self._run: Run | None = None  # the counted string the guided phase is writing (counted_strings)
        self._items: tuple[Items, ...] = ()  # the counted arrays open in it, innermost last (counted_arrays)
        self._thought = ThoughtWatch(plan.thought) if plan.thought is not None else None
        self._guide_steps = 0  # tokens the current guide advanced (what a restore rolls back)
        self._left_guides: dict[int, int] | None = None  # during a walk: guides left behind -> their steps
        self._enter(0)
        self._free_rest = not plan.phases  # only a thought budget holds the output

    def snapshot(self) -> tuple:
        """Where the walk is, to come back to with `restore` after advancing along a speculative draft (the engine
        finds each draft position's mask that way). At most MAX_ROLLBACK tokens may be advanced in between."""
        self._left_guides = {}
        run = None if self._run is None else replace(self._run)
        thought = None if self._thought is None else self._thought.copy()
        return (self._left, self._phase, self._tail, self._started, self._free_rest, run, thought, self._guide,
                self._compiled, self._guide_steps, self._items)  # fmt: skip

    def restore(self, snapshot: tuple) -> None:
        """Back to the `snapshot` (the guide of that moment rolled back to its state then)."""
        left, phase, tail, started, free_rest, run, thought, guide, compiled, steps, items = snapshot
        if guide is not None:
            now = self._guide_steps if guide is self._guide else self._left_guides.get(id(guide), steps)
            if now > steps:
                guide.rollback_state(now - steps)
        self._left, self._phase, self._tail, self._started, self._free_rest = left, phase, tail, started, free_rest
        self._run, self._thought, self._guide, self._compiled, self._guide_steps = run, thought, guide, compiled, steps
        self._items = items
        self._left_guides = None

    def closing_distance(self) -> int:
        """Fewest tokens that finish what the plan demands from here (0 when the output may end now)."""
        phase = self._current if self._phase < len(self._plan.phases) else None
        if phase is None or self._free_rest:
            return 0
        if isinstance(phase, FreeText):
            if phase.may_end:
                return 0
            return self._vocab.marker_cost(phase.marker.encode())[self._held(phase.marker.encode())] + self._next_cost
        here = self._compiled.distance(self._guide.get_state(), self._need) + self._pending_min + self._next_cost
        return min(1, here) if not self._started and phase.may_end_first else here

    def mask_key(self) -> tuple | None:
        """A name for the next step's allowed set; None when nothing is restricted."""
        forced = self._forced_closer()
        if forced is not None:
            return ("thought-closer", forced.closer, forced.held, forced.limit)
        if self._free_rest:
            return None
        phase = self._current
        if isinstance(phase, FreeText):
            marker = phase.marker.encode()
            held = self._held(marker)
            limit = self._free_limit(phase, marker, held)
            if limit is not None:
                return ("closing-marker", phase.marker, held, limit)
            enter = phase.enter and not self._marker_cannot_fit(marker, held)
            if phase.may_end and not self._vocab.banned(marker, held, enter):
                return None
            return ("free", phase.marker, held, enter, phase.may_end)
        may_end = not self._started and phase.may_end_first
        limit = self._guided_limit()
        state = self._guide.get_state()
        if self._counted_narrows():
            run, progress, scan = self._run, limit is not None and self._pending_chars > 0, self._counted_scan()
            if run is None:
                counts = None
            elif not progress and self._compiled.counted.within_everywhere(scan, run):
                counts = ("within", run.text, run.start)  # the set the scan allows, whatever the count
            else:
                counts = (run.low, run.high, run.arrivals - run.start, run.last, run.count)
            items = None if scan.items is None else scan.items.key(self._top)
            if limit is not None and self._top is not None:
                items = (items, self._top.pending())  # what a comma saves near the budget
            return ("counted", self._compiled.serial, state, counts, items, limit, self._pending_min > 0, may_end)
        if limit is not None:
            return ("closing", self._compiled.serial, state, self._compiled.closing.count_within(state, limit), may_end)
        return ("guided", self._compiled.serial, state, may_end)

    def fill_mask(self, row: np.ndarray) -> tuple[bool, np.ndarray] | None:
        """Write the set `mask_key` named as bits of `row` (int32 words); inside a counted string, also return the set
        as ids, (False, the tokens it leaves out) or (True, those it allows), whichever are fewer, so the engine need
        not read the row back."""
        forced = self._forced_closer()
        if forced is not None:
            set_bits(row, np.array(self._vocab.marker_steps(forced.closer, forced.held, forced.limit), dtype=np.int64))
            return
        phase = self._current
        if isinstance(phase, FreeText):
            marker = phase.marker.encode()
            held = self._held(marker)
            limit = self._free_limit(phase, marker, held)
            if limit is not None:
                set_bits(row, np.array(self._vocab.marker_steps(marker, held, limit), dtype=np.int64))
                return
            enter = phase.enter and not self._marker_cannot_fit(marker, held)
            banned = list(self._vocab.banned(marker, held, enter))
            if not phase.may_end:
                banned += self._vocab.eog_ids
            row.fill(-1)
            clear_bits(row, banned)
            return
        may_end = not self._started and phase.may_end_first
        limit = self._guided_limit()
        if self._counted_narrows():
            return self._fill_counted(row, limit, may_end)
        if limit is not None:
            state = self._guide.get_state()
            set_bits(row, self._compiled.closing.allowed_within(state, limit).astype(np.int64))  # as the key says
            if self._vocab.hole_id is not None:
                clear_bits(row, [self._vocab.hole_id])  # no container opens past the depth limit when time is short
            if may_end or self._compiled.closing.is_final(state):
                or_bits(row, self._vocab.eog_ids)
            return
        self._guide.write_mask_into(row.ctypes.data, row.size, 4)
        if may_end or bit(row, self._vocab.eos_id):
            or_bits(row, self._vocab.eog_ids)
        hole = self._vocab.hole_id
        if hole is not None and bit(row, hole):
            clear_bits(row, [hole])
            or_bits(row, self._vocab.container_openers)

    def advance(self, token_id: int) -> None:
        if self._left is not None:
            self._left -= 1
        if token_id in self._vocab.eog_ids:
            return
        if self._thought is not None:
            self._thought.advance(self._vocab.token_bytes[token_id])
        if self._free_rest:
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
        counted, before = self._compiled.counted, self._guide.get_state()
        self._guide.advance(token_id, False)  # ValueError for a token the mask did not allow: fails the request
        self._guide_steps += 1
        self._started = True
        if counted is not None:
            self._run, self._items = counted.walk(before, self._vocab.token_bytes[token_id], self._run, self._items)
        if self._compiled.terminal(self._guide.get_state(), self._vocab.eos_id):
            self._enter(self._phase + 1)

    def _guided_limit(self) -> int | None:
        """None when any allowed token leaves room to close; else how near the end the next state must be.

        An optional phase not yet begun may always end instead; a phase that cannot close in the tokens
        left whatever is chosen is not narrowed (its output is cut by max_tokens, as it would be anyway)."""
        if self._left is None:
            return None
        state = self._guide.get_state()
        compiled = self._compiled
        # the next state must be this near the end of the phase (and of a counted string's minimum length)
        limit = self._left - 1 - self._next_cost - self._pending_min
        if compiled.free(state, self._need, limit, self._top):
            return None
        optional = not self._started and self._current.may_end_first
        if limit < compiled.distance(state, self._need) - 1 and not optional:
            return None
        return max(limit, -1)

    @property
    def _pending_min(self) -> int:
        """Tokens the open counted string and outer arrays still need before they may close, beyond the distance
        (which counts the innermost array's items): a token each character still needed, at worst, and for each
        array around the innermost one, what an item adds at most (`ItemClosing`: a figure where arrays nest)."""
        if len(self._items) < 2:
            return self._pending_chars
        outer = sum(items.pending() for items in self._items[:-1])
        return self._pending_chars + outer * self._compiled.items.per_item

    @property
    def _need(self) -> int:
        """Commas the innermost counted array open still needs before its `]`."""
        return self._items[-1].pending() if self._items else 0

    @property
    def _pending_chars(self) -> int:
        return 0 if self._run is None else self._run.pending_min()

    def _scanned(self, state: int) -> np.ndarray:
        """Which of the closing table's tokens at `state` a counted scan walks (its ids are those, in that order)."""
        return self._vocab.text_among(self._compiled.closing.tokens(state))

    def _counted_scan(self):
        state = self._guide.get_state()

        def ids() -> np.ndarray:
            return self._compiled.closing.tokens(state)[self._scanned(state)].astype(np.int64)

        return self._compiled.counted.scan(state, self._run, ids, self._vocab.all_token_bytes)

    @property
    def _top(self) -> Items | None:
        return self._items[-1] if self._items else None

    def _counted_narrows(self) -> bool:
        """Whether the counted strings and arrays take anything from this step's guide mask (never without them);
        near the budget, always where arrays are counted: their distances are not the closing table's."""
        if self._compiled.counted is None:
            return False
        if self._run is not None or (self._compiled.items is not None and self._guided_limit() is not None):
            return True
        scan = self._counted_scan()
        return scan.narrows or (bool(self._items) and scan.items is not None and scan.items.touches)

    def _fill_counted(self, row: np.ndarray, limit: int | None, may_end: bool) -> tuple[bool, np.ndarray] | None:
        """The guide's tokens that keep counted strings within bounds, narrowed to closing ones near the budget; with
        the scan's gain order, also the set as ids (see fill_mask)."""
        counted, state = self._compiled.counted, self._guide.get_state()
        scan = self._counted_scan()
        progress = limit is not None and self._pending_chars > 0
        by_gain = limit is None and scan.order is not None and scan.order.words.size == row.size
        if by_gain:
            cut, kept = scan.order.fill(row.view(np.uint32), self._run)  # the same set, from the tokens by gain
        else:
            keep = counted.allowed(scan, self._run, progress_only=progress, top=self._top)
            if limit is not None and not progress:
                # near the budget: tokens whose next state still closes in time (items still needed counted)
                if self._compiled.items is None:
                    near = self._compiled.closing.next_distances(state)[self._scanned(state)] <= limit
                else:
                    near = self._compiled.items.next_distances(state, self._need, self._top) <= limit
                keep = keep & near if (keep & near).any() else keep
            set_bits(row, scan.ids[keep])
        hole = self._vocab.hole_id
        openers = hole is not None and limit is None and self._guide.accepts_tokens([hole])
        if openers:  # openers the guide would not take itself (where it does, as text, their count decides)
            or_bits(row, openers_outside(scan, self._vocab))
        ends = (may_end or self._compiled.closing.is_final(state)) and self._pending_min == 0
        if ends:
            or_bits(row, self._vocab.eog_ids)
        return named_set(scan, self._vocab, openers, ends, cut, kept) if by_gain else None

    def _forced_closer(self) -> ForcedCloser | None:
        """The thought's closer, when its budget leaves no room for another free token; where the thought must
        also close before max_tokens (a phase after it), the nearer of the two limits holds."""
        if self._thought is None or not self._thought.thinking:
            return None
        forced = self._thought.forced(self._vocab.marker_cost)
        if forced is None or self._free_rest or self.is_finished() or not isinstance(self._current, FreeText):
            return forced
        phase = self._current
        if phase.marker.encode() != forced.closer:
            return forced
        limit = self._free_limit(phase, forced.closer, forced.held)
        return forced if limit is None or limit >= forced.limit else replace(forced, limit=limit)

    def _free_limit(self, phase: FreeText, marker: bytes, held: int) -> int | None:
        """For a thought that must close before constrained output: None while a free token leaves room to write
        the closer and what follows; else how many tokens may remain after the next one (the closer is forced)."""
        if self._left is None or phase.may_end or not phase.enter:
            return None
        cost = self._vocab.marker_cost(marker)
        limit = self._left - 1 - self._next_cost
        if max(cost) <= limit or cost[held] > limit + 1:
            return None
        return limit

    def _marker_cannot_fit(self, marker: bytes, held: int) -> bool:
        """An optional marker (a call's opener in free text) with no room left to finish what it opens."""
        if self._left is None or not self._current.may_end:
            return False
        return self._vocab.marker_cost(marker)[held] + self._next_cost > self._left

    @property
    def _next_cost(self) -> int:
        return self._after[self._phase + 1]

    def _finish_costs(self) -> list[int]:
        phases = self._plan.phases
        after = [0] * (len(phases) + 1)
        if self._plan.loop_from is not None:  # the phase looped back to may end at its start (the end token)
            after[-1] = 1 if isinstance(phases[self._plan.loop_from], Guided) else 0
        for i in range(len(phases) - 1, -1, -1):
            phase = phases[i]
            if isinstance(phase, FreeText):
                need = self._vocab.marker_cost(phase.marker.encode())[0] + after[i + 1] if phase.enter else 0
                after[i] = 0 if phase.may_end else min(need, UNREACHABLE)
                continue
            compiled = self._indexes[phase.pattern]
            need = min(compiled.distance(compiled.index.get_initial_state()) + after[i + 1], UNREACHABLE)
            after[i] = min(1, need) if phase.may_end_first else need
        return after

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
        if self._left_guides is not None and self._guide is not None:
            self._left_guides[id(self._guide)] = self._guide_steps
        self._phase, self._tail, self._started, self._guide, self._compiled = index, b"", False, None, None
        self._run, self._guide_steps, self._items = None, 0, ()
        if index < len(self._plan.phases) and isinstance(self._current, Guided):
            self._compiled = self._indexes[self._current.pattern]
            self._guide = Guide(self._compiled.index, max_rollback=MAX_ROLLBACK)

    def _held(self, marker: bytes) -> int:
        """Length of the longest end of the free text that is a proper prefix of the marker."""
        return held_back_length(self._tail, (marker,))
