"""The sampler's math on hand-made logits, and SamplingParams validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lexi.engine.sampler import Sampler, SamplerState
from lexi.engine.sampling import SamplingParams

V = 8


def logits_from_probs(probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) if p > 0 else -1e9 for p in probs]])


def draws(logits: torch.Tensor, params: SamplingParams, n: int = 300, history=(), constraint=None) -> list[int]:
    sampler, state = Sampler(logits.shape[-1]), SamplerState(params, constraint)
    out = []
    for _ in range(n):
        state.output_counts.clear()
        result = sampler.sample(logits.clone(), [state], [list(history)])[0]  # the sampler masks in place
        assert not isinstance(result, Exception), result
        out.append(result.token_id)
    return out


PROBS = [0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005]
FREE = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", 2.5),
        ("top_k", -1),
        ("top_p", 1.5),
        ("min_p", -0.1),
        ("presence_penalty", 3.0),
        ("frequency_penalty", -2.5),
        ("repeat_penalty", 0.0),
        ("max_tokens", 0),
        ("logprobs", 21),
        ("stop", ("",)),
        ("logit_bias", {5: 101.0}),
        ("logit_bias", {-1: 1.0}),
    ],
)
def test_params_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_params_normalise_stop_and_bias():
    params = SamplingParams(stop="END", logit_bias={"5": 2})
    assert params.stop == ("END",) and dict(params.logit_bias) == {5: 2.0}


def test_greedy_is_argmax_and_temperature_sampling_follows_the_distribution():
    logits = logits_from_probs(PROBS)
    assert set(draws(logits, SamplingParams(temperature=0.0), n=5)) == {0}
    got = draws(logits, SamplingParams(**FREE), n=2000)
    freq = [got.count(t) / len(got) for t in range(V)]
    assert all(abs(f - p) < 0.04 for f, p in zip(freq, PROBS, strict=True)), freq


def test_top_k_top_p_min_p_truncate():
    logits = logits_from_probs(PROBS)
    assert set(draws(logits, SamplingParams(**{**FREE, "top_k": 2}))) == {0, 1}
    assert set(draws(logits, SamplingParams(**{**FREE, "top_p": 0.7}))) == {0, 1, 2}  # 0.4+0.25 < 0.7
    assert set(draws(logits, SamplingParams(**{**FREE, "min_p": 0.3}))) == {0, 1, 2}  # >= 0.12
    assert set(draws(logits, SamplingParams(**{**FREE, "top_p": 0.0}))) == {0}


def test_seeded_draws_repeat_and_differ_across_seeds():
    logits = logits_from_probs(PROBS)
    a = draws(logits, SamplingParams(**FREE), n=50)
    assert draws(logits, SamplingParams(**FREE), n=50) == a
    assert draws(logits, SamplingParams(**{**FREE, "seed": 8}), n=50) != a


def test_penalties_and_bias():
    logits = torch.tensor([[3.0, 2.9, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    greedy = SamplingParams(temperature=0.0, repeat_penalty=1.5)
    assert draws(logits, greedy, n=1, history=[0]) == [1]  # 3.0 / 1.5 < 2.9
    sampler = Sampler(V)
    state = SamplerState(SamplingParams(temperature=0.0, presence_penalty=0.05, frequency_penalty=0.04))
    picks = [sampler.sample(logits, [state], [[]])[0].token_id for _ in range(3)]
    assert picks == [0, 0, 1]  # after two 0s: 3.0 - 0.05 - 2 * 0.04 = 2.87 < 2.9
    biased = SamplingParams(temperature=0.0, logit_bias={2: 10.0})
    assert draws(logits, biased, n=1) == [2]


def set_bits(row: np.ndarray, ids) -> None:
    row[:] = 0
    for token in ids:
        row.view(np.uint32)[token // 32] |= np.uint32(1 << (token % 32))


class OnlyEven:
    """A constraint: even token ids only, finished after three tokens."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def mask_key(self):
        return ("even",)

    def fill_mask(self, row: np.ndarray) -> None:
        set_bits(row, range(0, V, 2))

    def advance(self, token_id: int) -> None:
        self.seen.append(token_id)

    def is_finished(self) -> bool:
        return len(self.seen) >= 3


def test_constraint_mask_and_ignore_eos_ban():
    logits = logits_from_probs(PROBS)
    assert set(draws(logits, SamplingParams(**FREE), constraint=OnlyEven())) <= {0, 2, 4, 6}
    sampler = Sampler(V)
    state = SamplerState(SamplingParams(temperature=0.0), banned=(0,))
    assert sampler.sample(logits, [state], [[]])[0].token_id == 1


def test_a_failing_constraint_fails_its_row_only():
    class Broken(OnlyEven):
        def mask_key(self):
            return ("nothing",)

        def fill_mask(self, row: np.ndarray) -> None:
            set_bits(row, [])

    logits = logits_from_probs(PROBS).repeat(2, 1)
    sampler = Sampler(V)
    states = [SamplerState(SamplingParams(temperature=0.0), Broken()), SamplerState(SamplingParams(temperature=0.0))]
    results = sampler.sample(logits, states, [[], []])
    assert isinstance(results[0], RuntimeError) and results[1].token_id == 0


def test_logprobs_top_n():
    logits = logits_from_probs(PROBS)
    sampler = Sampler(V)
    state = SamplerState(SamplingParams(temperature=0.0, logprobs=3))
    result = sampler.sample(logits, [state], [[]])[0]
    assert result.logprob.token_id == 0 and result.logprob.logprob == pytest.approx(math.log(0.4), abs=1e-5)
    assert [t for t, _ in result.logprob.top] == [0, 1, 2]
    assert [lp for _, lp in result.logprob.top] == pytest.approx([math.log(p) for p in PROBS[:3]], abs=1e-5)
