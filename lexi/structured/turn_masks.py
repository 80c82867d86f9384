"""The next step's allowed set: named (`key`), and written as packed bits (`fill`) the first time the engine meets the
name. Keys are (compiled index, guide state, whether the output may end here), a free phase's marker state, or a
thought's closer forced by its budget, with the counts and limits that change the set: equal keys name equal sets
across requests.

End-of-generation tokens are allowed exactly when the output may end: in a free phase that allows it, at the start of
an optional phase, and where the guide accepts. Where the guide allows the hole, the container openers are allowed
instead of it (`turn_walk`).
"""

from __future__ import annotations

import numpy as np

from lexi.structured.counted_masks import named_set, openers_outside
from lexi.structured.mask_bits import bit, clear_bits, or_bits, set_bits
from lexi.structured.plan import FreeText
from lexi.structured.turn_budget import ClosingBudget
from lexi.structured.turn_walk import PlanWalk


class TurnMasks:
    """The allowed sets of one request's steps, from where its walk is and the room its budget leaves."""

    __slots__ = ("_walk", "_budget")

    def __init__(self, walk: PlanWalk, budget: ClosingBudget) -> None:
        self._walk = walk
        self._budget = budget

    def key(self) -> tuple | None:
        """A name for the next step's allowed set; None when nothing is restricted."""
        walk, budget = self._walk, self._budget
        forced = budget.forced_closer()
        if forced is not None:
            return ("thought-closer", forced.closer, forced.held, forced.limit)
        if walk.free_rest:
            return None
        phase = walk.current
        if isinstance(phase, FreeText):
            marker = phase.marker.encode()
            held = walk.held(marker)
            limit = budget.free_limit(phase, marker, held)
            if limit is not None:
                return ("closing-marker", phase.marker, held, limit)
            enter = phase.enter and not budget.marker_cannot_fit(marker, held)
            if phase.may_end and not walk.vocab.banned(marker, held, enter):
                return None
            return ("free", phase.marker, held, enter, phase.may_end)
        may_end = not walk.started and phase.may_end_first
        limit = budget.guided_limit()
        state = walk.guide.get_state()
        compiled = walk.compiled
        if self._counted_narrows():
            run, progress, scan = walk.run, limit is not None and walk.pending_chars > 0, walk.counted_scan()
            if run is None:
                counts = None
            elif not progress and compiled.counted.within_everywhere(scan, run):
                counts = ("within", run.text, run.start)  # the set the scan allows, whatever the count
            else:
                counts = (run.low, run.high, run.arrivals - run.start, run.last, run.count)
            items = None if scan.items is None else scan.items.key(walk.top)
            if limit is not None and walk.top is not None:
                items = (items, walk.top.pending())  # what a comma saves near the budget
            return ("counted", compiled.serial, state, counts, items, limit, walk.pending_min > 0, may_end)
        if limit is not None:
            return ("closing", compiled.serial, state, compiled.closing.count_within(state, limit), may_end)
        return ("guided", compiled.serial, state, may_end)

    def fill(self, row: np.ndarray) -> tuple[bool, np.ndarray] | None:
        """Write the set `key` named as bits of `row` (int32 words); inside a counted string, also return the set
        as ids, (False, the tokens it leaves out) or (True, those it allows), whichever are fewer, so the engine need
        not read the row back."""
        walk, budget, vocab = self._walk, self._budget, self._walk.vocab
        forced = budget.forced_closer()
        if forced is not None:
            set_bits(row, np.array(vocab.marker_steps(forced.closer, forced.held, forced.limit), dtype=np.int64))
            return None
        phase = walk.current
        if isinstance(phase, FreeText):
            marker = phase.marker.encode()
            held = walk.held(marker)
            limit = budget.free_limit(phase, marker, held)
            if limit is not None:
                set_bits(row, np.array(vocab.marker_steps(marker, held, limit), dtype=np.int64))
                return None
            enter = phase.enter and not budget.marker_cannot_fit(marker, held)
            banned = list(vocab.banned(marker, held, enter))
            if not phase.may_end:
                banned += vocab.eog_ids
            row.fill(-1)
            clear_bits(row, banned)
            return None
        may_end = not walk.started and phase.may_end_first
        limit = budget.guided_limit()
        if self._counted_narrows():
            return self._fill_counted(row, limit, may_end)
        compiled = walk.compiled
        if limit is not None:
            state = walk.guide.get_state()
            set_bits(row, compiled.closing.allowed_within(state, limit).astype(np.int64))  # as the key says
            if vocab.hole_id is not None:
                clear_bits(row, [vocab.hole_id])  # no container opens past the depth limit when time is short
            if may_end or compiled.closing.is_final(state):
                or_bits(row, vocab.eog_ids)
            return None
        walk.guide.write_mask_into(row.ctypes.data, row.size, 4)
        if may_end or bit(row, vocab.eos_id):
            or_bits(row, vocab.eog_ids)
        hole = vocab.hole_id
        if hole is not None and bit(row, hole):
            clear_bits(row, [hole])
            or_bits(row, vocab.container_openers)
        return None

    def _counted_narrows(self) -> bool:
        """Whether the counted strings and arrays take anything from this step's guide mask (never without them);
        near the budget, always where arrays are counted: their distances are not the closing table's."""
        walk = self._walk
        if walk.compiled.counted is None:
            return False
        if walk.run is not None or (walk.compiled.items is not None and self._budget.guided_limit() is not None):
            return True
        scan = walk.counted_scan()
        return scan.narrows or (bool(walk.items) and scan.items is not None and scan.items.touches)

    def _fill_counted(self, row: np.ndarray, limit: int | None, may_end: bool) -> tuple[bool, np.ndarray] | None:
        """The guide's tokens that keep counted strings within bounds, narrowed to closing ones near the budget; with
        the scan's gain order, also the set as ids (see `fill`)."""
        walk, vocab = self._walk, self._walk.vocab
        compiled, state = walk.compiled, walk.guide.get_state()
        scan = walk.counted_scan()
        progress = limit is not None and walk.pending_chars > 0
        by_gain = limit is None and scan.order is not None and scan.order.words.size == row.size
        if by_gain:
            cut, kept = scan.order.fill(row.view(np.uint32), walk.run)  # the same set, from the tokens by gain
        else:
            keep = compiled.counted.allowed(scan, walk.run, progress_only=progress, top=walk.top)
            if limit is not None and not progress:
                # near the budget: tokens whose next state still closes in time (items still needed counted)
                if compiled.items is None:
                    near = compiled.closing.next_distances(state)[walk.scanned(state)] <= limit
                else:
                    near = compiled.items.next_distances(state, walk.need, walk.top) <= limit
                keep = keep & near if (keep & near).any() else keep
            set_bits(row, scan.ids[keep])
        hole = vocab.hole_id
        openers = hole is not None and limit is None and walk.guide.accepts_tokens([hole])
        if openers:  # openers the guide would not take itself (where it does, as text, their count decides)
            or_bits(row, openers_outside(scan, vocab))
        ends = (may_end or compiled.closing.is_final(state)) and walk.pending_min == 0
        if ends:
            or_bits(row, vocab.eog_ids)
        return named_set(scan, vocab, openers, ends, cut, kept) if by_gain else None
