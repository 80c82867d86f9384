"""One request's token constraint: its plan's phases walked token by token on the engine thread.

Before each sample the engine asks `mask_key()`, a name for the allowed set (None when nothing is restricted), and
calls `fill_mask(row)` to write that set's bits into a packed int32 row only the first time it meets the key; then
`advance(token)` with what was sampled; it stops the request with "stop" once `is_finished()`. Plain data in, plain
data out: no torch here. Speculation walks it along a draft and back (`snapshot`, `restore`).

It is four concerns, one module each: where the walk is (`turn_walk`), the room left to close within max_tokens
(`turn_budget`), the allowed sets that follow from both (`turn_masks`), and a walk's state kept to come back to
(`turn_snapshot`).
"""

from __future__ import annotations

import numpy as np

from lexi.structured.compiled_index import CompiledIndex
from lexi.structured.plan import ConstraintPlan
from lexi.structured.turn_budget import ClosingBudget
from lexi.structured.turn_masks import TurnMasks
from lexi.structured.turn_snapshot import Snapshot
from lexi.structured.turn_walk import PlanWalk
from lexi.structured.vocabulary import ConstraintVocabulary


class TurnConstraint:
    """Walks a written plan (lexi.engine.request.TokenConstraint, with speculation's snapshot and restore).

    With a budget (the request's max_tokens), a step that could leave the output unable to close in the
    tokens left is narrowed to the tokens that keep it closable (`turn_budget`).
    """

    __slots__ = ("_walk", "_budget", "_masks")

    def __init__(
        self,
        plan: ConstraintPlan,
        indexes: dict[str, CompiledIndex],
        vocab: ConstraintVocabulary,
        budget: int | None = None,
    ) -> None:
        self._walk = PlanWalk(plan, indexes, vocab)
        self._budget = ClosingBudget(self._walk, budget)
        self._masks = TurnMasks(self._walk, self._budget)

    def mask_key(self) -> tuple | None:
        """A name for the next step's allowed set; None when nothing is restricted."""
        return self._masks.key()

    def fill_mask(self, row: np.ndarray) -> tuple[bool, np.ndarray] | None:
        """Write the set `mask_key` named as bits of `row` (int32 words); inside a counted string, also return the set
        as ids, (False, the tokens it leaves out) or (True, those it allows), whichever are fewer, so the engine need
        not read the row back."""
        return self._masks.fill(row)

    def advance(self, token_id: int) -> None:
        self._budget.spend()
        self._walk.advance(token_id)

    def is_finished(self) -> bool:
        """Nothing but the end of output can follow: the engine stops here."""
        return self._walk.finished

    def closing_distance(self) -> int:
        """Fewest tokens that finish what the plan demands from here (0 when the output may end now)."""
        return self._budget.closing_distance()

    def snapshot(self) -> Snapshot:
        """Where the walk is, to come back to with `restore` after advancing along a speculative draft (the engine
        finds each draft position's mask that way). At most MAX_ROLLBACK tokens may be advanced in between."""
        return Snapshot.take(self._walk, self._budget)

    def restore(self, snapshot: Snapshot) -> None:
        """Back to the `snapshot` (the guide of that moment rolled back to its state then)."""
        snapshot.restore(self._walk, self._budget)
