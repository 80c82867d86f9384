"""Which draft tokens a step checks: those worth the rows they cost (no torch).

A decoding sequence feeds one row of x a step and gets one token; each draft token it adds feeds one more row and
gets a token only if it and the draft's tokens before it are taken. The j-th token of a draft whose first token is
taken with chance `a1` and each later one with chance `a` (lexi.engine.ngram.DraftPace) is worth a1 a^(j-1) tokens
and costs `per_draft` seconds (lexi.engine.step_cost). Draft tokens are taken best first, across the batch, while
each adds tokens faster than the step so far yields them (worth / per_draft > tokens / seconds), and then only if
the step, with what checking any draft adds once (`jump`), yields tokens faster than one without drafts. So text
that repeats checks long drafts, prose (under a tenth of first tokens taken) none, and a batch gives its rows to the
sequences whose drafts pay.

Where several sequences decode, a step also keeps within `ModelRunner.cheap_rows`, the rows the model's matmuls take
on their decode path (each weight read once for all of them): past it the CPU kernels' cost per row grows (four
9-row sequences: 3.1 ms a draft row against 2.4 ms for one). Only speed depends on any of this: a check gives the
output that decoding a token a step gives.

"""

from __future__ import annotations

import heapq

from lexi.engine.step_cost import CostEstimate


def draft_budget(cheap_rows: int | None, decoding: int) -> int | None:
    """Draft tokens a step with `decoding` decoding sequences may check in all; None: no limit (a lone sequence,
    or a model whose matmuls have no cheap-row path)."""
    if cheap_rows is None or decoding <= 1:
        return None
    return max(cheap_rows - decoding, 0)


def worth_checking(
    lengths: list[int],
    acceptance: list[tuple[float, float]],
    decoding: int,
    cost: CostEstimate | None,
    budget: int | None,
) -> list[int]:
    """How many tokens of each draft (`lengths` tokens proposed; `acceptance`: the chances its first and each later
    token are taken; in batch order) a step of `decoding` decoding sequences checks. Before any step was timed
    (`cost` None) every draft is checked, within `budget` in batch order."""
    kept = [0] * len(lengths)
    left = budget if budget is not None else sum(lengths)
    if cost is None:
        for i, n in enumerate(lengths):
            kept[i] = min(n, left)
            left -= kept[i]
        return kept
    tokens, seconds = float(decoding), cost.base + cost.jump
    best = [(-acceptance[i][0], i) for i, n in enumerate(lengths) if n > 0]  # each draft's next token: (-worth, i)
    heapq.heapify(best)
    while best and left > 0:
        worth, i = best[0]
        worth = -worth
        if worth * seconds <= cost.per_draft * tokens:  # the best one left does not pay: none after it does
            break
        heapq.heappop(best)
        kept[i] += 1
        left -= 1
        tokens += worth
        seconds += cost.per_draft
        if kept[i] < lengths[i]:
            heapq.heappush(best, (-worth * acceptance[i][1], i))
    if tokens * cost.base <= decoding * seconds:  # the drafts worth most do not pay for the check's own jump
        return [0] * len(lengths)
    return kept
