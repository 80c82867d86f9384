"""Where a request's walk was, to come back to: speculation walks the constraint along a draft to find each draft
position's mask, then restores it (at most MAX_ROLLBACK tokens ahead, the guides' own rollback limit)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from outlines_core import Guide

from lexi.structured.compiled_index import CompiledIndex
from lexi.structured.counted_state import Items, Run
from lexi.structured.thought_watch import ThoughtWatch
from lexi.structured.turn_budget import ClosingBudget
from lexi.structured.turn_walk import PlanWalk


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A walk's state at one moment (and its budget's tokens left), the mutable parts copied."""

    left: int | None  # tokens the output could still take
    phase: int
    tail: bytes  # the end of the free text
    started: bool
    free_rest: bool
    run: Run | None  # a copy: the walk counts in its own in place
    thought: ThoughtWatch | None  # a copy, likewise
    guide: Guide | None  # the guide of that moment, rolled back to `guide_steps` on restore
    compiled: CompiledIndex | None
    guide_steps: int
    items: tuple[Items, ...]

    @classmethod
    def take(cls, walk: PlanWalk, budget: ClosingBudget) -> Snapshot:
        """From here on, the walk remembers the steps of each guide it leaves (a restore may come back to one)."""
        walk.left_guides = {}
        run = None if walk.run is None else replace(walk.run)
        thought = None if walk.thought is None else walk.thought.copy()
        return cls(budget.left, walk.phase, walk.tail, walk.started, walk.free_rest, run, thought, walk.guide,
                   walk.compiled, walk.guide_steps, walk.items)  # fmt: skip

    def restore(self, walk: PlanWalk, budget: ClosingBudget) -> None:
        """Back to this moment (its guide rolled back to its state then)."""
        guide, steps = self.guide, self.guide_steps
        if guide is not None:
            now = walk.guide_steps if guide is walk.guide else walk.left_guides.get(id(guide), steps)
            if now > steps:
                guide.rollback_state(now - steps)
        budget.left = self.left
        walk.phase, walk.tail, walk.started, walk.free_rest = self.phase, self.tail, self.started, self.free_rest
        walk.run, walk.thought, walk.guide, walk.compiled = self.run, self.thought, guide, self.compiled
        walk.guide_steps, walk.items = steps, self.items
        walk.left_guides = None
