"""The engine end to end over the real bundled models: batching, prefix cache, aborts, stops, seeds, refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np
import pytest
from engine_helpers import collect, run, running_engine, text_of, tokens_of

from lexi.engine.engine import ContextOverflow, EngineBusy
from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams

PROMPTS = [
    "Hi",
    "The capital of France is",
    "Write a haiku about the sea. The sea is wide and",
    "List three colours of the rainbow, one per line, starting with red. " * 3,
    "Once upon a time, in a village by the mountains, there lived an old clockmaker who " * 6,
    "def fibonacci(n):\n    ",
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


@pytest.mark.parametrize("bundle", ["smollm2_exact", "gemma3_exact"])
def test_batched_greedy_equals_each_alone(bundle, request):
    model, tok = request.getfixturevalue(bundle)
    prompts = [tok.encode(p) for p in PROMPTS]
    assert len({len(p) for p in prompts}) == len(prompts)
    # batch_size 48 chunks the longer prompts across steps while the short ones already decode.
    config = dict(parallel=6, ctx_size=256, batch_size=48)
    with running_engine(model, tok, **config) as engine:
        alone = [tokens_of(run(collect(engine, GenerationRequest(p, GREEDY)))) for p in prompts]
    with running_engine(model, tok, **config) as engine:  # fresh: no prefix-cache hits

        async def together():
            return await asyncio.gather(*(collect(engine, GenerationRequest(p, GREEDY)) for p in prompts))

        results = run(together())
        assert engine.stats.cached_tokens_total == 0
        assert max(engine.stats.snapshot()["steps_total"], 0) < sum(len(a) for a in alone)
    for prompt, a, deltas in zip(PROMPTS, alone, results, strict=True):
        assert tokens_of(deltas) == a, prompt
        assert deltas[-1].finish_reason == "length" and deltas[-1].completion_tokens == 10


def test_prefix_cache_hit_gives_the_same_output(smollm2_exact):
    model, tok = smollm2_exact
    system = "You are a helpful assistant who answers in one short sentence. " * 4
    first = tok.encode(system + "What is the boiling point of water?")
    second = tok.encode(system + "Name a large animal that lives in the ocean.")
    params = SamplingParams(temperature=0.0, max_tokens=12)
    with running_engine(model, tok, parallel=2, ctx_size=256) as fresh:
        expected = tokens_of(run(collect(fresh, GenerationRequest(second, params))))
    with running_engine(model, tok, parallel=2, ctx_size=256) as engine:
        warm = run(collect(engine, GenerationRequest(first, params)))
        assert warm[-1].cached_tokens == 0
        hit = run(collect(engine, GenerationRequest(second, params)))
        again = run(collect(engine, GenerationRequest(first, params)))
    shared = sum(1 for a, b in zip(first, second, strict=False) if a == b)  # common prefix (contiguous here)
    assert hit[-1].cached_tokens == (shared // 16) * 16 > 0
    assert tokens_of(hit) == expected
    assert again[-1].cached_tokens == ((len(first) - 1) // 16) * 16
    assert tokens_of(again) == tokens_of(warm)


def test_aborted_burst_returns_every_block(smollm2):
    model, tok = smollm2
    params = SamplingParams(temperature=0.7, seed=3, max_tokens=40, ignore_eos=True)
    with running_engine(model, tok, parallel=4, ctx_size=256, queue_wait=60) as engine:

        async def burst():
            async def client(i):
                req = GenerationRequest(tok.encode(PROMPTS[i % len(PROMPTS)] + f" {i}"), params)
                got = []
                async for delta in engine.generate(req):
                    got.append(delta)
                    if i % 3 == 0 and len(got) == 3:
                        break  # client goes away: closing the stream aborts the request
                    if i % 3 == 1 and len(got) == 2:
                        engine.abort(req.request_id)  # explicit abort: the stream ends with "abort"
                return got

            return await asyncio.gather(*(client(i) for i in range(9)))

        results = run(burst())
        deadline = time.monotonic() + 10
        while engine.stats.slots_busy and time.monotonic() < deadline:  # broken streams end at the next step
            time.sleep(0.05)
        blocks = engine.scheduler.blocks
        assert not engine.scheduler.running and not engine.scheduler.waiting
        assert blocks.num_free == blocks.num_blocks == engine.stats.kv_blocks_free
        assert all(b.ref_count == 0 for b in blocks.blocks)
        assert engine.stats.requests_aborted == 6
    for i, got in enumerate(results):
        if i % 3 == 0:
            assert len(got) == 3 and got[-1].finish_reason is None
        elif i % 3 == 1:
            assert got[-1].finish_reason == "abort" and 2 <= got[-1].completion_tokens < 40
        else:
            assert got[-1].finish_reason == "length" and got[-1].completion_tokens == 40


def test_stop_string_across_token_boundaries(smollm2):
    model, tok = smollm2
    prompt = tok.encode("The history of the Roman Empire begins")
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    with running_engine(model, tok, parallel=2, ctx_size=256) as engine:
        full = run(collect(engine, GenerationRequest(prompt, params)))
        pieces = [d.text for d in full]
        # A stop string made of the end of one token and the start of a later one.
        i = next(i for i in range(4, len(pieces) - 2) if len(pieces[i]) >= 2 and len(pieces[i + 1]) >= 2)
        stop = pieces[i][-2:] + pieces[i + 1] + pieces[i + 2][:1]
        assert len(stop) >= 5
        text = text_of(full)
        cut = text.index(stop)
        stopped = run(
            collect(
                engine, GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=24, stop=(stop, "@@@")))
            )
        )
    assert text_of(stopped) == text[:cut]
    assert stopped[-1].finish_reason == "stop"
    streamed = ""
    for d in stopped:  # what was streamed is always a prefix of the final text: nothing retracted
        streamed += d.text
        assert text[:cut].startswith(streamed)


def test_eos_ends_with_stop_and_is_not_shown(smollm2):
    model, tok = smollm2
    chat = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    params = SamplingParams(temperature=0.0, max_tokens=64)
    with running_engine(model, tok, parallel=1, ctx_size=256) as engine:
        deltas = run(collect(engine, GenerationRequest(tok.encode(chat), params)))
    assert deltas[-1].finish_reason == "stop" and deltas[-1].token_ids[0] in tok.eog_ids | {tok.eos_id}
    assert "<|im_end|>" not in text_of(deltas) and text_of(deltas).strip()
    assert deltas[-1].completion_tokens == len(deltas) < 64


def test_seed_gives_the_same_text(smollm2):
    """Same seed + prompt = same text; each request draws from its own generator.

    Batch composition is held fixed between the compared runs: on the CPU the bfloat16 matmuls are not
    batch-invariant to the last bit, so a sampled token may differ once another sequence joins the batch.
    """
    model, tok = smollm2
    prompt = tok.encode("Tell me a story about a dragon.")
    seeded = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234, max_tokens=24, ignore_eos=True)
    other = dataclasses.replace(seeded, seed=99)
    with running_engine(model, tok, parallel=3, ctx_size=256) as engine:
        first = tokens_of(run(collect(engine, GenerationRequest(prompt, seeded))))
        second = tokens_of(run(collect(engine, GenerationRequest(prompt, seeded))))

        async def crowded():
            return await asyncio.gather(
                *(collect(engine, GenerationRequest(prompt, p)) for p in (seeded, other, seeded))
            )

        a, b, c = (tokens_of(r) for r in run(crowded()))
    assert first == second
    assert a == c  # a shared generator would have given the two copies different draws
    assert b != a


def test_busy_without_queue_wait_and_fifo_with_it(smollm2):
    model, tok = smollm2
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    with running_engine(model, tok, parallel=1, ctx_size=128) as engine:

        async def two():
            return await asyncio.gather(
                *(collect(engine, GenerationRequest(tok.encode(f"Request {i}"), params)) for i in range(2)),
                return_exceptions=True,
            )

        outcomes = run(two())
        assert sum(isinstance(o, EngineBusy) for o in outcomes) == 1
        assert sum(isinstance(o, list) and o[-1].finish_reason == "length" for o in outcomes) == 1
        assert engine.stats.requests_rejected == 1
    with running_engine(model, tok, parallel=1, ctx_size=128, queue_wait=30) as engine:
        finished: list[int] = []

        async def queued():
            async def client(i):
                await asyncio.sleep(0.05 * i)  # submission order 0, 1, 2
                deltas = await collect(engine, GenerationRequest(tok.encode(f"Request {i}"), params))
                finished.append(i)
                return deltas

            return await asyncio.gather(*(client(i) for i in range(3)))

        results = run(queued())
    assert finished == [0, 1, 2]
    assert all(r[-1].finish_reason == "length" for r in results)


def test_context_overflow_refused_before_a_slot(smollm2):
    model, tok = smollm2
    with running_engine(model, tok, parallel=1, ctx_size=64) as engine:
        prompt = tok.encode("word " * 60)[:60]
        with pytest.raises(ContextOverflow, match="context size of 64"):
            run(collect(engine, GenerationRequest(prompt, SamplingParams(max_tokens=5))))
        assert engine.stats.requests_total == 0
        ok = run(collect(engine, GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=4))))
        assert ok[-1].completion_tokens <= 4


class DigitsOnly:
    """A TokenConstraint over the real vocabulary: tokens that decode to one ASCII digit, five of them."""

    def __init__(self, tok) -> None:
        self.allowed = {t for t in (tok.token_to_id(d) for d in "0123456789") if t is not None}
        self.count = 0

    def mask_key(self):
        return ("digits",)

    def fill_mask(self, row: np.ndarray) -> None:
        for token in self.allowed:
            row.view(np.uint32)[token // 32] |= np.uint32(1 << (token % 32))

    def advance(self, token_id: int) -> None:
        assert token_id in self.allowed
        self.count += 1

    def is_finished(self) -> bool:
        return self.count >= 5


def test_constraint_and_logprobs_through_the_engine(smollm2):
    model, tok = smollm2
    constraint = DigitsOnly(tok)
    params = SamplingParams(temperature=0.0, max_tokens=20, logprobs=2)
    with running_engine(model, tok, parallel=1, ctx_size=256) as engine:
        prompt = tok.encode("My favourite number is")
        deltas = run(collect(engine, GenerationRequest(prompt, params, constraint=constraint)))
    text = text_of(deltas)
    assert len(text) == 5 and text.isdigit() and deltas[-1].finish_reason == "stop"
    for d in deltas:
        (lp,) = d.logprobs
        assert lp.token_id == d.token_ids[0] and lp.top[0][0] == lp.token_id  # greedy: the best one
        assert lp.logprob == pytest.approx(lp.top[0][1]) and lp.top[0][1] >= lp.top[1][1]
        assert lp.logprob <= 0.0


def test_out_of_vocabulary_ids_fail_only_their_request(smollm2):
    model, tok = smollm2
    greedy = SamplingParams(temperature=0.0, max_tokens=3)
    with running_engine(model, tok, parallel=2, ctx_size=64) as engine:
        with pytest.raises(ValueError, match="prompt_ids"):
            run(collect(engine, GenerationRequest([1, tok.vocab_size + 5], greedy)))
        with pytest.raises(ValueError, match="logit_bias"):
            run(
                collect(
                    engine, GenerationRequest([1, 2], SamplingParams(max_tokens=3, logit_bias={tok.vocab_size: 1.0}))
                )
            )
        ok = run(collect(engine, GenerationRequest(tok.encode("Hello"), greedy)))
        assert ok[-1].finish_reason in ("length", "stop") and engine.stats.requests_failed == 0


def test_choices_share_their_prompt_and_draw_their_own_streams(smollm2_exact):
    """generate_many: the prompt computed once (the others reuse its blocks), each seed its own tokens."""
    model, tok = smollm2_exact
    prompt = tok.encode("Once upon a time, in a village by the mountains, there lived " * 3)
    requests = [
        GenerationRequest(prompt, SamplingParams(temperature=1.0, seed=s, max_tokens=6, ignore_eos=True))
        for s in (1, 2, 3)
    ]
    with running_engine(model, tok, parallel=3, ctx_size=256) as engine:

        async def all_choices():
            return await asyncio.gather(*(collect_stream(s) for s in engine.generate_many(requests)))

        together = run(all_choices())
        assert engine.stats.prefill_tokens_total < 2 * len(prompt)  # once, plus the followers' last partial blocks
    with running_engine(model, tok, parallel=1, ctx_size=256) as engine:
        alone = [tokens_of(run(collect(engine, r))) for r in requests]
    assert [tokens_of(d) for d in together] == alone
    assert together[0][-1].cached_tokens == 0 and together[1][-1].cached_tokens == together[2][-1].cached_tokens > 0


def test_more_choices_than_slots_queue_and_reuse_the_prompt(smollm2_exact):
    """generate_many past --parallel: with one slot, the choices run one after another (no EngineBusy at
    queue_wait 0), each the tokens it draws alone, and the queued ones take the prompt from the prefix cache."""
    model, tok = smollm2_exact
    prompt = tok.encode("Far away, beyond the hills and the old stone bridge, a small town " * 2)
    requests = [
        GenerationRequest(prompt, SamplingParams(temperature=1.0, seed=s, max_tokens=4, ignore_eos=True))
        for s in (4, 5, 6)
    ]
    with running_engine(model, tok, parallel=1, ctx_size=256) as engine:

        async def all_choices():
            return await asyncio.gather(*(collect_stream(s) for s in engine.generate_many(requests)))

        together = run(all_choices())
        full = (len(prompt) - 1) // 16 * 16
        assert engine.stats.prefill_tokens_total == len(prompt) + 2 * (len(prompt) - full)
        assert engine.stats.cached_tokens_total == 2 * full > 0
    with running_engine(model, tok, parallel=1, ctx_size=256) as engine:
        alone = [tokens_of(run(collect(engine, r))) for r in requests]
    assert [tokens_of(d) for d in together] == alone
    assert [d[-1].cached_tokens for d in together] == [0, full, full]


async def collect_stream(stream):
    return [delta async for delta in stream]


def test_prompt_logprobs_match_the_models_own_logits(smollm2_exact):
    """Computed chunk by chunk in the engine (no prefix cache), equal to one pass over the whole prompt."""
    import torch

    from lexi.model.single import SingleSequence

    model, tok = smollm2_exact
    prompt = tok.encode("The quick brown fox jumps over the lazy dog, and then it sleeps under a tree. " * 2)
    params = SamplingParams(temperature=0.0, max_tokens=1)
    with running_engine(model, tok, parallel=1, ctx_size=256, batch_size=16) as engine:  # several prefill chunks
        run(collect(engine, GenerationRequest(prompt, params)))  # its blocks are cached now
        deltas = run(collect(engine, GenerationRequest(prompt, params, prompt_logprobs=2)))
    got = deltas[0].prompt_logprobs
    assert len(got) == len(prompt) and got[0] is None and deltas[0].cached_tokens == 0
    logits = SingleSequence(model, len(prompt)).extend(prompt, all_logits=True)
    expected = torch.log_softmax(logits.float(), dim=-1)
    for i, lp in enumerate(got[1:], start=1):
        assert lp.token_id == prompt[i]
        assert lp.logprob == pytest.approx(float(expected[i - 1, prompt[i]]), abs=1e-4)
        assert [t for t, _ in lp.top] == expected[i - 1].topk(2).indices.tolist()
