"""The Triton serving path, end to end on a CPU: `--kernels triton` under Triton's interpreter.

The model keeps its linear weights as GGUF blocks (the CUDA layout) and every step runs the real Triton kernels:
the quantized GEMV/GEMM over those blocks and the paged decode/prefill attention over the block table. Through
the engine, with sequences batched beside each other, prompts prefilled in chunks next to decoding rows and a
prefix-cache hit, each family's greedy tokens must equal those of the reference path at float32.

The tiny files keep 1024 tokens of SmolLM2's vocabulary: the interpreter pays for each weight element of each
step, and a 49152-row output layer would cost more than the rest of the model together.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from tiny_gguf import TinySpec, small_vocab, write_tiny_gguf

from lexi.engine.config import EngineConfig
from lexi.engine.engine import Engine
from lexi.engine.ngram import SpecConfig
from lexi.engine.request import GenerationRequest
from lexi.engine.sampling import SamplingParams
from lexi.gguf.reader import read_gguf
from lexi.gguf.tokenizer import Tokenizer
from lexi.model.loader import LoadConfig, load_model
from lexi.model.single import SingleSequence

VOCAB = 1024
# Every quantized type a model layer hands to qmatmul appears in some family (F32/F16/BF16 weights load dense).
SPECS = {
    "llama": TinySpec(
        "llama", dim=256, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=512,
        linear_types=(Q.Q4_K, Q.Q6_K, Q.Q5_K, Q.Q2_K, Q.Q3_K), embed_type=Q.Q4_K, tied=False, output_type=Q.Q6_K,
    ),
    "qwen2": TinySpec(
        "qwen2", dim=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=256,
        linear_types=(Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0), qkv_bias=True, tied=False, rope_base=1e6,
    ),
    "qwen3": TinySpec(
        "qwen3", dim=128, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=64, ffn_dim=256,
        linear_types=(Q.Q5_1, Q.Q8_0, Q.Q4_0), embed_type=Q.Q8_0, qk_norm=True, tied=True, rope_base=1e6,
    ),
    # Layer 0 slides over 8 tokens, layer 1 is global: prompts of 20-40 tokens cross the window.
    "gemma3": TinySpec(
        "gemma3", dim=256, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=64, ffn_dim=512,
        linear_types=(Q.Q6_K, Q.Q4_K, Q.Q5_0, Q.Q8_0), embed_type=Q.Q8_0, qk_norm=True, tied=True,
        sandwich_norm=True, sliding_window=8, sliding_window_pattern=2,
    ),
    # The fused MoE's GEMV (decode rows) and grouped GEMM (prefill chunks) inside the model.
    "qwen3moe": TinySpec(
        "qwen3moe", dim=256, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=64, ffn_dim=512,
        linear_types=(Q.Q8_0, Q.Q4_K), embed_type=Q.Q8_0, qk_norm=True, tied=True, rope_base=1e6,
        n_experts=4, n_experts_used=2, expert_ffn_dim=256, expert_types=(Q.Q4_K, Q.Q8_0, Q.Q6_K),
    ),
}  # fmt: skip
GREEDY = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("triton_path")
    vocab = small_vocab(smollm2_gguf.metadata, VOCAB)
    return {
        name: write_tiny_gguf(root / f"tiny-{name}.gguf", spec, vocab, seed=10 + i)
        for i, (name, spec) in enumerate(SPECS.items())
    }


def _prompts(seed: int) -> tuple[list[list[int]], list[int]]:
    """Three prompts admitted together (lengths 37, 9, 23) and a fourth sharing the first one's 32-token prefix."""
    import random

    rng = random.Random(seed)
    draw = lambda n: [rng.randrange(300, VOCAB) for _ in range(n)]  # noqa: E731
    first = draw(37)
    return [first, draw(9), draw(23)], first[:32] + draw(6)


