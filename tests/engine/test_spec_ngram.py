"""Speculative decoding by prompt lookup (--spec ngram) over the real bundled models: proposals from the
sequence's own tokens, and greedy output token for token what decoding a token a step gives (--deterministic);
sampled rows speculate beside them, reproducibly under their seeds."""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import collect, run, running_engine, tokens_of

from lexi.engine.draft_budget import draft_budget, worth_checking
from lexi.engine.ngram import NgramIndex, SpecConfig
from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams
from lexi.engine.step_cost import CostEstimate

CODE = (
    "def area(width, height):\n    return width * height\n\n"
    "def perimeter(width, height):\n    return 2 * (width + height)\n\n"
)
PROMPTS = [
    CODE + CODE[:30],  # the model goes on copying: drafts are taken
    "The capital of France is",  # free prose: few or no proposals
    "Copy the list: red, orange, yellow, green, blue, indigo, violet. The list: red, orange,",
    "numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10. again: 1, 2, 3,",
]


def test_a_proposal_continues_the_longest_most_recent_match():
    index = NgramIndex()
    tokens = [1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 6, 3, 4]
    index.sync(tokens)
    assert index.propose(3, 2) == [
        7,
        8,
        6,
    ]  # "2 3 4"... "3 4" most recently followed by 7 (the match "2 3 4" is longer)
    tokens.append(5)  # the end is now "3 4 5": only its first occurrence has it
    index.sync(tokens)
    assert index.propose(2, 2) == [9, 2]
    assert index.propose(2, 4) == []  # no 4-token match
    index.sync(tokens + [42])
    assert index.propose(8, 1) == []  # 42 never occurred before
    with pytest.raises(ValueError):
        index.sync([1])


def test_spec_config_is_checked():
    for bad in ({"method": "draft"}, {"max_tokens": 0}, {"min_match": 9}):
        with pytest.raises(ValueError):
            SpecConfig(**bad)


def generate_all(model, tok, prompts, params_of, spec: SpecConfig):
    """Every prompt's tokens, all in one batch; the engine's stats after."""
    with running_engine(model, tok, parallel=len(prompts), ctx_size=512, spec=spec) as engine:

        async def together():
            return await asyncio.gather(
                *(collect(engine, GenerationRequest(tok.encode(p), params_of(i))) for i, p in enumerate(prompts))
            )

        results = run(together())
        stats = engine.stats.snapshot()
    return [tokens_of(r) for r in results], results, stats


@pytest.mark.parametrize("bundle", ["smollm2_deterministic", "gemma3_deterministic"])
def test_greedy_output_is_unchanged_by_speculation_in_a_mixed_batch(bundle, request):
    model, tok = request.getfixturevalue(bundle)
    greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    sampled = SamplingParams(temperature=0.9, seed=7, max_tokens=48, ignore_eos=True)
    opted_out = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, speculative=False)
    kinds = [greedy, greedy, sampled, opted_out]  # rows that speculate beside rows that do not

    def params_of(i):
        return kinds[i % len(kinds)]

    off, _, _ = generate_all(model, tok, PROMPTS, params_of, SpecConfig("off"))
    on, deltas, stats = generate_all(model, tok, PROMPTS, params_of, SpecConfig("ngram", 8, 2))
    again, _, _ = generate_all(model, tok, PROMPTS, params_of, SpecConfig("ngram", 8, 2))
    sampled_rows = [i for i in range(len(PROMPTS)) if params_of(i) is sampled]
    assert [t for i, t in enumerate(on) if i not in sampled_rows] == [
        t for i, t in enumerate(off) if i not in sampled_rows
    ]
    # a sampled row speculates too (tests/engine/test_spec_sampling.py checks its distribution); with its seed
    # it is reproducible, though not the same draws as without speculation (the acceptance tests draw too)
    assert on == again
    assert stats["spec_accepted_total"] > 0 and stats["spec_proposed_total"] >= stats["spec_accepted_total"]
    assert stats["kv_blocks_used"] == 0
    assert all(d[-1].completion_tokens == 48 for d in deltas)
    assert any(len(d.token_ids) > 1 for d in deltas[0]), "a step delivered several tokens"
    # the step count shows the saving: fewer steps than tokens on the repeating prompt
    assert len(deltas[0]) < 48


def test_a_stop_inside_an_accepted_draft_ends_there(smollm2_deterministic):
    model, tok = smollm2_deterministic
    prompt = [PROMPTS[0]]
    plain = SamplingParams(temperature=0.0, max_tokens=60)
    off, _, _ = generate_all(model, tok, prompt, lambda i: plain, SpecConfig("off"))
    text = tok.decode(off[0])
    stop = text.strip().split()[3]  # a word the answer writes a few tokens in
    stopping = SamplingParams(temperature=0.0, max_tokens=60, stop=(stop,))
    off, off_deltas, _ = generate_all(model, tok, prompt, lambda i: stopping, SpecConfig("off"))
    on, on_deltas, _ = generate_all(model, tok, prompt, lambda i: stopping, SpecConfig("ngram", 8, 1))
    assert on == off and on_deltas[0][-1].finish_reason == off_deltas[0][-1].finish_reason == "stop"
    assert on_deltas[0][-1].completion_tokens == off_deltas[0][-1].completion_tokens == len(off[0])
    assert "".join(d.text for d in on_deltas[0]) == "".join(d.text for d in off_deltas[0])


