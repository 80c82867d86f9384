"""The CPU decode step as one C call (lexi/model/decode_c.py, lexi/kernels/cpu/decode.c) against the lean loop it
replaces (decode_cpu.run_decode, torch ops between the same kernels), over every family the CPU serves: SmolLM2
(llama: adjacent-pair rope), Gemma 3 (halves rope, q/k norms, sandwich norms, GELU, sliding windows), tiny qwen3moe
(experts, softmax-then-top-k routing) and tiny gpt-oss (biases, sinks, top-k-then-softmax routing, the clamped
SwiGLU, windows passed within the prompt).

Each step starts from the same cache for both paths. With a float32 cache nothing is rounded between them but the
order of a few sums (the norms' mean, attention), which the int8 activations of the next matmul can turn into a
rounding step: within 1e-3 of the logit span, the same greedy token wherever the top two are apart. With the default
bfloat16 cache an ulp of q, k or v can flip too, and over steps each path reads its own cache: 2e-2 of the span.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from tiny_gguf import TinySpec, small_vocab, write_tiny_gguf

from lexi.gguf.reader import read_gguf
from lexi.kernels.attention_metadata import AttentionMetadata
from lexi.model.decode_c import DecodeProgram
from lexi.model.loader import LoadConfig, load_model

BLOCK = 16
VOCAB = 2048
TINY = {
    "qwen3moe": TinySpec(
        "qwen3moe", dim=256, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=512, qk_norm=True,
        rope_base=1e6, n_experts=8, n_experts_used=3, expert_ffn_dim=256, linear_types=(Q.Q8_0, Q.Q4_K),
        embed_type=Q.Q8_0, tied=False, output_type=Q.Q6_K, expert_types=(Q.Q4_K, Q.Q8_0, Q.Q6_K),
    ),
    "gpt-oss": TinySpec(
        "gpt-oss", dim=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=256, rope_base=150000.0,
        n_experts=4, n_experts_used=2, expert_ffn_dim=256, sliding_window=16, yarn=(32.0, 4096), tied=False,
        linear_types=(Q.Q8_0,), embed_type=Q.Q8_0, output_type=Q.Q8_0, expert_types=(Q.MXFP4,),
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory, smollm2_gguf):
    root = tmp_path_factory.mktemp("decode-c")
    vocab = small_vocab(smollm2_gguf.metadata, VOCAB)
    return {
        name: load_model(read_gguf(write_tiny_gguf(root / f"{name}.gguf", spec, vocab, seed=80 + i)), LoadConfig())
        for i, (name, spec) in enumerate(TINY.items())
    }


def model_named(name, request, tiny_models):
    if name in TINY:
        return tiny_models[name]
    return request.getfixturevalue({"smollm2": "smollm2_model", "gemma3": "gemma3_model"}[name])


@contextmanager
def program(model, chosen):
    """The model's steps through `chosen` (None: the lean loop), put back after."""
    kept = model.decode_program
    model.decode_program = chosen
    try:
        yield
    finally:
        model.decode_program = kept


def run_step(model, cache, tables, new: list[list[int]], cached: list[int]) -> torch.Tensor:
    meta = AttentionMetadata.build([len(n) for n in new], cached, tables, BLOCK, logits_of_last_only=False)
    with torch.inference_mode():
        return model(torch.tensor([t for n in new for t in n]), meta, cache)


def setup_two(model, cache_dtype, vocab):
    """Two sequences prefilled (the modules' path): the first's blocks consecutive, the second's shuffled; the
    second's prompt passes gpt-oss's 16-token window and ends mid-block."""
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(200, vocab, (37 + 22 * s,), generator=gen).tolist() for s in range(2)]
    per = 6
    kept, model.dtype = model.dtype, cache_dtype
    try:
        cache = model.new_kv_cache(2 * per + 1, BLOCK)
    finally:
        model.dtype = kept
    tables = [list(range(per)), list(range(2 * per, per, -1))]
    with program(model, None):
        for s, prompt in enumerate(prompts):
            run_step(model, cache, [tables[s]], [prompt], [0])
    return cache, tables, [len(p) for p in prompts]