def _serve(model, tokenizer, batch: list[list[int]], later: list[int], spec: SpecConfig | None = None,
           params: SamplingParams = GREEDY):  # fmt: skip
    """Tokens of each request of `batch` (admitted together) and then of `later`, and `later`'s cached tokens.

    batch_size 20 cuts the long prompts into chunks that share steps with the other rows (mixed steps run the
    prefill kernel, steps of decode rows only the decode kernel; 20 rows and more take the GEMM, fewer the GEMV).
    With `spec`, the engine's stats are returned too.
    """
    config = EngineConfig(parallel=4, ctx_size=64, batch_size=20, block_size=16, spec=spec or SpecConfig("off"))
    engine = Engine(model, tokenizer, config)
    engine.start()

    async def collect(stream):
        return [d async for d in stream]

    async def run():
        streams = engine.generate_many([GenerationRequest(p, params) for p in batch])
        together = await asyncio.gather(*(collect(s) for s in streams))
        after = await collect(engine.generate(GenerationRequest(later, params)))
        return together, after

    try:
        together, after = asyncio.run(run())
        stats = engine.stats.snapshot()
    finally:
        engine.shutdown()
    tokens = lambda deltas: [t for d in deltas for t in d.token_ids]  # noqa: E731
    result = [tokens(d) for d in together] + [tokens(after)], after[-1].cached_tokens
    return (*result, stats) if spec is not None else result


@pytest.mark.parametrize("name", list(SPECS))
def test_triton_kernels_through_the_engine_match_the_reference(tiny_models, name):
    f = read_gguf(tiny_models[name])
    tokenizer = Tokenizer.from_gguf(f)
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="reference"))
    tri = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="triton"))
    # The CUDA layout: every layer's weight in GGUF blocks read by the Triton kernels, no CPU decode copies.
    linears = [m for m in tri.modules() if type(m).__name__ == "QuantLinear"]
    assert linears and all(m.qweight is not None and m.kernels == "triton" and m.cpu is None for m in linears)
    assert tri.kernels == "triton" and tri.decode_stack is None and not tri.cpu_paths
    assert {m.qweight.qtype for m in linears} >= set(SPECS[name].linear_types)
    batch, later = _prompts(seed=len(name))
    want, want_cached = _serve(ref, tokenizer, batch, later)
    started = time.monotonic()
    got, got_cached = _serve(tri, tokenizer, batch, later)
    print(f"{name}: triton engine run {time.monotonic() - started:.1f} s; tokens {got}")
    assert want_cached == got_cached == 32  # the fourth request reused the first one's two full blocks
    assert got == want
    # Greedy tokens of random models can hinge on few inputs; the logits of every prompt position, prefilled in
    # uneven chunks (GEMM and GEMV rows, the prefill kernel over cached blocks), must agree too.
    ids = batch[0][:30]
    expected = SingleSequence(ref, 32, block_size=8).extend(ids, all_logits=True)
    seq = SingleSequence(tri, 32, block_size=8)
    logits = torch.cat([seq.extend(ids[a:b], all_logits=True) for a, b in ((0, 19), (19, 20), (20, 30))])
    span = float(expected.max() - expected.min())
    assert float((logits - expected).abs().max()) <= 1e-4 * span
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_speculation_on_the_triton_path_matches_the_reference(tiny_models, name):
    """--spec ngram with --kernels triton: a draft's positions are extra query rows of the prefill kernel beside
    decoding rows (and the GEMV/GEMM over GGUF blocks); greedy tokens equal the reference path's with speculation
    off. The prompts repeat themselves so that drafts are proposed (a random model takes few of them; every check
    still runs the multi-row step)."""
    f = read_gguf(tiny_models[name])
    tokenizer = Tokenizer.from_gguf(f)
    ref = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="reference"))
    tri = load_model(f, LoadConfig(dtype="float32", device="cpu", kernels="triton"))
    # a step's draft budget (lexi/engine/draft_budget.py): the Triton GEMV's rows; dense float32 has no limit
    assert tri.cheap_rows == 16 and ref.cheap_rows is None
    batch, later = _prompts(seed=3 + len(name))
    batch = [p[:12] * 3 for p in batch]  # every 2-gram of the prompt has a continuation to propose
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    want, want_cached = _serve(ref, tokenizer, batch, later, params=params)
    got, got_cached, stats = _serve(tri, tokenizer, batch, later, SpecConfig("ngram", 4, 1), params)
    assert got == want and got_cached == want_cached
    assert stats["spec_steps_total"] > 0 and stats["spec_proposed_total"] > stats["spec_steps_total"]
    assert stats["kv_blocks_used"] == 0
