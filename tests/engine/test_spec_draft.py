"""Speculative decoding with a draft model (--spec draft): SmolLM2 drafts for itself, both --deterministic, so a
greedy row's draft is what the target would write and nearly all of it is taken: what the check gives is the
output without speculation, token for token, in a mixed batch; the draft model's K/V follow each sequence (its
cursor catches up on a new prompt, keeps the draft tokens taken, writes over the rest), including one that
reuses another's cached prefix."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager

import pytest
from engine_helpers import collect, run, tokens_of

from lexi.engine.config import EngineConfig
from lexi.engine.draft_model import DraftCursor
from lexi.engine.engine import Engine
from lexi.engine.ngram import SpecConfig
from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams

PROMPTS = [
    "The capital of France is",
    "Write a short poem about the sea, the wind over the water and the boats that come home in the evening.",
    "List three colours:",
    "def fibonacci(n):",
]
DRAFT = SpecConfig("draft", 6, model_draft="smollm2-135m-instruct", p_min=0.0)


@contextmanager
def engine_with(model, tok, spec: SpecConfig, parallel: int = 4):
    engine = Engine(model, tok, EngineConfig(parallel=parallel, ctx_size=512, spec=spec),
                    draft_model=model if spec.method == "draft" else None)  # fmt: skip
    engine.start()
    try:
        yield engine
    finally:
        engine.shutdown()


def generate(model, tok, prompts, params_of, spec: SpecConfig):
    with engine_with(model, tok, spec, parallel=len(prompts)) as engine:

        async def together():
            return await asyncio.gather(
                *(collect(engine, GenerationRequest(tok.encode(p), params_of(i))) for i, p in enumerate(prompts))
            )

        results = run(together())
        stats = engine.stats.snapshot()
    return [tokens_of(r) for r in results], results, stats


def test_greedy_rows_take_their_own_drafts_and_keep_their_output(smollm2_deterministic):
    model, tok = smollm2_deterministic
    greedy = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    off, _, _ = generate(model, tok, PROMPTS, lambda i: greedy, SpecConfig("off"))
    on, deltas, stats = generate(model, tok, PROMPTS, lambda i: greedy, DRAFT)
    assert on == off
    # the draft model is the target itself: every proposed token is the target's own choice
    assert stats["spec_proposed_total"] > 60
    assert stats["spec_accepted_total"] >= 0.95 * stats["spec_proposed_total"], stats
    # several tokens a step for every row, the four sharing each step's draft budget (lexi/engine/draft_budget.py)
    assert all(max(len(d.token_ids) for d in row) > 1 for row in deltas), "several tokens a step"
    assert stats["steps_total"] < 40 / 1.5 and 4 < stats["spec_batch_rows_max"] <= model.cheap_rows, stats
    assert stats["kv_blocks_used"] == 0


def test_a_mixed_batch_and_a_shared_prefix(smollm2_deterministic):
    model, tok = smollm2_deterministic
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, seed=3, max_tokens=24, ignore_eos=True)
    kinds = [greedy, sampled, greedy, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True,
                                                       speculative=False)]  # fmt: skip
    shared = PROMPTS[1] + " Make it rhyme."  # reuses the second prompt's cached blocks after it
    kinds.append(greedy)

    def staged(spec):
        with engine_with(model, tok, spec, parallel=4) as engine:

            async def go():
                first = await asyncio.gather(
                    *(collect(engine, GenerationRequest(tok.encode(p), kinds[i])) for i, p in enumerate(PROMPTS))
                )
                later = await collect(engine, GenerationRequest(tok.encode(shared), kinds[4]))
                return [*first, later]

            results = run(go())
            return [tokens_of(r) for r in results], results, engine.stats.snapshot()

    off, _, _ = staged(SpecConfig("off"))
    on, results, stats = staged(DRAFT)
    again, _, _ = staged(DRAFT)
    greedy_rows = [i for i, k in enumerate(kinds) if k.temperature == 0.0]
    assert [on[i] for i in greedy_rows] == [off[i] for i in greedy_rows]
    assert on == again  # the sampled row too, under its seed
    assert results[4][-1].cached_tokens > 0  # the later request did reuse the cached prefix
    assert stats["spec_accepted_total"] > 0 and stats["kv_blocks_used"] == 0


def test_a_cursor_keeps_the_draft_tokens_taken():
    cursor = DraftCursor(computed=5, fed=(7, 8, 9))
    cursor.sync([0, 1, 2, 3, 4, 7, 8, 3, 6])  # 7 and 8 taken, 9 refused
    assert cursor.computed == 7 and cursor.fed == ()
    cursor = DraftCursor(computed=5, fed=(7, 8))
    cursor.sync([0, 1, 2, 3, 4, 7])  # a stop inside the draft cut the tokens back
    assert cursor.computed == 6


def test_a_high_p_min_proposes_less(smollm2_deterministic):
    model, tok = smollm2_deterministic
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    loose = generate(model, tok, PROMPTS, lambda i: greedy, DRAFT)[2]["spec_proposed_total"]
    strict = SpecConfig("draft", 6, model_draft="smollm2-135m-instruct", p_min=0.9)
    tight = generate(model, tok, PROMPTS, lambda i: greedy, strict)[2]["spec_proposed_total"]
    assert tight < loose


def test_the_engine_takes_a_draft_model_exactly_with_spec_draft(smollm2_model, smollm2_tokenizer):
    with pytest.raises(ValueError):
        Engine(smollm2_model, smollm2_tokenizer, EngineConfig(spec=DRAFT))
    with pytest.raises(ValueError):
        Engine(smollm2_model, smollm2_tokenizer, EngineConfig(), draft_model=smollm2_model)
