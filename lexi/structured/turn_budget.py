"""Room to close: with a budget (the request's max_tokens), what finishing the plan costs from where the walk is,
against the tokens the output may still take.

A step that could leave the output unable to close in the tokens left is narrowed to the tokens that keep it closable
(the distances: `closing_table`, and `closing_items` where arrays are counted): a forced call or a JSON answer that
fits the budget always closes, a free phase's marker that would open a call with no room left to finish is not
written, an optional further call that cannot fit is not begun, and a thought that must close before constrained
output has its closer forced in time.
"""

from __future__ import annotations

from dataclasses import replace

from lexi.structured.closing_table import UNREACHABLE
from lexi.structured.plan import FreeText, Guided
from lexi.structured.thought_watch import ForcedCloser
from lexi.structured.turn_walk import PlanWalk


class ClosingBudget:
    """The tokens left to one request's output, and the limits they put on its next step."""

    __slots__ = ("left", "_walk", "_after")

    def __init__(self, walk: PlanWalk, tokens: int | None) -> None:
        self.left = tokens  # tokens the output may still take; None: no limit is known
        self._walk = walk
        self._after = _finish_costs(walk)  # _after[i]: fewest tokens to finish the plan from the start of phase i

    def spend(self) -> None:
        """One token was written."""
        if self.left is not None:
            self.left -= 1

    @property
    def next_cost(self) -> int:
        """Fewest tokens that finish the plan after the current phase."""
        return self._after[self._walk.phase + 1]

    def closing_distance(self) -> int:
        """Fewest tokens that finish what the plan demands from here (0 when the output may end now)."""
        walk = self._walk
        phase = walk.current if walk.phase < len(walk.plan.phases) else None
        if phase is None or walk.free_rest:
            return 0
        if isinstance(phase, FreeText):
            if phase.may_end:
                return 0
            marker = phase.marker.encode()
            return walk.vocab.marker_cost(marker)[walk.held(marker)] + self.next_cost
        here = walk.compiled.distance(walk.guide.get_state(), walk.need) + walk.pending_min + self.next_cost
        return min(1, here) if not walk.started and phase.may_end_first else here

    def guided_limit(self) -> int | None:
        """None when any allowed token leaves room to close; else how near the end the next state must be.

        An optional phase not yet begun may always end instead; a phase that cannot close in the tokens
        left whatever is chosen is not narrowed (its output is cut by max_tokens, as it would be anyway)."""
        if self.left is None:
            return None
        walk = self._walk
        state = walk.guide.get_state()
        compiled = walk.compiled
        # the next state must be this near the end of the phase (and of a counted string's minimum length)
        limit = self.left - 1 - self.next_cost - walk.pending_min
        if compiled.free(state, walk.need, limit, walk.top):
            return None
        optional = not walk.started and walk.current.may_end_first
        if limit < compiled.distance(state, walk.need) - 1 and not optional:
            return None
        return max(limit, -1)

    def free_limit(self, phase: FreeText, marker: bytes, held: int) -> int | None:
        """For a thought that must close before constrained output: None while a free token leaves room to write
        the closer and what follows; else how many tokens may remain after the next one (the closer is forced)."""
        if self.left is None or phase.may_end or not phase.enter:
            return None
        cost = self._walk.vocab.marker_cost(marker)
        limit = self.left - 1 - self.next_cost
        if max(cost) <= limit or cost[held] > limit + 1:
            return None
        return limit

    def marker_cannot_fit(self, marker: bytes, held: int) -> bool:
        """An optional marker (a call's opener in free text) with no room left to finish what it opens."""
        if self.left is None or not self._walk.current.may_end:
            return False
        return self._walk.vocab.marker_cost(marker)[held] + self.next_cost > self.left

    def forced_closer(self) -> ForcedCloser | None:
        """The thought's closer, when its budget leaves no room for another free token; where the thought must
        also close before max_tokens (a phase after it), the nearer of the two limits holds."""
        walk = self._walk
        if walk.thought is None or not walk.thought.thinking:
            return None
        forced = walk.thought.forced(walk.vocab.marker_cost)
        if forced is None or walk.free_rest or walk.finished or not isinstance(walk.current, FreeText):
            return forced
        phase = walk.current
        if phase.marker.encode() != forced.closer:
            return forced
        limit = self.free_limit(phase, forced.closer, forced.held)
        return forced if limit is None or limit >= forced.limit else replace(forced, limit=limit)


def _finish_costs(walk: PlanWalk) -> list[int]:
    """For each phase, the fewest tokens that finish the plan from its start (one more entry: after the last)."""
    plan, vocab = walk.plan, walk.vocab
    phases = plan.phases
    after = [0] * (len(phases) + 1)
    if plan.loop_from is not None:  # the phase looped back to may end at its start (the end token)
        after[-1] = 1 if isinstance(phases[plan.loop_from], Guided) else 0
    for i in range(len(phases) - 1, -1, -1):
        phase = phases[i]
        if isinstance(phase, FreeText):
            need = vocab.marker_cost(phase.marker.encode())[0] + after[i + 1] if phase.enter else 0
            after[i] = 0 if phase.may_end else min(need, UNREACHABLE)
            continue
        compiled = walk.indexes[phase.pattern]
        need = min(compiled.distance(compiled.index.get_initial_state()) + after[i + 1], UNREACHABLE)
        after[i] = min(1, need) if phase.may_end_first else need
    return after
