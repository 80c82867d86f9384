"""--deterministic: greedy tokens at the default dtype do not depend on prefix-cache hits or on the batch.

The same request is run alone, again once its prefix is cached (the second run prefills only the uncached
suffix, in a chunk of another length), and inside a batch of four whose prompts are chunked across steps
beside decoding rows. Every run must give the same tokens, and the logits behind them must be bit-identical.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from engine_helpers import collect, run, running_engine, tokens_of

from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams
from lexi.model.single import SingleSequence

SYSTEM = "You are a helpful assistant who answers in one short sentence. " * 3
TARGET = SYSTEM + "What is the boiling point of water at sea level?"
OTHERS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a village by the mountains, there lived an old clockmaker who " * 3,
]
TEXT = (
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woodcutter and his "
    "three daughters. Every morning he walked into the forest with his axe, and every evening he came home."
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


@pytest.mark.parametrize("bundle", ["smollm2_deterministic", "gemma3_deterministic"])
def test_same_tokens_alone_after_a_cache_hit_and_in_a_batch(bundle, request):
    model, tok = request.getfixturevalue(bundle)
    assert model.dtype == torch.bfloat16 and model.deterministic  # the default dtype, with the flag
    target = tok.encode(TARGET)
    config = dict(parallel=4, ctx_size=256, batch_size=32)
    with running_engine(model, tok, **config) as engine:
        alone = run(collect(engine, GenerationRequest(target, GREEDY)))
        assert alone[-1].cached_tokens == 0
        hit = run(collect(engine, GenerationRequest(target, GREEDY)))
        assert hit[-1].cached_tokens == ((len(target) - 1) // 16) * 16 > 0
    with running_engine(model, tok, **config) as engine:  # fresh: the batch shares steps, not cached blocks

        async def together():
            prompts = [target, *(tok.encode(p) for p in OTHERS)]
            return await asyncio.gather(*(collect(engine, GenerationRequest(p, GREEDY)) for p in prompts))

        batched = run(together())[0]
        assert engine.stats.cached_tokens_total == 0
    assert tokens_of(hit) == tokens_of(alone), (tok.decode(tokens_of(hit)), tok.decode(tokens_of(alone)))
    assert tokens_of(batched) == tokens_of(alone), (tok.decode(tokens_of(batched)), tok.decode(tokens_of(alone)))


@pytest.mark.parametrize("bundle", ["smollm2_deterministic", "gemma3_deterministic"])
def test_logits_are_bit_identical_in_any_chunking(bundle, request):
    """The model-level guarantee behind the test above: a prompt prefilled whole, in uneven chunks, or one token
    at a time gives the same float32 logits bit for bit."""
    model, tok = request.getfixturevalue(bundle)
    ids = tok.encode(TEXT)[:48]
    whole = SingleSequence(model, 64).extend(ids, all_logits=True)
    seq = SingleSequence(model, 64)
    chunked = torch.cat([seq.extend(ids[a:b], all_logits=True) for a, b in ((0, 5), (5, 6), (6, 31), (31, 48))])
    seq = SingleSequence(model, 64)
    stepped = torch.stack([seq.extend([t]) for t in ids])
    assert torch.equal(chunked, whole), (chunked - whole).abs().max()
    assert torch.equal(stepped, whole), (stepped - whole).abs().max()
