"""The decode step's cost model (lexi.engine.step_cost): what a sequence and a draft token cost, from timed steps."""

from __future__ import annotations

import random

import pytest

from lexi.engine.step_cost import StepCost


def test_nothing_is_known_before_a_step_is_timed():
    assert StepCost().estimate(1) is None
    with pytest.raises(ValueError, match="decay"):
        StepCost(decay=0.0)


def test_the_fit_finds_each_part_of_a_step_under_noise():
    """Steps of 1-4 sequences and 0-24 draft tokens, 4 ms + 3 ms a sequence + 2 ms once any draft is checked + 2 ms
    a draft token, +-10% noise."""
    cost, rng = StepCost(), random.Random(0)
    for _ in range(400):
        n, d = rng.randint(1, 4), rng.choice([0, 0, *range(1, 25)])
        cost.observe(n, d, (4e-3 + 3e-3 * n + 2e-3 * (d > 0) + 2e-3 * d) * rng.uniform(0.9, 1.1))
    for n in (1, 4):
        est = cost.estimate(n)
        assert est.base == pytest.approx(4e-3 + 3e-3 * n, rel=0.15)
        assert est.per_draft == pytest.approx(2e-3, rel=0.1)
        assert est.jump == pytest.approx(2e-3, abs=1e-3)


def test_drafts_that_never_varied_lean_on_the_prior_and_evidence_outweighs_it():
    cost = StepCost(prior_ratio=0.25)
    for _ in range(50):
        cost.observe(1, 0, 6e-3)  # no drafts yet: a draft token is taken to cost a quarter of a step
    assert cost.estimate(1).base == pytest.approx(6e-3, rel=1e-3)
    assert cost.estimate(1).per_draft == pytest.approx(0.25 * 6e-3, rel=0.05)
    for _ in range(50):
        cost.observe(1, 8, 6e-3 + 8 * 2.4e-3)  # then 8-token drafts, 2.4 ms each
    assert cost.estimate(1).per_draft == pytest.approx(2.4e-3, rel=0.05)


def test_old_steps_weigh_less():
    cost = StepCost(decay=0.9)
    for d in range(200):
        cost.observe(1, d % 5, 5e-3 + 1e-3 * (d % 5))
    for d in range(200):  # the machine got busier: every part costs twice as much
        cost.observe(1, d % 5, 10e-3 + 2e-3 * (d % 5))
    est = cost.estimate(1)
    assert est.base == pytest.approx(10e-3, rel=0.03) and est.per_draft == pytest.approx(2e-3, rel=0.08)


def test_a_fit_gone_astray_never_makes_steps_or_drafts_free():
    cost = StepCost()
    for _ in range(20):
        cost.observe(1, 8, 1e-3)
        cost.observe(1, 0, 9e-3)  # noise so bad that more drafts look faster
    est = cost.estimate(1)
    assert est.base > 0 and est.per_draft > 0


def test_the_prior_alone_is_a_row_per_sequence():
    prior = StepCost(prior_ratio=0.25).prior(4)
    assert (prior.base, prior.per_draft) == (4.0, 0.25)
