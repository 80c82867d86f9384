"""How many draft tokens one step checks across its batch, and which decoding sequences get them (no torch).

A decoding sequence feeds one row of x a step, and its draft one more row a token. `ModelRunner.cheap_rows` is
the rows the model's matmuls take on their decode path, each weight read once for all of them (8 rows of x on
the CPU kernels); four sequences with 8-token drafts feed 36 rows, and where drafts are mostly refused (prose)
every stream of the batch pays for such steps (four prose streams ran at 0.93x of speculation off, README). So
a step of several decoding sequences checks at most `cheap_rows - decoding` draft tokens in all, and they go
first to the sequences whose last check took the most (ties in batch order: a batch always shares the same way).

A lone decoding sequence keeps its whole draft (up to --spec-max: 9 rows at the default 8), as before the
budget: that is the setting whose single-stream runs gained on every workload (edit 2.53x, JSON 4.43x, prose
1.24x), its pace (`DraftPace`) already shortens drafts that are refused, and no other stream waits on its step.
Only speed depends on any of this: a check gives the output that decoding a token a step gives.
"""

from __future__ import annotations


def draft_budget(cheap_rows: int | None, decoding: int) -> int | None:
    """Draft tokens a step with `decoding` decoding sequences may check in all; None: no limit (a lone sequence,
    or a model whose matmuls have no cheap-row path)."""
    if cheap_rows is None or decoding <= 1:
        return None
    return max(cheap_rows - decoding, 0)


def share_budget(lengths: list[int], promise: list[int], budget: int | None) -> list[int]:
    """How many tokens of each proposed draft (`lengths`, in batch order) the step checks: each in turn by
    `promise` (the tokens its last check took), highest first, takes what it proposed of what is left."""
    if budget is None:
        return list(lengths)
    kept = [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -promise[i]):  # a stable sort: ties keep batch order
        kept[i] = min(lengths[i], budget)
        budget -= kept[i]
    return kept
