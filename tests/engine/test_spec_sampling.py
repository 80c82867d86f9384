"""Speculative sampling keeps the distribution: Sampler.verify_draft over fixed logits rows, drawn with many
seeds, against the distribution each position's sampling gives, computed here from the definitions.

Each check is a chi-square goodness-of-fit test at p > 1e-4; the file makes 9 of them, so a correct sampler
fails it with probability below 1e-3.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from lexi.engine.sampler import Sampler, SamplerState
from lexi.engine.sampling import SamplingParams

VOCAB = 8
DRAWS = 12000


def expected(x: torch.Tensor, params: SamplingParams, seen: Counter) -> torch.Tensor:
    """The distribution one sampling step gives over the vocabulary: presence penalty on the tokens already
    written, top-k, temperature (top_p 1 and min_p 0 here)."""
    x = x.clone().double()
    for token in seen:
        x[token] -= params.presence_penalty
    keep = torch.ones(VOCAB, dtype=torch.bool)
    if 0 < params.top_k < VOCAB:
        keep[:] = False
        keep[x.topk(params.top_k).indices] = True
    probs = torch.softmax(torch.where(keep, x / params.temperature, float("-inf")), dim=-1)
    return probs


def chi_square_p(observed: Counter, probs: torch.Tensor) -> float:
    total = sum(observed.values())
    assert total > 500, "too few draws reach this position to test it"
    assert all(probs[t] > 0 for t in observed), "a token the distribution never gives was drawn"
    bins = [t for t in range(VOCAB) if probs[t] > 0]
    stat = sum((observed[t] - total * float(probs[t])) ** 2 / (total * float(probs[t])) for t in bins)
    df = torch.tensor((len(bins) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(df, torch.tensor(stat / 2, dtype=torch.float64)))


CASES = {
    "plain": (SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0), (1, 7)),
    "top_k, presence, temperature": (
        SamplingParams(temperature=0.7, top_k=4, top_p=1.0, min_p=0.0, presence_penalty=0.5),
        (1, 3),
    ),
    "first draft token outside top_k": (SamplingParams(temperature=1.2, top_k=3, top_p=1.0, min_p=0.0), (7, 0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_position_keeps_the_distribution_decoding_gives(case):
    params, draft = CASES[case]
    rows = torch.tensor(
        [[1.0, 2.0, 1.5, 0.2, -1.0, 0.8, 1.1, -3.0], [0.5, 1.8, -0.5, 1.7, 0.0, 1.0, 0.3, 2.2],
         [2.0, -1.0, 0.5, 0.9, 1.9, 0.1, -0.4, 1.0]]
    )  # fmt: skip
    sampler = Sampler(VOCAB)
    first, second, third = Counter(), Counter(), Counter()
    for seed in range(DRAWS):
        state = SamplerState(SamplingParams(**{**_fields(params), "seed": seed}))
        out = [r.token_id for r in sampler.verify_draft(rows.clone(), draft, state, [])]
        assert 1 <= len(out) <= 3 and all(t == d for t, d in zip(out[:-1], draft, strict=False))
        first[out[0]] += 1
        if len(out) > 1:
            second[out[1]] += 1
        if len(out) > 2:
            third[out[2]] += 1
    p0 = expected(rows[0], params, Counter())
    assert chi_square_p(first, p0) > 1e-4
    if p0[draft[0]] == 0:
        assert not second  # a draft token sampling never gives is never taken
        return
    p1 = expected(rows[1], params, Counter([draft[0]]))
    assert chi_square_p(second, p1) > 1e-4
    # the bonus row: reached when both draft tokens were taken
    assert chi_square_p(third, expected(rows[2], params, Counter(draft))) > 1e-4


def _fields(params: SamplingParams) -> dict:
    return {name: getattr(params, name) for name in SamplingParams.__dataclass_fields__}