def test_a_pace_learns_how_often_drafts_are_taken_and_spaces_its_probes():
    from lexi.engine.ngram import DraftPace

    pace = DraftPace()
    assert pace.acceptance == (0.5, 0.9) and pace.probe_due()  # the priors, a token tried
    for _ in range(20):
        pace.checked(8, 8)  # whole drafts taken: the first and 7 later tokens tried, all taken
    first, later = pace.acceptance
    assert 0.9 < first < 1.0 and 0.99 < later < 1.0
    pace.checked(8, 3)  # the fourth token refused: the first and 3 later tried, 2 of those taken
    assert pace.acceptance[0] > first and 0.97 < pace.acceptance[1] < later
    guesses = DraftPace()
    for _ in range(30):  # an edit's lookups: the first token often wrong, the copy right once it is not
        guesses.checked(8, 0)
        guesses.checked(8, 8)
    first, later = guesses.acceptance
    assert 0.4 < first < 0.6 and later > 0.98
    prose = DraftPace()
    for _ in range(30):
        prose.checked(1, 0)
    assert prose.acceptance[0] < 0.05  # one-token probes weigh at most ten tries against the prior
    for _ in range(12):  # probes that keep missing wait 1, 3, 7 .. 63 chances
        prose.checked(1, 0)
    assert [prose.probe_due() for _ in range(64)] == [False] * 63 + [True]
    prose.checked(1, 1)  # a probe taken: half the wait (common words are taken now and then)
    assert [prose.probe_due() for _ in range(32)] == [False] * 31 + [True]
    assert prose.acceptance[0] > 0.05
    prose.checked(1, 1)
    prose.checked(1, 1)
    assert sum(not prose.probe_due() for _ in range(8)) == 7


def test_a_step_checks_the_draft_tokens_worth_their_rows():
    cost = CostEstimate(base=6.5e-3, per_draft=2.4e-3)  # SmolLM2 on 2 AVX2 cores
    # a token is worth the chance it is taken (a1 a^(j-1)); it is checked while worth / per_draft beats tokens / s
    assert worth_checking([8], [(0.08, 0.5)], 1, cost, None) == [0]  # prose: a row costs more than it yields
    assert worth_checking([8], [(0.9, 0.9)], 1, cost, None) == [4]
    assert worth_checking([8], [(0.99, 0.99)], 1, cost, None) == [8]
    assert worth_checking([8], [(0.72, 0.94)], 1, CostEstimate(8.6e-3, 3.4e-3), None) == [5]  # an edit's guesses
    assert worth_checking([3], [(0.99, 0.99)], 1, cost, None) == [3]  # never more than was proposed
    # what checking any draft adds once: one token worth 0.6 pays for its row, not for the jump too
    assert worth_checking([1], [(0.6, 0.9)], 1, cost, None) == [1]
    assert worth_checking([1], [(0.6, 0.9)], 1, CostEstimate(6.5e-3, 2.4e-3, jump=2e-3), None) == [0]
    assert worth_checking([8], [(0.6, 0.9)], 1, CostEstimate(6.5e-3, 2.4e-3, jump=2e-3), None) == [4]
    assert worth_checking([8], [(0.5, 0.5)], 1, CostEstimate(6.5e-3, 1e-5), None) == [8]  # rows next to free (GPU)
    # across a batch the best tokens come first: the repeating sequence's, then none of the prose's
    busy = CostEstimate(19e-3, 2.4e-3)
    assert worth_checking([8, 8, 0, 8], [(0.99, 0.99), (0.08, 0.5), (0.99, 0.99), (0.8, 0.8)], 4, busy, None) == [
        8, 0, 0, 1,
    ]  # fmt: skip
    # within a budget (several sequences: the cheap rows), in order of worth
    assert worth_checking([8, 8], [(0.9, 0.9), (0.95, 0.95)], 2, CostEstimate(10e-3, 2.4e-3), 6) == [2, 4]
    # before any step was timed every draft is checked, within the budget in batch order
    assert worth_checking([2, 0, 3, 8], [(0.1, 0.1)] * 4, 4, None, 6) == [2, 0, 3, 1]
    assert worth_checking([8, 8], [(0.1, 0.1)] * 2, 2, None, None) == [8, 8]
    assert draft_budget(8, 1) is None  # a lone sequence: no budget
    assert draft_budget(None, 4) is None  # no cheap-row path: no budget
    assert draft_budget(8, 4) == 4 and draft_budget(8, 8) == 0 and draft_budget(8, 12) == 0


REPEATING = [
    CODE + CODE[:30],
    PROMPTS[2],
    PROMPTS[3],
    "Say it twice: the quick brown fox jumps over the lazy dog. Again: the quick brown fox jumps",
]


def test_concurrent_drafts_stay_within_the_cheap_rows_and_a_lone_stream_has_no_budget(smollm2):
    """Four repeating streams want 8-token drafts each (36 rows a step): the steps where several decode feed
    at most the CPU kernels' cheap rows; one stream alone is held only by what its draft tokens are worth
    (test_a_step_checks_the_draft_tokens_worth_their_rows), and checks several at once."""
    model, tok = smollm2
    assert model.cheap_rows == 8  # GEMV_MAX_M of lexi/kernels/cpu/lexi_cpu.h, read from the C module
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    spec = SpecConfig("ngram", 8, 2)
    _, _, stats = generate_all(model, tok, REPEATING, lambda i: params, spec)
    assert stats["spec_accepted_total"] > 0 and stats["spec_budget_cut_total"] > 0
    assert len(REPEATING) < stats["spec_batch_rows_max"] <= model.cheap_rows  # drafts checked, within the budget
    _, deltas, alone = generate_all(model, tok, REPEATING[2:3], lambda i: params, spec)
    assert max(len(d.token_ids) for d in deltas[0]) > 3  # drafts taken, several tokens in one step
    assert alone["spec_batch_rows_max"] == 0
