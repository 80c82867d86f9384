"""What a decode step costs by what it feeds, learned from the engine's own steps (no torch).

Speculation pays for every draft token it checks with a row of every matmul, and what a row costs depends on the
machine, the model and the kernels: a CPU's integer kernels pay most of a step again per row past the first few
(SmolLM2 on 2 AVX2 cores: 6.5 ms for one row, +2.4 ms a row), a GPU almost nothing. So the engine times its decode
steps and fits seconds ~ fixed + per_sequence * sequences + jump * (any draft) + per_draft * draft tokens by least
squares, older steps weighing less (`decay` a step), and the speculator checks a draft token only where it is worth
that row (lexi.engine.draft_budget). `jump` is what checking any draft adds to a step once (SmolLM2: the first
draft token +5.5 ms, each next one +3.3 ms: a step that checks computes every row's logits, and leaves the
one-row fast path).

While drafts have not varied enough to tell their share, the fit leans on a prior: a draft token costs
`prior_ratio` of the mean step, weighing as one step whose draft was one token longer or shorter than the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

FEATURES = 4  # 1, sequences, any draft, draft tokens


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """A step of `sequences` decoding sequences: `base` seconds without drafts; one that checks drafts adds `jump`
    seconds once and `per_draft` seconds a draft token."""

    base: float
    per_draft: float
    jump: float = 0.0


class StepCost:
    """Decayed least squares of decode steps' seconds on (1, sequences, any draft, draft tokens)."""

    __slots__ = ("_decay", "_prior_ratio", "_weight", "_xx", "_xy", "_y")

    def __init__(self, decay: float = 0.99, prior_ratio: float = 0.25) -> None:
        if not 0.0 < decay <= 1.0 or prior_ratio < 0.0:
            raise ValueError(f"decay must be in (0, 1] and prior_ratio >= 0, got {decay}, {prior_ratio}")
        self._decay, self._prior_ratio = decay, prior_ratio
        self._weight = 0.0  # the steps' total weight
        self._y = 0.0  # weighted sum of seconds
        self._xx = [[0.0] * FEATURES for _ in range(FEATURES)]
        self._xy = [0.0] * FEATURES

    def observe(self, sequences: int, drafts: int, seconds: float) -> None:
        """A step of `sequences` decoding sequences (and nothing prefilling) checked `drafts` draft tokens in all
        and took `seconds`, everything the engine did for it included."""
        if sequences < 1 or drafts < 0 or not seconds > 0.0:
            return
        x, d = (1.0, float(sequences), float(drafts > 0), float(drafts)), self._decay
        self._weight = self._weight * d + 1.0
        self._y = self._y * d + seconds
        for i in range(FEATURES):
            self._xy[i] = self._xy[i] * d + x[i] * seconds
            for j in range(FEATURES):
                self._xx[i][j] = self._xx[i][j] * d + x[i] * x[j]

    def prior(self, sequences: int) -> CostEstimate:
        """The prior alone, a sequence's row taken as the unit: the same on every machine and every run, for what
        must not depend on timing."""
        return CostEstimate(float(max(sequences, 1)), self._prior_ratio)

    def estimate(self, sequences: int) -> CostEstimate | None:
        """The fit at `sequences` decoding sequences; None before any step was timed."""
        if self._weight <= 0.0:
            return None
        mean = self._y / self._weight
        xx = [row[:] for row in self._xx]
        xy = self._xy[:]
        xx[1][1] += 1e-3 * self._weight  # sequences that never varied: their share goes to the fixed term
        xx[2][2] += 1.0  # steps that always (or never) checked drafts: no jump but what the steps show
        xx[3][3] += 1.0  # the prior's step: a draft token costs prior_ratio of the mean step
        xy[3] += self._prior_ratio * mean
        fixed, per_sequence, jump, per_draft = _solve(xx, xy)
        base = max(fixed + per_sequence * sequences, 0.05 * mean)  # a fit astray on noisy steps: nothing is free
        return CostEstimate(base, max(per_draft, 0.01 * base), max(jump, 0.0))


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """a x = b by Gaussian elimination with partial pivoting (a is small, symmetric positive definite here)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0.0:
            return [0.0] * n
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in reversed(range(n)):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x