def compare(got: torch.Tensor, want: torch.Tensor, tolerance: float, label: str) -> None:
    span = float(want.max() - want.min())
    err = float((got - want).abs().max())
    print(f"{label}: max |diff| {err:.2e} of a logit span {span:.1f}")
    assert err <= tolerance * span, label
    top2 = want.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * err
    assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear]), label


STEPS = (  # (label, tables of which sequences, rows each adds)
    ("one row each", (0, 1), (1, 1)),
    ("short rows", (0, 1), (5, 2)),
    ("lone sequence", (0,), (1,)),
    ("lone short", (1,), (3,)),
)


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "qwen3moe", "gpt-oss"])
def test_each_step_over_a_float32_cache_matches_the_loop(name, request, tiny_models):
    model = model_named(name, request, tiny_models)
    assert model.decode_program is not None, "the default CPU load runs the C step"
    c_program = DecodeProgram(model.decode_stack, torch.float32)
    vocab = min(model.args.vocab_size, 20000)
    cache, tables, cached = setup_two(model, torch.float32, vocab)
    gen = torch.Generator().manual_seed(9)
    for label, seqs, rows in STEPS:
        new = [torch.randint(200, vocab, (n,), generator=gen).tolist() for n in rows]
        out = {}
        for path, chosen in (("c", c_program), ("loop", None)):
            copy = [(k.clone(), v.clone()) for k, v in cache]
            with program(model, chosen):
                out[path] = (run_step(model, copy, [tables[s] for s in seqs], new, [cached[s] for s in seqs]), copy)
        compare(out["c"][0], out["loop"][0], 1e-3, f"{name} {label}")
        for layer, ((kc, vc), (kl, vl)) in enumerate(zip(out["c"][1], out["loop"][1], strict=True)):
            for which, a, b in (("k", kc, kl), ("v", vc, vl)):  # the rows this step wrote, and nothing else
                scale = float(b.abs().max())
                assert float((a - b).abs().max()) <= 1e-2 * scale, f"{name} {label} layer {layer} {which}"
        cache = out["loop"][1]
        for s, n in zip(seqs, rows, strict=True):
            cached[s] += n


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "qwen3moe", "gpt-oss"])
def test_steps_over_the_default_cache_follow_the_loop(name, request, tiny_models):
    """Eight steps teacher-forced, each path on its own bfloat16 cache (the serving case)."""
    model = model_named(name, request, tiny_models)
    assert model.dtype == torch.bfloat16 and model.decode_program.cache_dtype == torch.bfloat16
    vocab = min(model.args.vocab_size, 20000)
    gen = torch.Generator().manual_seed(11)
    feed = [[torch.randint(200, vocab, (2,), generator=gen).tolist() for _ in range(2)] for _ in range(7)]
    feed.append([[t] for t in torch.randint(200, vocab, (2,), generator=gen).tolist()])
    logits = {}
    for path in ("c", "loop"):
        cache, tables, cached = setup_two(model, torch.bfloat16, vocab)
        with program(model, model.decode_program if path == "c" else None):
            steps = []
            for new in feed:
                steps.append(run_step(model, cache, tables, new, cached))
                cached = [c + len(n) for c, n in zip(cached, new, strict=True)]
        logits[path] = torch.cat(steps)
    compare(logits["c"], logits["loop"], 2e-2, f"{name} eight steps")


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "gpt-oss"])
def test_a_short_step_gives_the_bits_of_one_row_a_step(name, request, tiny_models):
    """A speculative step checks a draft's positions as rows of one step: each row's logits and the K/V it writes
    must be, bit for bit, those of feeding its tokens one step at a time, or greedy output with speculation would
    differ from without. decode_attn.c cuts a step's query vectors into pieces across a sequence's rows, over the
    union of their keys: a row's weights outside its own keys are zero and its sums keep their order (gpt-oss:
    every row's 16-key window starts elsewhere, and sinks)."""
    model = model_named(name, request, tiny_models)
    vocab = min(model.args.vocab_size, 20000)
    gen = torch.Generator().manual_seed(13)
    rows = [torch.randint(200, vocab, (n,), generator=gen).tolist() for n in (9, 3)]
    cache, tables, cached = setup_two(model, torch.bfloat16, vocab)
    together = [(k.clone(), v.clone()) for k, v in cache]
    got = run_step(model, together, tables, rows, cached)
    want = []
    for s, new in enumerate(rows):
        for j, token in enumerate(new):
            want.append(run_step(model, cache, [tables[s]], [[token]], [cached[s] + j]))
    assert torch.equal(got, torch.cat(want)), name
    for (kt, vt), (ko, vo) in zip(together, cache, strict=True):
        assert torch.equal(kt, ko) and torch.equal(vt, vo), name


def test_a_step_outside_the_cache_is_refused(smollm2_model):
    model = smollm2_model
    cache = model.new_kv_cache(4, BLOCK)
    prog = model.decode_program
    x = torch.zeros(1, model.args.dim)
    for label, tables, why in (
        ("a position past its block table", [[0]], "past its block table"),
        ("a block id outside the pool", [[9, 1]], "block id is out of range"),
        ("a slot outside the pool", [[0, 1]], "slot is out of range"),
    ):
        meta = AttentionMetadata.build([1], [20], [[0, 1]], BLOCK)
        meta.block_tables = torch.tensor(tables, dtype=torch.int32)
        if label == "a slot outside the pool":
            meta.slot_mapping = torch.tensor([4 * BLOCK], dtype=torch.int64)
        rope = model.rope_global.table(meta.positions, 20)
        with pytest.raises(ValueError, match=why):
            prog.run(x, meta, rope, rope, cache)
        print(label, "refused")


def test_a_record_that_does_not_fit_the_kernels_is_refused(smollm2_model):
    prog = smollm2_model.decode_program
    record = prog.model.copy()
    record[3] = 7  # n_kv_heads: 9 heads are not groups of 7
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        prog.kernels.impl.decode_check(record.ctypes.data)
    layers = prog.layers.copy()
    layers[0, 8 + 3] = 1000  # q's rows no longer fill its columns
    record = prog.model.copy()
    record[-1] = layers.ctypes.data
    with pytest.raises(ValueError, match="fill the qkv columns|rows"):
        prog.kernels.impl.decode_check(record.ctypes.data)


def test_the_portable_loops_match_the_avx2_kernels(tmp_path, smollm2_gguf):
    """The same step on one bfloat16 cache through the portable C (the scalar ISA: its attention loops and matmuls)
    and through AVX2 (attn_avx2.c). The matmuls agree bit for bit across ISAs, so only attention's sum order
    differs. A tiny llama whose weights have no interleaved layout (Q5_K, Q3_K), so the scalar kernels read them."""
    from dataclasses import replace

    from lexi.kernels.cpu_qmatmul import CpuKernels, available_isas

    if "avx2" not in available_isas():
        pytest.skip("this CPU lacks AVX2: only the portable loops run here")
    spec = TinySpec("llama", dim=256, n_layers=2, n_heads=8, n_kv_heads=2, head_dim=32, ffn_dim=512,
                    linear_types=(Q.Q5_K, Q.Q3_K), embed_type=Q.Q8_0)  # fmt: skip
    path = write_tiny_gguf(tmp_path / "llama-k.gguf", spec, small_vocab(smollm2_gguf.metadata, VOCAB), seed=3)
    model = load_model(read_gguf(path), LoadConfig())
    assert all(w.layout == "file" for layer in model.decode_stack.layers for w in (*layer.qkv, layer.wo))
    scalar = CpuKernels(1, isa="scalar", activations=model.decode_stack.kernels.activations)
    portable = DecodeProgram(replace(model.decode_stack, kernels=scalar), torch.bfloat16)
    cache, tables, cached = setup_two(model, torch.bfloat16, VOCAB)
    new = [[700, 701, 702], [900]]
    out = {}
    for path_name, chosen in (("portable", portable), ("avx2", model.decode_program)):
        copy = [(k.clone(), v.clone()) for k, v in cache]
        with program(model, chosen):
            out[path_name] = run_step(model, copy, tables, new, cached)
    compare(out["portable"], out["avx2"], 2e-3, "tiny llama, portable against AVX2")
